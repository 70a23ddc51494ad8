"""The Outages port's contract: every test runs on RedisOutages (the test Redis; the table is the fleet's
one, so each test names services of its own) and on MemoryOutages, its twin, with a clock the test
moves. Pinned here: since when a service is down (the first time noted), cleared, read by every handle."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawltasks.backends.memory.fleet import MemoryOutages
from crawltasks.backends.redis.fleet import RedisOutages
from crawltasks.backends.redis.keys import Keys
from crawltasks.ports import Outages

from .helpers import MemorySide, RedisSide, assert_implements, one_side
from .test_hostqueues import FakeClock


def services() -> list[str]:
    """Two services of the test's own (the table is the fleet's one)."""
    return [f"Service-{uuid.uuid4().hex[:6]}" for _ in range(2)]


class Twin(MemorySide):
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.table: Outages = MemoryOutages(self.clock)
        self.services = services()

    def handle(self) -> Outages:
        return self.table

    def now(self) -> float:
        return self.clock.now

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds


class OnRedis(RedisSide):
    """RedisOutages on the test Redis; its times are the wall clock's, so time passes for real (briefly)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.table: Outages = RedisOutages(self.r)
        self.services = services()

    def handle(self) -> Outages:
        return RedisOutages(self.another_client())

    def now(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        self.r.hdel(Keys.outages, *self.services)  # fields of the fleet's table, not keys of their own
        super().close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def mine(side, table: Outages) -> dict[str, float]:
    """The table as the test's own services show in it."""
    return {name: since for name, since in table.current().items() if name in side.services}


def test_both_implement_every_method_of_the_port():
    assert_implements(Outages, RedisOutages, MemoryOutages)


def test_a_service_is_down_since_it_was_first_noted_until_cleared(side):
    db, broker = side.services
    assert mine(side, side.table) == {}
    before = side.now()
    side.table.record(db)
    after = side.now()
    side.advance(0.05)
    side.handle().record(db)  # another worker notes it too: the first time stays
    side.table.record(broker)
    down = mine(side, side.handle())
    assert set(down) == {db, broker} and before <= down[db] <= after < down[broker]
    side.table.clear(db)
    assert set(mine(side, side.table)) == {broker}
    side.table.clear(db)  # not down: harmless


def test_a_service_down_again_is_down_since_then(side):
    db = side.services[0]
    side.table.record(db)
    first = mine(side, side.table)[db]
    side.table.clear(db)
    side.advance(0.05)
    side.table.record(db)
    assert mine(side, side.table)[db] > first


def test_the_store_answers_a_ping(side):
    side.table.ping()


def test_redis_pings_raise_when_redis_is_away():
    away = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))  # nothing listens there
    table = RedisOutages(away)
    with pytest.raises(redis.ConnectionError):
        table.ping()
