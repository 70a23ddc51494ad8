"""The CrawlRegistry port's contract: every test runs on RedisState (the test Redis, crawls of its own)
and on MemoryRegistry, its twin, with a clock the test moves. What the twin copies of the Lua is pinned
here: creation, counters, each ticket counted once under concurrent finishes, completion at pending 0
(not while held open; cancelled when cancelling), lost crawls, control transitions, dedupe in both
modes, redrive, retirement and expiry, visits, notification marks."""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from crawltasks.backends.memory.frontier import MemoryFrontier
from crawltasks.backends.memory.registry import MemoryRegistry
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import COUNTERS, RedisState
from crawltasks.frontier.queues import HostPolicy
from crawltasks.models import Request
from crawltasks.ports import CrawlRegistry
from crawltasks.states import CrawlState

from .test_hostqueues import FakeClock

RUNNING, PAUSED, CANCELLING = CrawlState.RUNNING, CrawlState.PAUSED, CrawlState.CANCELLING


class Twin:
    """MemoryRegistry with a clock the test moves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.reg: CrawlRegistry = MemoryRegistry(self.clock)

    def handle(self) -> CrawlRegistry:
        """Another worker's handle on the same registry."""
        return self.reg

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def close(self) -> None:
        pass


class OnRedis:
    """RedisState on the test Redis; time passes for real (the tests that let it pass use milliseconds)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.state = RedisState.from_url(url)
        self.reg: CrawlRegistry = self.state
        self.handles: list[RedisState] = []

    def handle(self) -> CrawlRegistry:
        self.handles.append(RedisState.from_url(self.url))
        return self.handles[-1]

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        for h in self.handles:
            h.r.close()
        self.state.r.close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    impl = Twin() if request.param == "memory" else OnRedis(redis_url)
    yield impl
    impl.close()


@pytest.fixture
def new_crawl(side) -> Iterator[Callable[..., str]]:
    """Make a registered crawl of its own (deleted after the test); ``scheduled`` requests pending."""
    made: list[str] = []

    def make(scheduled: int = 0, options: dict | None = None, create: bool = True) -> str:
        made.append(f"rc-{uuid.uuid4().hex[:8]}")
        if create:
            assert side.reg.create_crawl(made[-1], options or {}, ["http://r.test/"])
        side.reg.incr(made[-1], scheduled=scheduled, pending=scheduled)
        return made[-1]

    yield make
    for crawl_id in made:
        side.reg.delete_crawl(crawl_id)


def test_both_implement_every_method_of_the_port():
    names = [n for n, v in vars(CrawlRegistry).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert len(names) >= 30
    for name in names:
        want = list(inspect.signature(getattr(CrawlRegistry, name)).parameters)
        for impl in (RedisState, MemoryRegistry):
            assert list(inspect.signature(getattr(impl, name)).parameters) == want, (impl, name)


def test_a_crawl_is_created_once_and_reopened(side, new_crawl):
    reg = side.reg
    cid = new_crawl(options={"max_depth": 2})
    assert reg.create_crawl(cid, {"max_depth": 9}, []) is False  # the id is taken: it continues
    meta = reg.crawl_meta(cid)
    assert meta["state"] == RUNNING and json.loads(meta["seeds"]) == ["http://r.test/"]
    assert float(meta["started_at"]) > 0 and "finished_at" not in meta
    assert reg.crawl_options(cid) == {"max_depth": 2}
    assert cid in reg.crawl_ids() and cid in reg.active_crawls()
    assert reg.crawl_meta("rc-never") == {} and reg.crawl_options("rc-never") is None
    assert reg.check_finished(cid) and reg.is_finished(cid) and cid not in reg.active_crawls()
    reg.reopen(cid)
    assert (reg.state_of(cid), reg.is_finished(cid)) == (RUNNING, False)
    assert cid in reg.active_crawls() and "finished_at" not in reg.crawl_meta(cid)


def test_crawl_ids_are_oldest_first(side, new_crawl):
    first = new_crawl()
    side.advance(0.01)
    second = new_crawl()
    ids = side.reg.crawl_ids()
    assert ids.index(first) < ids.index(second)


def test_counters_default_to_zero_and_add_up(side, new_crawl):
    reg = side.reg
    cid = new_crawl()
    assert reg.stats(cid) == dict.fromkeys(COUNTERS, 0)
    reg.incr(cid, fetched=3, parsed=0, filtered_offsite=2)
    reg.incr(cid, fetched=-1)
    reg.incr(cid)
    stats = reg.stats(cid)
    assert (stats["fetched"], stats["parsed"], stats["filtered_offsite"]) == (2, 0, 2)
    assert set(stats) == set(COUNTERS) | {"filtered_offsite"}


def test_each_ticket_counts_once_under_concurrent_finishes(side, new_crawl):
    n, kinds = 300, ("stored", "failed", "skipped")
    cid = new_crawl(scheduled=n)
    tickets = [f"t{i}" for i in range(n)]
    results: list[tuple[int, bool]] = []

    def worker(seed: int) -> None:
        reg, rng = side.handle(), random.Random(seed)
        mine = rng.sample(tickets, 200)  # every worker finishes most tickets: they overlap
        for i in range(0, len(mine), 7):
            results.append(reg.finish(cid, [(t, kinds[int(t[1:]) % 3], "") for t in mine[i:i + 7]]))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.append(side.reg.finish(cid, [(t, kinds[int(t[1:]) % 3], "") for t in tickets]))  # whatever is left
    assert sum(done for done, _ in results) == n
    assert sum(finished for _, finished in results) == 1
    stats = side.reg.stats(cid)
    assert (stats["stored"], stats["failed"], stats["skipped"], stats["pending"]) == (100, 100, 100, 0)
    assert side.reg.state_of(cid) == CrawlState.FINISHED


def test_completion_fires_at_pending_zero_and_only_once(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=3)
    assert reg.finish(cid, [("a", "stored", "")]) == (1, False)
    assert reg.finish(cid, [("a", "failed", ""), ("b", "failed", "")]) == (1, False)  # a's replay is ignored
    assert reg.check_finished(cid) is False and not reg.is_finished(cid)
    assert reg.finished_times([cid]) == [None]
    assert reg.finish(cid, [("c", "skipped", "")]) == (1, True)
    assert reg.finish(cid, [("c", "skipped", "")]) == (0, False)
    assert reg.check_finished(cid) is False
    assert reg.state_of(cid) == CrawlState.FINISHED and reg.is_finished(cid)
    [when] = reg.finished_times([cid])
    assert when is not None and when >= float(reg.crawl_meta(cid)["started_at"]) - 1
    assert (reg.outcome_of(cid, "a"), reg.outcome_of(cid, "b"), reg.outcome_of(cid, "z")) == ("stored", "failed", None)


def test_nothing_scheduled_finishes_at_once(side, new_crawl):
    cid = new_crawl()
    assert side.reg.check_finished(cid) is True


def test_an_unknown_outcome_is_refused_before_anything_counts(side, new_crawl):
    cid = new_crawl(scheduled=2)
    with pytest.raises(ValueError):
        side.reg.finish(cid, [("a", "stored", ""), ("b", "lost", "")])
    assert side.reg.stats(cid)["stored"] == 0 and side.reg.outcome_of(cid, "a") is None


def test_a_crawl_held_open_finishes_only_once_released(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1)
    assert reg.held_open(cid) is None
    reg.hold_open(cid, "seeds")
    assert reg.held_open(cid) == "seeds"
    assert reg.finish(cid, [("a", "stored", "")]) == (1, False)  # pending 0 between two chunks of seeds
    assert reg.check_finished(cid) is False and reg.state_of(cid) == RUNNING
    assert reg.drop_hold(cid) is True and reg.drop_hold(cid) is False
    assert reg.held_open(cid) is None
    assert reg.check_finished(cid) is True and reg.state_of(cid) == CrawlState.FINISHED


def test_a_cancelled_crawl_ends_cancelled_even_when_held_open(side, new_crawl):
    reg = side.reg
    held, plain = new_crawl(scheduled=1), new_crawl(scheduled=2)
    reg.hold_open(held, "feed")
    for cid in (held, plain):
        assert reg.control(cid, [RUNNING, PAUSED], CANCELLING) is True
        assert reg.state_of(cid) == CANCELLING
    assert reg.finish(held, [("a", "skipped", "")]) == (1, True)
    assert reg.finish(plain, [("a", "stored", "")]) == (1, False)
    assert reg.finish(plain, [("b", "skipped", "")]) == (1, True)
    assert reg.states_of([held, plain, "rc-never"]) == [CrawlState.CANCELLED, CrawlState.CANCELLED, ""]


def test_negative_pending_is_lost_never_finished(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1)
    assert reg.finish(cid, [("a", "stored", ""), ("b", "stored", "")]) == (2, False)
    assert reg.state_of(cid) == CrawlState.LOST and not reg.is_finished(cid)
    assert reg.stats(cid)["pending"] == -1


def test_a_crawl_whose_registry_is_gone_is_lost(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1, create=False)  # counters without a record: a Redis that lost its data
    assert reg.finish(cid, [("a", "stored", "")]) == (1, False)
    assert reg.check_finished(cid) is False
    assert reg.crawl_meta(cid) == {"state": CrawlState.LOST}
    assert reg.create_crawl(cid, {}, []) is True  # rebuilt (crawltasks.storage.recovery) after delete_crawl


def test_control_moves_only_from_the_allowed_states(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1)
    assert reg.control(cid, [RUNNING], PAUSED) is True
    assert reg.control(cid, [RUNNING], PAUSED) is False
    assert reg.control(cid, [RUNNING], CrawlState.INTERRUPTED) is False and reg.state_of(cid) == PAUSED
    assert reg.control(cid, [PAUSED, CrawlState.INTERRUPTED], RUNNING) is True
    assert reg.control("rc-never", [RUNNING], PAUSED) is False and reg.state_of("rc-never") == ""
    assert reg.finish(cid, [("a", "stored", "")]) == (1, True)
    assert reg.control(cid, [RUNNING, PAUSED, CrawlState.INTERRUPTED], CANCELLING) is False
    assert reg.state_of(cid) == CrawlState.FINISHED


def test_exact_dedupe_claims_a_fingerprint_once(side, new_crawl):
    reg = side.reg
    cid = new_crawl()
    assert reg.seen_already(cid, []) == []
    assert reg.seen_already(cid, ["f1", "f2"]) == [False, False]
    assert reg.claim_seen(cid, "f1") is True and reg.claim_seen(cid, "f1") is False
    assert reg.seen_already(cid, ["f1", "f2"]) == [True, False]


def test_bloom_dedupe_has_its_own_set_and_counts_as_the_frontier_does(side, new_crawl):
    reg = side.reg
    cid = new_crawl()
    bloom = reg.bloom_filter(cid, 1000, 0.01)
    f1, f2, f3, f9 = (hashlib.sha1(str(i).encode()).hexdigest() for i in (1, 2, 3, 9))  # apart in the bitmap
    fp = f1
    assert reg.claim_seen(cid, fp, bloom) is True and reg.claim_seen(cid, fp, bloom) is False
    assert reg.seen_already(cid, [fp]) == [False]  # the exact set is another thing
    assert bloom.contains([f1, f2]) == [True, False]
    fps = [f1, f2, f3, f3]
    flags = bloom.check_and_add(fps, [True, False, False, False], stats_key=Keys.stats(cid))
    assert flags == [True, True, True, False]  # dont_filter forces; a repeat in one call is new once
    stats = reg.stats(cid)
    assert (stats["scheduled"], stats["pending"], stats["duplicates"]) == (3, 3, 1)
    assert bloom.check_and_add([]) == []
    with pytest.raises((ValueError, redis.ResponseError)):  # another size is refused, not silently mixed
        reg.bloom_filter(cid, 50, 0.2).add(f9)


def test_redrive_makes_failed_tickets_pending_and_the_crawl_run(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=2)
    reg.finish(cid, [("a", "failed", ""), ("b", "stored", "")])
    assert reg.is_finished(cid) and cid not in reg.active_crawls()
    assert reg.redrive(cid, []) == []
    assert reg.redrive(cid, ["a", "b", "x", "a"]) == [True, False, False, False]
    assert (reg.state_of(cid), reg.is_finished(cid), cid in reg.active_crawls()) == (RUNNING, False, True)
    stats = reg.stats(cid)
    assert (stats["failed"], stats["pending"], stats["redriven"], stats["stored"]) == (0, 1, 1, 1)
    assert reg.outcome_of(cid, "a") is None
    assert reg.finish(cid, [("a", "stored", "")]) == (1, True)


def test_retire_and_reopen_through_the_port(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1)
    assert reg.retire(cid) is False and cid in reg.active_crawls()  # not finished: stays active
    reg.finish(cid, [("a", "stored", "")])  # retires it
    assert cid not in reg.active_crawls() and reg.state_of(cid) == CrawlState.FINISHED
    assert reg.retire(cid) is True  # again: harmless
    reg.reopen(cid)
    assert reg.retire(cid) is False and cid in reg.active_crawls()
    assert reg.outcome_of(cid, "a") == "stored"  # reopened: nothing of it expires


def test_a_retired_crawl_expires_working_state_first_then_its_summary(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1, options={"retention": 0.05})  # summary: 10 times longer
    reg.claim_seen(cid, "f")
    reg.finish(cid, [("a", "stored", "")])
    side.advance(0.15)
    assert (reg.outcome_of(cid, "a"), reg.seen_already(cid, ["f"])) == (None, [False])
    assert reg.is_finished(cid) and reg.stats(cid)["stored"] == 1 and cid in reg.crawl_ids()
    side.advance(0.5)
    assert reg.crawl_meta(cid) == {} and reg.stats(cid)["stored"] == 0
    assert cid not in reg.crawl_ids()
    assert reg.prune_crawls() == 0  # crawl_ids forgot it already


def test_retention_zero_keeps_everything(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=1, options={"retention": 0})
    reg.finish(cid, [("a", "stored", "")])
    side.advance(0.1)
    assert cid not in reg.active_crawls() and reg.outcome_of(cid, "a") == "stored"


def test_active_crawls_and_forgetting_one(side, new_crawl):
    reg = side.reg
    a, b = new_crawl(), new_crawl()
    assert {a, b} <= set(reg.active_crawls()) and reg.active_crawls() == sorted(reg.active_crawls())
    reg.forget_active(a)
    assert a not in reg.active_crawls() and b in reg.active_crawls()


def test_delete_forgets_a_crawl(side, new_crawl):
    reg = side.reg
    cid = new_crawl(scheduled=2)
    reg.mark_once(cid, "finished", "sent", 60)
    reg.delete_crawl(cid)
    assert reg.crawl_meta(cid) == {} and reg.stats(cid) == dict.fromkeys(COUNTERS, 0)
    assert cid not in reg.crawl_ids() and cid not in reg.active_crawls()
    assert reg.mark_of(cid, "finished") is None


def test_visits_are_remembered_for_their_ttl(side):
    reg, spider = side.reg, f"sp-{uuid.uuid4().hex[:6]}"
    try:
        assert reg.visited_at(spider, []) == [] and reg.visited_at(spider, ["a"]) == [None]
        reg.mark_visited(spider, [], 0.2)
        reg.mark_visited(spider, ["a", "b"], 0.2)
        at_a, at_b, none = reg.visited_at(spider, ["a", "b", "c"])
        assert at_a is not None and at_a == at_b and none is None
        side.advance(0.3)
        assert reg.visited_at(spider, ["a"]) == [None]  # older than its ttl: the index is gone
        reg.mark_visited(spider, ["c"], 0.2)
        assert reg.visited_at(spider, ["a", "c"])[0] is None
    finally:
        if isinstance(side, OnRedis):
            side.state.r.delete(Keys.visited(spider))


def test_notification_marks_are_claimed_once_for_their_ttl(side, new_crawl):
    reg = side.reg
    cid = new_crawl()
    assert reg.mark_of(cid, "done") is None
    assert reg.mark_once(cid, "done", "sending", 0.2) is True
    assert reg.mark_once(cid, "done", "again", 0.2) is False
    reg.update_mark(cid, "done", "sent 200")
    assert reg.mark_of(cid, "done") == "sent 200"
    reg.update_mark(cid, "other", "x")  # only a claimed mark is updated
    assert reg.mark_of(cid, "other") is None
    side.advance(0.3)
    assert reg.mark_of(cid, "done") is None and reg.mark_once(cid, "done", "later", 0.2) is True


# --- the twin only: what it shares with the in-memory frontier -----------------------------------------

def test_the_twin_shares_counters_with_a_memory_frontier_and_ends_its_claims():
    clock = FakeClock()
    frontier = MemoryFrontier(clock)
    reg = MemoryRegistry(clock, frontier=frontier)
    reg.create_crawl("c", {}, [])
    reqs = [Request(url=f"http://m.test/{i}", fp=f"f{i}", ticket=f"f{i}") for i in range(2)]
    assert frontier.add("c", reqs) == [1, 1]
    assert (reg.stats("c")["scheduled"], reg.stats("c")["pending"]) == (2, 2)
    taken = frontier.take("c", 10, HostPolicy(concurrency=2, delay=0.0))
    leases = [lease for lease, _, _ in taken.entries]
    assert frontier.sizes("c").claimed == 2
    assert reg.finish("c", [(f"f{i}", "stored", lease) for i, lease in enumerate(leases)]) == (2, True)
    assert frontier.sizes("c").claimed == 0 and reg.stats("c")["stored"] == 2


def test_state_and_generation_are_read_together(side, new_crawl):
    cid = new_crawl()
    assert side.reg.state_and_generation(cid) == (RUNNING, "")
    assert side.reg.control(cid, [RUNNING], PAUSED)
    assert side.reg.state_and_generation(cid) == (PAUSED, "")
    assert side.reg.state_and_generation("rc-never") == ("", "")


def test_a_rebuilt_crawl_gets_its_outcomes_seen_set_counters_and_a_new_generation(side, new_crawl):
    reg = side.reg
    cid = new_crawl()
    reg.mark_rebuilt(cid, 1234.5)
    state, generation = reg.state_and_generation(cid)
    assert state == RUNNING and float(generation) > 0
    assert float(reg.crawl_meta(cid)["started_at"]) == 1234.5
    reg.mark_rebuilt(cid, None)
    assert float(reg.crawl_meta(cid)["started_at"]) == 1234.5  # None keeps the start time there
    reg.restore_outcomes(cid, [("t1", "stored"), ("t2", "failed")], ["fp1", "fp2"])
    reg.restore_outcomes(cid, [("t3", "skipped")], [])
    reg.restore_outcomes(cid, [], [])
    assert [reg.outcome_of(cid, t) for t in ("t1", "t2", "t3", "t4")] == ["stored", "failed", "skipped", None]
    assert reg.seen_already(cid, ["fp1", "fp2", "fp3"]) == [True, True, False]
    reg.incr(cid, items=4)
    reg.restore_counts(cid, {"stored": 1, "failed": 1, "skipped": 1, "scheduled": 3, "pending": 0})
    stats = reg.stats(cid)
    assert (stats["stored"], stats["failed"], stats["skipped"], stats["scheduled"], stats["pending"], stats["items"]) \
        == (1, 1, 1, 3, 0, 4)
    assert reg.finish(cid, [("t1", "stored", "")]) == (0, True)  # counted already: the crawl is done
