"""The RobotsCache port's contract: every test runs on RedisRobots (the test Redis, origins of its own)
and on MemoryRobots, its twin, with a clock the test moves. Pinned here: texts by origin, replaced
with their TTL, expiry; the download lock's exclusivity and expiry, across handles and threads."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from crawltasks.backends.memory.sites import MemoryRobots
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.sites import RedisRobots
from crawltasks.ports import RobotsCache

from .helpers import MemorySide, RedisSide, age_keys, assert_implements, one_side
from .test_hostqueues import FakeClock


class Twin(MemorySide):
    """MemoryRobots with a clock the test moves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.cache: RobotsCache = MemoryRobots(self.clock)
        self.origins: list[str] = []

    def handle(self) -> RobotsCache:
        """Another worker's handle on the same cache."""
        return self.cache

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds


class OnRedis(RedisSide):
    """RedisRobots on the test Redis; time passing is the TTLs of the test's keys running down."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.cache: RobotsCache = RedisRobots(self.r)
        self.origins: list[str] = []

    def handle(self) -> RobotsCache:
        return RedisRobots(self.another_client())

    def advance(self, seconds: float) -> None:
        age_keys(self.r, self.test_keys(), seconds)

    def test_keys(self) -> list[str]:
        return [k for o in self.origins for k in (Keys.robots(o), Keys.robots_lock(o))]


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


@pytest.fixture
def origin(side) -> str:
    """An origin of the test's own (another: ``origin + "1"``, a port of its own)."""
    made = f"http://{uuid.uuid4().hex[:8]}.test:80"
    side.origins += [made, made + "1"]
    return made


def test_both_implement_every_method_of_the_port():
    assert_implements(RobotsCache, RedisRobots, MemoryRobots)


def test_a_text_kept_is_read_by_every_worker_and_an_unknown_origin_has_none(side, origin):
    assert side.cache.text(origin) is None
    side.cache.put(origin, "User-agent: *\nDisallow: /private\n", ttl=60)
    assert side.handle().text(origin) == "User-agent: *\nDisallow: /private\n"
    assert side.cache.text(origin + "1") is None


def test_an_empty_text_is_kept_as_empty_not_unknown(side, origin):
    side.cache.put(origin, "", ttl=60)  # a missing robots.txt: everything allowed
    assert side.cache.text(origin) == ""


def test_text_in_any_script_comes_back_as_written(side, origin):
    side.cache.put(origin, "# Ünïcode ✓ 日本\nUser-agent: *\n", ttl=60)
    assert side.cache.text(origin) == "# Ünïcode ✓ 日本\nUser-agent: *\n"


def test_a_text_expires_after_its_ttl_and_a_new_one_replaces_it_and_its_ttl(side, origin):
    side.cache.put(origin, "first", ttl=10)
    side.advance(8)
    side.cache.put(origin, "second", ttl=10)
    side.advance(8)  # 16 s after the first: the second's TTL counts
    assert side.cache.text(origin) == "second"
    side.advance(3)
    assert side.cache.text(origin) is None


def test_the_lock_is_one_takers_until_let_go(side, origin):
    other = side.handle()
    assert side.cache.lock(origin, ttl=60)
    assert not other.lock(origin, ttl=60) and not side.cache.lock(origin, ttl=60)
    assert other.lock(origin + "1", ttl=60)  # another origin's is apart
    side.cache.unlock(origin)
    assert other.lock(origin, ttl=60)
    side.cache.unlock(origin + "2")  # nothing held: harmless


def test_a_lock_not_let_go_frees_itself_after_its_ttl(side, origin):
    assert side.cache.lock(origin, ttl=60)
    side.advance(59)
    assert not side.handle().lock(origin, ttl=60)
    side.advance(2)
    assert side.handle().lock(origin, ttl=60)


def test_of_many_threads_one_takes_the_lock(side, origin):
    handles = [side.handle() for _ in range(8)]
    start, won = threading.Barrier(len(handles)), []

    def race(cache: RobotsCache) -> None:
        start.wait()
        won.append(cache.lock(origin, ttl=60))

    threads = [threading.Thread(target=race, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]


def test_a_ttl_of_nothing_is_refused(side, origin):
    with pytest.raises((ValueError, redis.ResponseError)):
        side.cache.put(origin, "x", ttl=0)


def test_redis_keeps_them_under_their_keys_with_their_ttl(redis_url):
    r, origin = redis.Redis.from_url(redis_url), f"https://{uuid.uuid4().hex[:8]}.test:443"
    try:
        cache = RedisRobots(r)
        cache.put(origin, "User-agent: *", ttl=600)
        assert cache.lock(origin, ttl=60)
        assert r.get(Keys.robots(origin)) == b"User-agent: *" and 599_000 < r.pttl(Keys.robots(origin)) <= 600_000
        assert r.get(Keys.robots_lock(origin)) == b"1" and 59_000 < r.pttl(Keys.robots_lock(origin)) <= 60_000
    finally:
        r.delete(Keys.robots(origin), Keys.robots_lock(origin))
        r.close()
