"""State does not pile up: a finished crawl's keys expire after its retention (meta and stats ten times
later), a reopened crawl keeps its keys again, and the visited index holds only what visit_ttl can use."""

from __future__ import annotations

import inspect
import time
import uuid

import pytest

from crawltasks import start_crawl
from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import SUMMARY_FACTOR, RedisState
from crawltasks.frontier.queues import HostPolicy
from crawltasks.models import Request
from crawltasks.settings import ENV_RETENTION, CrawlOptions

from .helpers import wait_for
from .sites import FAST, page, serve

RETENTION = 2.0  # seconds: TTLs are read, never waited for, except in the one test that watches keys vanish
POLICY = HostPolicy(concurrency=8, delay=0.0)


def reqs(*urls: str) -> list[Request]:
    return [Request(url=u, fp=uuid.uuid5(uuid.NAMESPACE_URL, u).hex + "00000000", ticket=u) for u in urls]


def crawl_keys(state: RedisState, crawl_id: str) -> dict[str, int]:
    """Every key of the crawl as Redis has it (a SCAN, so nothing ``Keys`` forgets is missed) -> pttl."""
    keys = [k.decode() for k in state.r.scan_iter(match=f"ct:{{{crawl_id}}}:*", count=1000)]
    return {k: state.r.pttl(k) for k in keys}


@pytest.fixture
def cid(state: RedisState):
    crawl_id = f"ret-{uuid.uuid4().hex[:8]}"
    state.create_crawl(crawl_id, {"retention": RETENTION}, [])
    yield crawl_id
    state.delete_crawl(crawl_id)


def run_to_finish(state: RedisState, crawl_id: str, failed: str = "") -> bool:
    """Schedule, take, fetch and finish requests on two hosts the way the pipeline does; the Bloom filter
    and per-host limits are touched too, so that every kind of key exists."""
    frontier = RedisFrontier(state.r)
    frontier.add(crawl_id, reqs("http://a.test/1", "http://a.test/2", "http://b.test/1"))
    frontier.set_limits(crawl_id, "a.test:80", POLICY)
    state.bloom_filter(crawl_id, 1000, 0.01).add("f" * 40)
    taken = frontier.take(crawl_id, 10, POLICY).requests
    assert len(taken) == 3
    frontier.fetched(crawl_id, [r.lease for r in taken])
    outcomes = [(r.ticket, "failed" if r.ticket == failed else "stored", r.lease) for r in taken]
    return state.finish(crawl_id, outcomes)[1]


def test_a_finished_crawls_keys_all_expire_and_its_summary_later(state, cid):
    assert run_to_finish(state, cid)
    ttls = crawl_keys(state, cid)
    summary = set(Keys.summary(cid))
    assert summary < set(ttls) and {Keys.seen(cid), Keys.outcome(cid), Keys.bloom(cid)} < set(ttls)
    for key, ttl in ttls.items():
        limit = RETENTION * SUMMARY_FACTOR if key in summary else RETENTION
        assert 0 < ttl <= limit * 1000, (key, ttl)
    assert min(ttls[k] for k in summary) > RETENTION * 1000  # the summary outlives the working state
    assert cid not in state.active_crawls() and cid in state.crawl_ids()


def test_every_key_of_a_crawl_is_covered(cid):
    """A per-crawl key added to ``Keys`` must be in ``working`` or ``summary``, or it would never expire."""
    covered = set(Keys.working(cid)) | set(Keys.summary(cid))
    for name, fn in vars(Keys).items():
        if not isinstance(fn, staticmethod) or name in ("queue_prefix", "working", "summary"):
            continue
        params = list(inspect.signature(fn.__func__).parameters)
        if params == ["crawl_id"]:
            assert fn.__func__(cid) in covered, name


def test_a_cancelled_crawl_expires_too(state, cid):
    frontier = RedisFrontier(state.r)
    frontier.add(cid, reqs("http://c.test/1", "http://c.test/2"))
    assert state.control(cid, ["running"], "cancelling")
    frontier.drop_queued(cid)
    assert state.check_finished(cid) and state.state_of(cid) == "cancelled"
    assert all(ttl > 0 for ttl in crawl_keys(state, cid).values())


def test_queued_requests_of_a_finished_crawl_expire_with_it(state, cid):
    """Robustness: whatever is still queued when a crawl is retired expires with the rest."""
    RedisFrontier(state.r).add(cid, reqs("http://q.test/1"))
    state.r.hset(Keys.meta(cid), "finished_at", time.time())
    assert state.retire(cid)
    ttls = crawl_keys(state, cid)
    assert Keys.queues(cid, "q.test:80")[1] in ttls and all(ttl > 0 for ttl in ttls.values())


