"""The frontier's contract, run on the in-memory twin (time moved by hand) and on Redis (real time):
priority order within a host, per-host spacing and concurrency, claims, give-backs, failover."""

from __future__ import annotations

import time
import uuid

import pytest

from crawltasks.backends.memory.frontier import MemoryFrontier
from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.registry import RedisState
from crawltasks.frontier.queues import DUPLICATE, NEW, OVER_MAX_PAGES, Caps, HostPolicy, decode, encode
from crawltasks.models import Request
from crawltasks.ports import Frontier
from crawltasks.urls import canonicalize, fingerprint

from .helpers import assert_implements

FREE = HostPolicy(concurrency=100, delay=0.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Twin:
    """The in-memory frontier with a clock the test moves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.f = MemoryFrontier(self.clock)
        self.crawl_id = "c"

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def counters(self) -> dict[str, int]:
        return self.f.counters.get(self.crawl_id, {})

    def close(self) -> None:
        pass


class OnRedis:
    """The Redis frontier on the test Redis, in a crawl of its own; time is Redis' own clock."""

    def __init__(self, url: str) -> None:
        self.state = RedisState.from_url(url)
        self.f = RedisFrontier(self.state.r)
        self.crawl_id = f"hq-{uuid.uuid4().hex[:8]}"  # not registered as a crawl: no dispatcher looks at it

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def counters(self) -> dict[str, int]:
        return self.state.stats(self.crawl_id)

    def close(self) -> None:
        self.state.delete_crawl(self.crawl_id)
        self.state.r.close()


@pytest.fixture(params=["memory", "redis"])
def fr(request, redis_url):
    impl = Twin() if request.param == "memory" else OnRedis(redis_url)
    yield impl
    impl.close()


def req(url: str, priority: str = "default", **kw) -> Request:
    canonical = canonicalize(url)
    return Request(url=canonical, priority=priority, fp=fingerprint(canonical), ticket=fingerprint(canonical), **kw)


def urls(requests) -> list[str]:
    return [r.url for r in requests]


def test_both_frontiers_implement_the_port():
    assert_implements(Frontier, RedisFrontier, MemoryFrontier)


def test_entries_are_compact_and_decode_to_the_same_request():
    r = req("http://example.com/a/b?x=1", depth=3, referer="http://example.com/a/")
    raw = encode(r)
    assert raw == '[3,"http://example.com/a/b?x=1","/a/"]'
    back = decode(raw, "default")
    assert (back.url, back.depth, back.referer, back.fp, back.ticket) == (r.url, 3, r.referer, r.fp, r.fp)
    odd = req("http://example.com/p", priority="high", method="POST", meta={"k": 1}, dont_filter=True,
              attempt=2, referer="https://other.example/")
    odd.ticket = odd.fp + ":abc"
    back = decode(encode(odd), "high")
    assert back.to_dict() == {**odd.to_dict(), "fp": back.fp} and back.ticket == odd.ticket


def test_new_requests_are_queued_once_and_counted(fr):
    verdicts = fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://a.test/1"), req("http://b.test/1")])
    assert verdicts == [NEW, DUPLICATE, NEW]
    c = fr.counters()
    assert (c["scheduled"], c["pending"], c["duplicates"]) == (2, 2, 1)
    assert fr.f.sizes(fr.crawl_id).queued == 2 and fr.f.sizes(fr.crawl_id).hosts == 2


def test_max_pages_caps_what_is_queued(fr):
    verdicts = fr.f.add(fr.crawl_id, [req(f"http://a.test/{i}") for i in range(4)], Caps(max_pages=3))
    assert verdicts == [NEW, NEW, NEW, OVER_MAX_PAGES]
    assert fr.f.sizes(fr.crawl_id).queued == 3


def test_a_ready_hosts_high_priority_requests_leave_first(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/low", "low"), req("http://a.test/d1"), req("http://a.test/high", "high"),
                           req("http://a.test/d2")])
    taken = fr.f.take(fr.crawl_id, 10, FREE).requests
    assert urls(taken) == ["http://a.test/high", "http://a.test/d1", "http://a.test/d2", "http://a.test/low"]
    assert [r.priority for r in taken] == ["high", "default", "default", "low"]
    assert len({r.lease for r in taken}) == 4 and all(r.lease for r in taken)


