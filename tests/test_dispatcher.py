"""The dispatch policy on the in-memory frontier, in milliseconds: backpressure, priority routing,
per-host spacing over rounds, and a dead worker's requests dispatched again; and the dispatcher's
messages through the twin sender (``rt.sender``): queue of each priority, what a fetch task decodes."""

from __future__ import annotations

from crawltasks.backends.memory.runtime import twin_runtime
from crawltasks.frontier.dispatcher import EARLY, FULL_WAIT, Dispatcher, dispatch_round
from crawltasks.frontier.queues import decode
from crawltasks.models import Request
from crawltasks.runtime import Runtime
from crawltasks.settings import CrawlOptions
from crawltasks.urls import canonicalize, fingerprint

from .test_hostqueues import FakeClock


def twin(options_of: dict[str, CrawlOptions], capacity: int = 100) -> Runtime:
    """A twin runtime whose crawls run with these options, on a clock the test moves (``rt.frontier.clock``);
    the fetch workers' heartbeats offer ``capacity``."""
    return twin_runtime(clock=FakeClock(), capacity=capacity, options=options_of)


def add(rt: Runtime, crawl_id: str, urls: list[str], priority: str = "default") -> None:
    reqs = []
    for u in urls:
        url = canonicalize(u)
        reqs.append(Request(url=url, priority=priority, fp=fingerprint(url), ticket=fingerprint(url)))
    rt.frontier.add(crawl_id, reqs)


def sender():
    sent: list[tuple[str, str, list[str]]] = []

    def send(crawl_id: str, priority: str, batch: list) -> None:
        sent.append((crawl_id, priority, [decode(entry).url for _, _, entry in batch]))
    return sent, send


def test_no_more_is_dispatched_than_the_fetch_workers_can_take():
    rt = twin(options_of={"c": CrawlOptions(batch_size=4, host_delay=0.0)})
    add(rt, "c", [f"http://h{i}.test/" for i in range(10)])
    sent, send = sender()
    n, _ = dispatch_round(rt, send, ["c"], room=3)
    assert n == 3 and sum(len(b) for *_, b in sent) == 3
    assert rt.frontier.sizes("c").outstanding == 3 and rt.frontier.sizes("c").queued == 7


def test_batches_go_to_the_queue_of_their_priority_high_first():
    rt = twin(options_of={"c": CrawlOptions(batch_size=2, host_delay=0.0)})
    add(rt, "c", ["http://a.test/1", "http://b.test/1", "http://c.test/1"])
    add(rt, "c", ["http://d.test/urgent"], priority="high")
    sent, send = sender()
    dispatch_round(rt, send, ["c"], room=100)
    assert sent[0] == ("c", "high", ["http://d.test/urgent"])
    assert [p for _, p, _ in sent[1:]] == ["default", "default"] and sum(len(b) for *_, b in sent) == 4


def test_a_hosts_requests_leave_one_delay_apart_over_rounds_a_little_early():
    """Early by EARLY at most: the fetch engine holds each until the shared gate opens."""
    rt = twin(options_of={"c": CrawlOptions(host_delay=0.5, host_concurrency=2)})
    add(rt, "c", [f"http://a.test/{i}" for i in range(3)])
    sent, send = sender()
    times = []
    for _ in range(40):  # rounds every 50 ms of the twin's clock
        before = len(sent)
        _, wait = dispatch_round(rt, send, ["c"], room=100)
        if len(sent) > before:
            times.append(rt.frontier.clock.now)
            for *_, batch in sent[before:]:  # each fetch ends at once: the host's slot is free again
                taken = [r for r in rt.frontier.claims["c"].values() if r.request.url in batch]
                rt.frontier.fetched("c", [c.request.lease for c in taken])
        assert wait <= 0.5
        rt.frontier.clock.now += 0.05
    assert len(times) == 3
    assert all(0.5 - EARLY - 1e-9 <= b - a <= 0.5 for a, b in zip(times, times[1:], strict=False))


def test_crawls_side_by_side_share_the_room():
    rt = twin(options_of={"a": CrawlOptions(host_delay=0.0), "b": CrawlOptions(host_delay=0.0)})
    add(rt, "a", [f"http://a{i}.test/" for i in range(5)])
    add(rt, "b", [f"http://b{i}.test/" for i in range(5)])
    sent, send = sender()
    n, _ = dispatch_round(rt, send, ["b", "a"], room=7)
    assert n == 7 and {c for c, _, _ in sent} == {"a", "b"}


def test_a_dead_workers_requests_are_dispatched_again():
    rt = twin(options_of={"c": CrawlOptions(host_delay=0.0)})
    add(rt, "c", ["http://a.test/1", "http://b.test/1"])
    sent, send = sender()
    dispatch_round(rt, send, ["c"], room=10)
    leases = list(rt.frontier.claims["c"])
    rt.frontier.claim("c", leases, "worker-1")
    assert rt.frontier.reclaim("c", live={"worker-2"}, dispatch_lease=20, lease_time=600) == 2
    again, send2 = sender()
    assert dispatch_round(rt, send2, ["c"], room=10)[0] == 2
    assert sorted(u for *_, b in again for u in b) == ["http://a.test/1", "http://b.test/1"]


def test_the_dispatcher_sends_through_the_runtimes_sender_to_each_prioritys_queue():
    rt = twin(options_of={"c": CrawlOptions(batch_size=2, host_delay=0.0)}, capacity=4)
    add(rt, "c", ["http://a.test/1", "http://b.test/1", "http://c.test/1"], priority="low")
    add(rt, "c", ["http://d.test/urgent", "http://e.test/urgent"], priority="high")
    dispatcher = Dispatcher(rt)
    dispatcher.step()  # the high-priority round alone
    dispatcher.step()
    assert [(s.queue, s.routing_key, s.priority) for s in rt.sender.sent] == [
        ("crawl.fetch.high", "crawl.fetch.high", "high"), ("crawl.fetch.low", "crawl.fetch.low", "low")]
    [(_, _, high), (_, _, low)] = rt.sender.batches()
    assert [r.url for r in high] == ["http://d.test/urgent", "http://e.test/urgent"]
    assert len(low) == 2 and all(r.priority == "low" and r.lease for r in low)
    assert dispatcher.step() == FULL_WAIT and len(rt.sender.sent) == 2  # 4 out: the fetch workers are full


def test_a_batch_leaves_as_the_fetch_task_decodes_it():
    rt = twin(options_of={"c": CrawlOptions(batch_size=8, host_delay=0.0)})
    add(rt, "c", ["http://a.test/form"], priority="default")
    dispatch_round(rt, rt.sender.send_batch, ["c"], room=10)
    [(crawl_id, priority, [req])] = rt.sender.batches()
    taken = next(iter(rt.frontier.claims["c"].values())).request
    assert (crawl_id, priority, req.url, req.fp, req.lease) == ("c", "default", taken.url, taken.fp, taken.lease)
    assert rt.sender.sent[0].label == "c 1 url(s) http://a.test/form"