def test_a_reopened_crawl_keeps_its_keys(state, cid):
    assert run_to_finish(state, cid, failed="http://a.test/2")
    state.reopen(cid)  # continued by id
    assert all(ttl == -1 for ttl in crawl_keys(state, cid).values())
    assert cid in state.active_crawls() and not state.is_finished(cid)
    assert state.check_finished(cid)
    assert all(ttl > 0 for ttl in crawl_keys(state, cid).values())
    assert state.redrive(cid, ["http://a.test/2"]) == [True]  # retry-failed
    assert all(ttl == -1 for ttl in crawl_keys(state, cid).values())
    assert not state.retire(cid)  # a late retire of the earlier finish changes nothing now
    assert all(ttl == -1 for ttl in crawl_keys(state, cid).values()) and cid in state.active_crawls()


def test_retention_zero_keeps_everything(state):
    crawl_id = f"ret-{uuid.uuid4().hex[:8]}"
    state.create_crawl(crawl_id, {"retention": 0}, [])
    try:
        assert run_to_finish(state, crawl_id)
        assert all(ttl == -1 for ttl in crawl_keys(state, crawl_id).values())
        assert crawl_id not in state.active_crawls()
    finally:
        state.delete_crawl(crawl_id)


def test_keys_really_vanish_and_the_registry_forgets_expired_summaries(state):
    crawl_id = f"ret-{uuid.uuid4().hex[:8]}"
    state.create_crawl(crawl_id, {"retention": 0.2}, [])
    try:
        assert run_to_finish(state, crawl_id)
        summary = set(Keys.summary(crawl_id))
        # the working keys expire after 0.2 s; the summary (10 x retention) is still there then
        assert wait_for(lambda: set(crawl_keys(state, crawl_id)) == summary, timeout=1.5, interval=0.05), \
            crawl_keys(state, crawl_id)
        assert crawl_id in state.crawl_ids() and state.stats(crawl_id)["stored"] == 3
        for key in Keys.summary(crawl_id):
            state.r.pexpire(key, 1)  # the summary's turn (10 x retention), without waiting for it
        assert wait_for(lambda: crawl_id not in state.crawl_ids(), timeout=1.5, interval=0.02), \
            "the registry still lists a crawl whose summary expired"
        assert state.r.zscore(Keys.crawls, crawl_id) is None
    finally:
        state.delete_crawl(crawl_id)


def test_the_visited_index_keeps_only_what_visit_ttl_can_use(state):
    spider = f"v-{uuid.uuid4().hex[:6]}"
    key = Keys.visited(spider)
    try:
        old = time.time() - 100
        state.r.zadd(key, {f"old{i}": old for i in range(50)})
        state.mark_visited(spider, ["a", "b"], ttl=10)
        assert state.r.zcard(key) == 2 and 0 < state.r.pttl(key) <= 10_000
        a, b, gone = state.visited_at(spider, ["a", "b", "old1"])
        assert a is not None and abs(a - time.time()) < 5 and b == a and gone is None
    finally:
        state.r.delete(key)


def test_a_visited_hash_of_an_earlier_version_still_answers_then_is_replaced(state):
    spider = f"v-{uuid.uuid4().hex[:6]}"
    key = Keys.visited(spider)
    try:
        state.r.hset(key, mapping={"a": 123.5})
        assert state.visited_at(spider, ["a", "z"]) == [123.5, None]
        state.mark_visited(spider, ["b"], ttl=60)
        assert state.r.type(key) == b"zset" and state.visited_at(spider, ["a", "b"])[0] is None
    finally:
        state.r.delete(key)


def test_retention_option_defaults_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_RETENTION, raising=False)
    assert CrawlOptions().retention == 7 * 24 * 3600
    monkeypatch.setenv(ENV_RETENTION, "60")
    assert CrawlOptions().retention == 60
    with pytest.raises(ValueError):
        CrawlOptions(retention=-1)


def test_a_crawl_through_the_pipeline_leaves_only_expiring_keys(worker, rt, crawl_id):
    server = serve({"/": page("Home", ["/1", "/2"]), "/1": page("1", ["/2"]), "/2": page("2")})
    try:
        # a retention long enough that no key expires while the test reads them (a 2 s one did, on a busy machine)
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, retention=30.0, visit_ttl=30, **FAST)
        assert crawl.wait(timeout=30) and crawl.stats()["stored"] == 3
        ttls = crawl_keys(rt.state, crawl_id)
        assert ttls and all(0 < ttl <= 30.0 * SUMMARY_FACTOR * 1000 for ttl in ttls.values()), ttls
        assert 0 < rt.state.r.pttl(Keys.visited("site")) <= 30_000
        again = start_crawl(crawl_id=crawl_id, rt=rt)  # continued by id: reopened, then finished at once
        assert again.wait(timeout=30)
        ttls = crawl_keys(rt.state, crawl_id)
        assert ttls and all(ttl > 0 for ttl in ttls.values()), ttls
    finally:
        rt.state.r.delete(Keys.visited("site"))
        rt.state.delete_crawl(crawl_id)
        rt.storage.delete_crawl(crawl_id)
        server.stop()