def test_a_host_with_a_delay_gives_one_request_per_delay(fr):
    fr.f.add(fr.crawl_id, [req(f"http://a.test/{i}") for i in range(3)] + [req("http://b.test/1")])
    policy = HostPolicy(concurrency=2, delay=0.3)
    first = fr.f.take(fr.crawl_id, 10, policy)
    assert sorted(urls(first.requests)) == ["http://a.test/0", "http://b.test/1"]
    assert first.next_ready is not None and 0 < first.next_ready <= 0.3
    assert fr.f.take(fr.crawl_id, 10, policy).requests == []  # a.test is not ready yet
    fr.advance(0.35)
    assert urls(fr.f.take(fr.crawl_id, 10, policy).requests) == ["http://a.test/1"]


def test_a_host_never_has_more_than_its_concurrency_taken(fr):
    fr.f.add(fr.crawl_id, [req(f"http://a.test/{i}") for i in range(5)])
    policy = HostPolicy(concurrency=2, delay=0.0)
    taken = fr.f.take(fr.crawl_id, 10, policy).requests
    assert len(taken) == 2
    assert fr.f.take(fr.crawl_id, 10, policy).requests == []
    fr.f.fetched(fr.crawl_id, [taken[0].lease])
    fr.f.fetched(fr.crawl_id, [taken[0].lease])  # once per claim: a replay frees nothing more
    again = fr.f.take(fr.crawl_id, 10, policy).requests
    assert len(again) == 1 and fr.f.sizes(fr.crawl_id).outstanding == 2


def test_take_is_bounded_by_its_limit(fr):
    fr.f.add(fr.crawl_id, [req(f"http://h{i}.test/") for i in range(10)])
    assert len(fr.f.take(fr.crawl_id, 4, FREE).requests) == 4
    assert len(fr.f.take(fr.crawl_id, 100, FREE).requests) == 6
    sizes = fr.f.sizes(fr.crawl_id)
    assert (sizes.queued, sizes.outstanding, sizes.claimed, sizes.hosts) == (0, 10, 10, 0)


def test_per_host_limits_override_the_crawls(fr):
    fr.f.add(fr.crawl_id, [req(f"http://slow.test/{i}") for i in range(3)] + [req(f"http://fast.test/{i}")
                                                                             for i in range(3)])
    fr.f.set_limits(fr.crawl_id, "slow.test:80", HostPolicy(concurrency=1, delay=60.0))
    taken = fr.f.take(fr.crawl_id, 10, FREE).requests
    assert sorted(urls(taken)) == ["http://fast.test/0", "http://fast.test/1", "http://fast.test/2",
                                   "http://slow.test/0"]


def test_a_claim_is_taken_up_once_and_a_given_back_request_goes_first(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://a.test/2")])
    first = fr.f.take(fr.crawl_id, 1, FREE).requests[0]
    assert fr.f.claim(fr.crawl_id, [first.lease, "nope"], "w1") == [True, False]
    first.attempt = 1
    fr.f.give_back(fr.crawl_id, [first], hold=0.2)
    assert fr.f.claim(fr.crawl_id, [first.lease], "w1") == [False]  # its old message is stale now
    assert fr.f.take(fr.crawl_id, 5, FREE).requests == []  # held
    fr.advance(0.25)
    again = fr.f.take(fr.crawl_id, 5, FREE).requests
    assert urls(again) == ["http://a.test/1", "http://a.test/2"] and again[0].attempt == 1
    assert again[0].lease != first.lease


def test_hold_pushes_a_host_back(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://b.test/1")])
    fr.f.hold(fr.crawl_id, "a.test:80", 0.3)
    assert urls(fr.f.take(fr.crawl_id, 5, FREE).requests) == ["http://b.test/1"]
    fr.advance(0.35)
    assert urls(fr.f.take(fr.crawl_id, 5, FREE).requests) == ["http://a.test/1"]


def test_claims_of_a_dead_worker_come_back_and_count_the_loss(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://b.test/1"), req("http://c.test/1")])
    a, b, c = sorted(fr.f.take(fr.crawl_id, 5, FREE).requests, key=lambda r: r.url)
    fr.f.claim(fr.crawl_id, [a.lease], "dead")
    fr.f.claim(fr.crawl_id, [b.lease], "alive")  # c stays unowned: its message is still in the broker
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=600) == 1
    back = fr.f.take(fr.crawl_id, 5, FREE).requests
    assert urls(back) == ["http://a.test/1"] and back[0].lost == 1
    fr.f.claim(fr.crawl_id, [back[0].lease], "alive")
    fr.advance(0.15)
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=0.1, lease_time=600) == 1  # c: nobody took it up
    assert urls(fr.f.take(fr.crawl_id, 5, FREE).requests) == ["http://c.test/1"]
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=0.1) >= 1  # b: held too long


