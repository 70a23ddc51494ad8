"""The per-crawl time series and per-host counts that FINISH writes where pages are counted done: what
is counted, that it stays bounded (the life tier merges in pairs when a crawl outgrows it), and how
it is read back. Real Redis, the real scripts."""

from __future__ import annotations

import uuid

import pytest

from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import RedisState
from crawltasks.frontier.queues import HostPolicy
from crawltasks.models import Request
from crawltasks.monitor import series


@pytest.fixture
def cid(state: RedisState):
    crawl_id = f"ser-{uuid.uuid4().hex[:8]}"
    state.create_crawl(crawl_id, {}, [])
    yield crawl_id
    state.delete_crawl(crawl_id)


def reqs(*urls: str) -> list[Request]:
    return [Request(url=u, fp=uuid.uuid5(uuid.NAMESPACE_URL, u).hex + "00000000", ticket=u) for u in urls]


def test_finish_counts_outcomes_into_the_ring_the_life_tier_and_per_host(state, cid):
    frontier = RedisFrontier(state.r)
    urls = [f"http://a.test/{i}" for i in range(4)] + ["http://b.test/1", "http://b.test/2"]
    frontier.add(cid, reqs(*urls))
    taken = frontier.take(cid, 10, HostPolicy(concurrency=8, delay=0.0)).requests
    assert len(taken) == 6
    outcome = {"http://a.test/0": "failed", "http://b.test/2": "skipped"}
    state.finish(cid, [(r.ticket, outcome.get(r.ticket, "stored"), r.lease) for r in taken])
    state.finish(cid, [(taken[0].ticket, "stored", "")])  # a replay counts nothing more

    raw = state.series(cid)
    buckets = series.life(raw)
    assert sum(b.stored for b in buckets) == 4 and sum(b.failed for b in buckets) == 1
    assert sum(b.skipped for b in buckets) == 1 and buckets[0].width == series.WIDTH
    now, [window] = state.recent([cid], 60)
    assert (window.stored, window.failed, window.skipped) == (4, 1, 1)
    assert window.failure_rate == pytest.approx(1 / 5) and window.span > 0
    assert series.recent_from(raw, now, 60) == window
    assert state.host_done(cid) == {"a.test:80": (3, 1), "b.test:80": (1, 0)}  # skips are neither


def test_the_life_tier_merges_in_pairs_when_outgrown_and_keeps_every_count(state, cid):
    key = Keys.series(cid)
    now = state.now()
    width = series.WIDTH
    t0 = (now // width) * width - series.LIFE * width  # the crawl began LIFE buckets ago: it is full
    state.r.hset(key, mapping={"t0": t0, "w": width, **{f"l{i}": "1 1 0" for i in range(series.LIFE)}})
    RedisFrontier(state.r).add(cid, reqs("http://c.test/1"))
    state.finish(cid, [("http://c.test/1", "stored", "")])

    raw = state.series(cid)
    assert float(raw["w"]) == 2 * width
    lives = [k for k in raw if k.startswith("l")]
    assert len(lives) <= series.LIFE // 2 + 1
    buckets = series.life(raw)
    assert sum(b.stored for b in buckets) == series.LIFE + 1 and sum(b.failed for b in buckets) == series.LIFE
    assert buckets[0].stored == 2 and buckets[0].start == t0  # two neighbours made one

    # the twin registry's write (series.record) makes the same hash from the same one at the same time
    twin = {"t0": str(t0), "w": str(width), **{f"l{i}": "1 1 0" for i in range(series.LIFE)}}
    [bucket] = [int(v.split()[0]) for k, v in raw.items() if k.startswith("r")]
    series.record(twin, bucket * width, 1, 0, 0)
    assert twin == raw


def test_the_ring_forgets_a_slot_reused_by_a_later_bucket():
    fields = series.ring_fields(1000.0, 3)
    assert [b for b, _ in fields] == [98, 99, 100]
    stale = f"{98 - series.RING} 50 50 0"  # same slot, a bucket 15 minutes older
    w = series.window([stale, "99 3 1 0", "100 2 0 1"], fields, 1000.0)
    assert (w.stored, w.failed, w.skipped) == (5, 1, 1) and w.span == 20.0
    assert w.rate() == pytest.approx(5 / 20) and w.rate("done") == pytest.approx(7 / 20)
    assert series.window([None, None, None], fields, 1000.0, started_at=995.0).span == 5.0
    assert series.Window(0, 0, 0, 0).rate() is None and series.Window(0, 0, 0, 5).failure_rate is None


def test_every_crawl_key_of_monitoring_expires_with_the_crawl():
    working = Keys.working("x")
    assert Keys.series("x") in working and Keys.host_done("x") in working
