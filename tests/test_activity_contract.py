"""The CrawlActivity port's contract: the monitor's reads of what completion records, on RedisState
(FINISH in Lua, the frontier's SCHEDULE) and on MemoryRegistry sharing a MemoryFrontier. One scenario on
both: requests scheduled on two hosts, taken, finished stored, failed and skipped (one replayed), then
the time series, the recent window, per-host outcomes and the crawl's hosts read back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from crawltasks.backends.memory.frontier import MemoryFrontier
from crawltasks.backends.memory.registry import MemoryRegistry
from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.registry import RedisState
from crawltasks.frontier.queues import HostPolicy
from crawltasks.monitor import series
from crawltasks.ports import CrawlActivity, CrawlRegistry, Frontier

from .helpers import MemorySide, RedisSide, assert_implements, one_side
from .test_hostqueues import FakeClock, req

A, B = "a.test:80", "b.test:8080"


class Twin(MemorySide):
    """The registry sharing its frontier, as ``twin_runtime`` makes them; a clock in epoch seconds."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.clock.now = 1_764_000_000.0
        self.frontier: Frontier = MemoryFrontier(self.clock)
        self.reg: MemoryRegistry = MemoryRegistry(self.clock, frontier=self.frontier)
        self.crawl_id = "c"

    def wall(self) -> float:
        return self.clock()


class OnRedis(RedisSide):
    """RedisState and RedisFrontier on the test Redis, in a crawl of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.reg: RedisState = RedisState(self.r)
        self.frontier: Frontier = RedisFrontier(self.r)
        self.crawl_id = f"ac-{uuid.uuid4().hex[:8]}"

    def wall(self) -> float:
        return time.time()

    def close(self) -> None:
        self.reg.delete_crawl(self.crawl_id)
        super().close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def run_scenario(side: Twin | OnRedis) -> None:
    """Five requests on two hosts, taken, then: a.test two stored and one failed, b.test one stored
    and one skipped (skips count in the series, not per host); one outcome replayed (counted once)."""
    reg: CrawlRegistry = side.reg
    assert reg.create_crawl(side.crawl_id, {}, ["http://a.test/"])
    reqs = [req(f"http://a.test/{i}") for i in range(3)] + [req(f"http://b.test:8080/{i}") for i in range(2)]
    assert side.frontier.add(side.crawl_id, reqs) == [1] * 5
    taken = side.frontier.take(side.crawl_id, 10, HostPolicy(concurrency=10, delay=0.0)).requests
    by_url = {r.url: r for r in taken}
    outcome = {"http://a.test/0": "stored", "http://a.test/1": "stored", "http://a.test/2": "failed",
               "http://b.test:8080/0": "stored", "http://b.test:8080/1": "skipped"}
    done = [(by_url[u].ticket, o, by_url[u].lease) for u, o in outcome.items()]
    assert reg.finish(side.crawl_id, done[:3]) == (3, False)
    assert reg.finish(side.crawl_id, [done[0], *done[3:]]) == (2, True)


def test_both_implement_every_method_of_the_port():
    assert_implements(CrawlActivity, RedisState, MemoryRegistry)
    assert isinstance(MemoryRegistry(), CrawlActivity)


def test_outcomes_per_host_and_the_hosts_of_a_crawl(side):
    run_scenario(side)
    act: CrawlActivity = side.reg
    assert act.host_done(side.crawl_id) == {A: (2, 1), B: (1, 0)}
    assert act.host_done(side.crawl_id, [B, "c.test:80"]) == {B: (1, 0), "c.test:80": (0, 0)}
    assert act.host_done(side.crawl_id, []) == {}
    assert act.crawl_hosts(side.crawl_id) == [A, B]
    assert act.crawl_hosts(side.crawl_id, limit=1)[0] in (A, B)
    assert act.host_done("no-such-crawl") == {} and act.crawl_hosts("no-such-crawl") == []


def test_the_time_series_and_the_recent_window(side):
    run_scenario(side)
    act: CrawlActivity = side.reg
    raw = act.series(side.crawl_id)
    buckets = series.life(raw)
    assert (sum(b.stored for b in buckets), sum(b.failed for b in buckets), sum(b.skipped for b in buckets)) \
        == (3, 1, 1)
    recent = series.recent_from(raw, act.now(), 60)
    assert (recent.stored, recent.failed, recent.skipped) == (3, 1, 1)
    now, [window, empty] = act.recent([side.crawl_id, "no-such-crawl"], 60, [None, None])
    assert (window.stored, window.failed, window.skipped) == (3, 1, 1) and window.failure_rate == 0.25
    assert (empty.stored, empty.failed, empty.skipped) == (0, 0, 0) and empty.rate() is not None
    assert abs(now - side.wall()) < 5
    assert act.recent([], 60) == (pytest.approx(now, abs=5), [])
