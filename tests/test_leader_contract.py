"""The LeaderLock port's contract: every test runs on RedisLeaderLock (the test Redis, lock names of its
own) and on MemoryLeaderLock, its twin, with a clock the test moves. Pinned here: one holder at a time,
renewal, letting go only one's own lock, the TTL that frees a dead holder's, names apart, threads."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from crawltasks.backends.memory.fleet import MemoryLeaderLock
from crawltasks.backends.redis.fleet import RedisLeaderLock
from crawltasks.backends.redis.keys import Keys
from crawltasks.ports import LeaderLock

from .helpers import MemorySide, RedisSide, age_keys, assert_implements, one_side
from .test_hostqueues import FakeClock


class Twin(MemorySide):
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.locks: LeaderLock = MemoryLeaderLock(self.clock)
        self.names = [f"lock-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> LeaderLock:
        return self.locks

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds


class OnRedis(RedisSide):
    """RedisLeaderLock on the test Redis; time passing is the TTLs of the test's locks running down."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.locks: LeaderLock = RedisLeaderLock(self.r)
        self.names = [f"lock-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> LeaderLock:
        return RedisLeaderLock(self.another_client())

    def advance(self, seconds: float) -> None:
        age_keys(self.r, self.test_keys(), seconds)

    def test_keys(self) -> list[str]:
        return [Keys.leader(n) for n in self.names]


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def test_both_implement_every_method_of_the_port():
    assert_implements(LeaderLock, RedisLeaderLock, MemoryLeaderLock)


def test_one_holder_at_a_time_who_may_renew(side):
    name, other = side.names[0], side.handle()
    assert side.locks.holder(name) is None
    assert side.locks.hold(name, "w1", ttl=5)
    assert not other.hold(name, "w2", ttl=5)
    assert side.locks.hold(name, "w1", ttl=5)  # renewed
    assert other.holder(name) == "w1"
    assert other.hold(side.names[1], "w2", ttl=5)  # another lock is apart


def test_only_the_holder_lets_go(side):
    name, other = side.names[0], side.handle()
    assert side.locks.hold(name, "w1", ttl=5)
    assert not other.release(name, "w2") and side.locks.holder(name) == "w1"
    assert side.locks.release(name, "w1") and side.locks.holder(name) is None
    assert not side.locks.release(name, "w1")  # again: nothing held
    assert other.hold(name, "w2", ttl=5)


def test_a_dead_holders_lock_is_free_after_its_ttl(side):
    name, other = side.names[0], side.handle()
    assert side.locks.hold(name, "w1", ttl=5)
    side.advance(4)
    assert not other.hold(name, "w2", ttl=5)
    side.advance(2)
    assert side.locks.holder(name) is None
    assert other.hold(name, "w2", ttl=5) and not side.locks.hold(name, "w1", ttl=5)


def test_renewing_restarts_the_ttl(side):
    name = side.names[0]
    assert side.locks.hold(name, "w1", ttl=5)
    side.advance(4)
    assert side.locks.hold(name, "w1", ttl=5)
    side.advance(4)  # 8 s after it was first taken
    assert side.locks.holder(name) == "w1"


def test_of_many_threads_one_takes_the_lock(side):
    name, handles = side.names[0], [side.handle() for _ in range(8)]
    start, won = threading.Barrier(len(handles)), {}

    def hold(i: int, locks: LeaderLock) -> None:
        start.wait()
        won[i] = locks.hold(name, f"w{i}", ttl=5)

    threads = [threading.Thread(target=hold, args=(i, h)) for i, h in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [winner] = [i for i, ok in won.items() if ok]
    assert side.locks.holder(name) == f"w{winner}"


def test_redis_keeps_the_dispatchers_lock_where_it_always_was(redis_url):
    assert Keys.leader("dispatcher") == Keys.dispatcher == "ct:dispatcher"
    r, name = redis.Redis.from_url(redis_url), f"lock-{uuid.uuid4().hex[:8]}"
    try:
        assert RedisLeaderLock(r).hold(name, "w1", ttl=5)
        assert r.get(Keys.leader(name)) == b"w1" and 4_900 < r.pttl(Keys.leader(name)) <= 5_000
    finally:
        r.delete(Keys.leader(name))
        r.close()