def test_a_finished_claim_is_never_reclaimed(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1")])
    [a] = fr.f.take(fr.crawl_id, 5, FREE).requests
    fr.f.claim(fr.crawl_id, [a.lease], "dead")
    fr.f.fetched(fr.crawl_id, [a.lease])
    fr.f.release(fr.crawl_id, [a.lease])
    assert fr.f.reclaim(fr.crawl_id, set(), dispatch_lease=0, lease_time=0) == 0
    assert fr.f.sizes(fr.crawl_id).claimed == 0


def test_cancel_drops_the_queued_requests_as_skipped(fr):
    fr.f.add(fr.crawl_id, [req(f"http://h{i % 3}.test/{i}") for i in range(7)])
    fr.f.take(fr.crawl_id, 1, FREE)
    assert fr.f.drop_queued(fr.crawl_id) == 6
    c = fr.counters()
    assert (c["skipped"], c["pending"]) == (6, 1)
    assert fr.f.sizes(fr.crawl_id).queued == 0 and fr.f.take(fr.crawl_id, 5, FREE).requests == []


def test_a_high_only_take_leaves_the_rest_queued(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/d"), req("http://b.test/h", "high"), req("http://a.test/h", "high")])
    assert fr.f.outstanding([fr.crawl_id])[1] == [fr.crawl_id]
    assert sorted(urls(fr.f.take(fr.crawl_id, 10, FREE, high_only=True).requests)) == ["http://a.test/h",
                                                                                         "http://b.test/h"]
    assert fr.f.outstanding([fr.crawl_id]) == (2, [])  # no high-priority request waits any more
    assert urls(fr.f.take(fr.crawl_id, 10, FREE).requests) == ["http://a.test/d"]


def test_a_claim_in_hand_that_is_not_renewed_comes_back(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://b.test/1"), req("http://c.test/1")])
    a, b, c = sorted(fr.f.take(fr.crawl_id, 5, FREE).requests, key=lambda r: r.url)
    fr.f.claim(fr.crawl_id, [a.lease, b.lease, c.lease], "alive")
    fr.f.fetched(fr.crawl_id, [c.lease])  # handed on to parse: no longer renewed, and not at stake
    fr.advance(0.3)
    fr.f.claim(fr.crawl_id, [a.lease], "alive")  # renewed; b is forgotten
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=600, renew_within=0.2) == 1
    [back] = fr.f.take(fr.crawl_id, 5, FREE).requests
    assert back.url == "http://b.test/1" and back.lost == 0
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=600) == 0, "off by default"


def test_a_dead_worker_costs_a_loss_only_to_the_requests_it_was_working_on(fr):
    fr.f.add(fr.crawl_id, [req(f"http://{h}.test/1") for h in "abc"])
    a, b, c = sorted(fr.f.take(fr.crawl_id, 5, FREE).requests, key=lambda r: r.url)
    fr.f.fetched(fr.crawl_id, [a.lease, b.lease, c.lease])  # handed on to parse
    assert fr.f.take_up(fr.crawl_id, [a.lease, b.lease, "gone"], "parser") == [0, 0, None]  # a, b hot
    fr.f.mark(fr.crawl_id, [b.lease], "parser", False)  # b parsed, waiting for its store
    fr.f.claim(fr.crawl_id, [c.lease], "parser")  # c waits there too, never worked on
    assert fr.f.reclaim(fr.crawl_id, set(), dispatch_lease=60, lease_time=600) == 3  # the parser died
    back = {r.url: r.lost for r in fr.f.take(fr.crawl_id, 5, FREE).requests}
    assert back == {"http://a.test/1": 1, "http://b.test/1": 0, "http://c.test/1": 0}


def test_taking_up_a_claim_another_delivery_died_working_on_counts_the_loss(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://b.test/1")])
    a, b = sorted(fr.f.take(fr.crawl_id, 5, FREE).requests, key=lambda r: r.url)
    fr.f.fetched(fr.crawl_id, [a.lease, b.lease])
    assert fr.f.take_up(fr.crawl_id, [a.lease, b.lease], "child-1") == [0, 0]
    fr.f.mark(fr.crawl_id, [b.lease], "child-1", False)
    # child-1 died on a; its message comes back to child-2 (a pool child replaced, no reclaim yet)
    assert fr.f.take_up(fr.crawl_id, [a.lease, b.lease], "child-2") == [1, 0]  # a is cold now: suspect
    fr.f.mark(fr.crawl_id, [b.lease], "child-2", False)  # b parsed again
    assert fr.f.take_up(fr.crawl_id, [a.lease], "child-3") == [1], "a cold claim costs nothing"
    fr.f.mark(fr.crawl_id, [a.lease], "child-3", True)
    fr.f.mark(fr.crawl_id, [a.lease], "someone-else", False)  # only its holder marks it
    assert fr.f.take_up(fr.crawl_id, [a.lease], "child-4") == [2]
    assert fr.f.take_up(fr.crawl_id, [a.lease], "child-4") == [2], "its own claim again costs nothing"
    assert fr.f.reclaim(fr.crawl_id, set(), dispatch_lease=60, lease_time=600) == 2  # cold: no more losses
    again = {r.url: r.lost for r in fr.f.take(fr.crawl_id, 5, FREE).requests}
    assert again == {"http://a.test/1": 2, "http://b.test/1": 0}, "the losses travel with the request"


def test_a_claim_handed_on_and_never_taken_up_comes_back_only_when_asked(fr):
    fr.f.add(fr.crawl_id, [req("http://a.test/1"), req("http://b.test/1")])
    a, b = sorted(fr.f.take(fr.crawl_id, 5, FREE).requests, key=lambda r: r.url)
    fr.f.claim(fr.crawl_id, [a.lease, b.lease], "alive")
    fr.f.fetched(fr.crawl_id, [a.lease, b.lease])  # handed on to parse
    fr.f.take_up(fr.crawl_id, [b.lease], "alive")  # b's parse task took it up and works on it (hot)
    fr.advance(0.3)
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=600) == 0, "off unless asked"
    assert fr.f.reclaim(fr.crawl_id, {"alive"}, dispatch_lease=60, lease_time=600, handoff_within=0.2) == 1
    [back] = fr.f.take(fr.crawl_id, 5, FREE).requests
    assert back.url == "http://a.test/1" and back.lost == 0


def test_host_queues_tell_the_dashboard_what_waits_and_when_it_may_start(fr):
    fr.f.add(fr.crawl_id, [req(f"http://a.test/{i}") for i in range(3)] + [req("http://b.test/1", "high")])
    a, b = "a.test:80", "b.test:80"
    fr.f.set_limits(fr.crawl_id, b, HostPolicy(concurrency=1, delay=2.5, random_delay=0.25))
    before = fr.f.host_queues(fr.crawl_id, [a, b, "c.test:80"])
    assert [(q.queued, q.in_flight, q.wait) for q in before.values()] == [(3, 0, 0.0), (1, 0, 0.0), (0, 0, 0.0)]
    assert (before[a].limits, before[b].limits) == (None, HostPolicy(1, 2.5, 0.25))
    fr.f.take(fr.crawl_id, 10, HostPolicy(concurrency=2, delay=30.0))
    after = fr.f.host_queues(fr.crawl_id, [a, b])
    assert [(q.queued, q.in_flight) for q in after.values()] == [(2, 1), (0, 1)]
    assert 20 < after[a].wait <= 30 and 1 < after[b].wait <= 2.75  # its own delay, not the crawl's
    assert fr.f.host_queues(fr.crawl_id, []) == {}
