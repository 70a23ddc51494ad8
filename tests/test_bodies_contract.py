"""The BodyStore port's contract: every test runs on RedisBodies (the test Redis, a crawl id of its own)
and on MemoryBodies, its twin, with a clock the test moves. What the twin copies of the real one is
pinned here: keys, order, replacement, dropping, expiry."""

from __future__ import annotations

import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.connection import AbstractConnection

from crawltasks.backends.memory.bodies import MemoryBodies
from crawltasks.backends.redis.bodies import RedisBodies, pack_body
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import RedisState
from crawltasks.ports import BodyStore

from .test_hostqueues import FakeClock


class Twin:
    """MemoryBodies with a clock the test moves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store: BodyStore = MemoryBodies(self.clock)
        self.crawl_id = "c"

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def left(self, key: str) -> float:
        """Seconds the body under ``key`` has left."""
        return self.store.kept[key][1] - self.clock.now

    def close(self) -> None:
        pass


class OnRedis:
    """RedisBodies in a crawl of its own. Time passing is what Redis' TTLs do: each of the crawl's
    bodies loses the seconds (gone at 0), so no test sleeps for a TTL of seconds."""

    def __init__(self, url: str) -> None:
        self.state = RedisState.from_url(url)
        self.store = RedisBodies(self.state.r)
        self.crawl_id = f"bc-{uuid.uuid4().hex[:8]}"

    def advance(self, seconds: float) -> None:
        for key in self.state.r.scan_iter(match=Keys.body(self.crawl_id, "*")):
            left = self.state.r.pttl(key) - int(seconds * 1000)
            self.state.r.pexpire(key, left) if left > 0 else self.state.r.delete(key)

    def left(self, key: str) -> float:
        return self.state.r.pttl(key) / 1000

    def close(self) -> None:
        self.state.delete_crawl(self.crawl_id)
        self.state.r.close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    impl = Twin() if request.param == "memory" else OnRedis(redis_url)
    yield impl
    impl.close()


PAGE = b"<html><body>" + b"<p>hello, world</p>" * 500 + b"</body></html>"


def test_parked_bodies_come_back_in_the_order_asked(side):
    bodies = {"t1": PAGE, "t2": b"", "t3": os.urandom(70_000)}  # empty, and incompressible
    keys = side.store.park(side.crawl_id, bodies, ttl=60)
    assert set(keys) == {"t1", "t2", "t3"}
    assert all(keys[t] == side.store.key(side.crawl_id, t) for t in bodies)
    assert len(set(keys.values())) == 3
    order = [keys["t3"], side.store.key(side.crawl_id, "never"), keys["t1"], keys["t2"]]
    assert side.store.load(order) == [bodies["t3"], None, PAGE, b""]


def test_nothing_to_park_load_or_drop_is_no_call(side):
    assert side.store.park(side.crawl_id, {}, ttl=60) == {}
    assert side.store.load([]) == []
    side.store.drop([])


def test_the_same_ticket_in_two_crawls_is_two_bodies(side):
    other = f"{side.crawl_id}-b"
    [mine] = side.store.park(side.crawl_id, {"t": b"mine"}, ttl=60).values()
    [theirs] = side.store.park(other, {"t": b"theirs"}, ttl=60).values()
    try:
        assert mine != theirs and side.store.load([mine, theirs]) == [b"mine", b"theirs"]
    finally:
        side.store.drop([theirs])


def test_parking_a_ticket_again_replaces_its_body_and_its_ttl(side):
    [key] = side.store.park(side.crawl_id, {"t": b"first"}, ttl=10).values()
    side.advance(8)
    side.store.park(side.crawl_id, {"t": b"refetched"}, ttl=10)
    side.advance(8)  # 16 s after the first park: the second one's TTL counts
    assert side.store.load([key]) == [b"refetched"]


def test_dropped_bodies_are_gone_and_the_others_stay(side):
    keys = side.store.park(side.crawl_id, {"a": b"A", "b": b"B"}, ttl=60)
    side.store.drop([keys["a"], side.store.key(side.crawl_id, "unknown")])
    assert side.store.load([keys["a"], keys["b"]]) == [None, b"B"]
    side.store.drop([keys["a"]])  # again: harmless


def test_a_body_expires_after_its_ttl(side):
    [key] = side.store.park(side.crawl_id, {"t": PAGE}, ttl=60).values()
    assert 59 < side.left(key) <= 60
    side.advance(59)
    assert side.store.load([key]) == [PAGE]
    side.advance(2)
    assert side.store.load([key]) == [None]


def test_a_ttl_of_nothing_is_refused(side):
    with pytest.raises((ValueError, redis.ResponseError)):
        side.store.park(side.crawl_id, {"t": b"x"}, ttl=0)


# --- the Redis side only: what the twin need not copy -----------------------------------------------

@pytest.fixture
def on_redis(redis_url: str) -> Iterator[OnRedis]:
    impl = OnRedis(redis_url)
    yield impl
    impl.close()


def round_trips(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Counts what is sent to Redis from now on (a pipeline is sent at once)."""
    sent = [0]
    original = AbstractConnection.send_packed_command

    def counting(self, *args, **kwargs):
        sent[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    return lambda: sent[0]


def test_each_call_is_one_round_trip_whatever_the_batch(on_redis, monkeypatch):
    on_redis.state.r.ping()  # the connection is made (its handshake is not counted)
    count = round_trips(monkeypatch)
    keys = on_redis.store.park(on_redis.crawl_id, {f"t{i}": PAGE for i in range(50)}, ttl=60)
    assert count() == 1
    assert on_redis.store.load(list(keys.values())) == [PAGE] * 50
    assert count() == 2
    on_redis.store.drop(list(keys.values()))
    assert count() == 3


def test_bodies_are_kept_compressed_and_old_zlib_ones_still_load(on_redis):
    r = on_redis.state.r
    [key] = on_redis.store.park(on_redis.crawl_id, {"t": PAGE}, ttl=60).values()
    assert r.get(key) == pack_body(PAGE) and len(r.get(key)) < len(PAGE) / 4
    old = Keys.body(on_redis.crawl_id, "old")
    r.set(old, zlib.compress(PAGE), ex=60)  # parked by a version before LZ4, during a rolling upgrade
    assert on_redis.store.load([old, key]) == [PAGE, PAGE]


def test_a_body_really_expires_in_redis(on_redis):
    [key] = on_redis.store.park(on_redis.crawl_id, {"t": b"x"}, ttl=1).values()
    on_redis.state.r.pexpire(key, 5)  # its last milliseconds
    deadline = time.monotonic() + 2
    while on_redis.store.load([key]) != [None] and time.monotonic() < deadline:
        time.sleep(0.005)
    assert on_redis.store.load([key]) == [None]
