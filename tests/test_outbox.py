"""What the fetch engine hands on, on twins (frontier, bodies, sender), in milliseconds: finished requests
leave as one parse -> store message per crawl with their bodies parked, a transient failure goes back
to the frontier instead, and nothing leaves before its group is due."""

from __future__ import annotations

from crawltasks.backends.memory.runtime import twin_runtime
from crawltasks.backends.redis.keys import Keys
from crawltasks.frontier.queues import HostPolicy
from crawltasks.models import Fetched, Request
from crawltasks.runtime import Runtime
from crawltasks.settings import CrawlOptions
from crawltasks.stages.outbox import Outbox
from crawltasks.urls import canonicalize, fingerprint


def counted(rt: Runtime, crawl_id: str) -> dict[str, int]:
    """The counters the outbox wrote (those the frontier keeps left out)."""
    return {k: v for k, v in rt.state.stats(crawl_id).items() if v and k not in ("scheduled", "pending")}


def taken(rt: Runtime, *paths: str) -> list[Request]:
    """Requests of the crawl "c" taken from the frontier, as the dispatcher takes them (leased)."""
    urls = [canonicalize(f"http://o.test{path}") for path in paths]
    rt.frontier.add("c", [Request(url=u, fp=fingerprint(u), ticket=fingerprint(u)) for u in urls])
    got = {r.url: r for r in rt.frontier.take("c", 10, HostPolicy(concurrency=10, delay=0)).requests}
    return [got[u] for u in urls]


def test_finished_requests_leave_as_one_message_with_their_bodies_parked():
    rt = twin_runtime(options={"c": CrawlOptions(batch_size=10, max_retries=2)})
    outbox = Outbox(rt)
    ok, gone, busy = taken(rt, "/ok", "/gone", "/busy")
    outbox.sort("c", ok, Fetched(request=ok, status=200, url=ok.url, fp=ok.fp, fetched_at="t"), b"<p>hi</p>")
    outbox.sort("c", gone, Fetched(request=gone, status=404, error="http_404", fetched_at="t"), None)
    outbox.sort("c", busy, Fetched(request=busy, status=503, error="http_503", transient=True), None)
    outbox.flush(now=0.0)
    assert rt.sender.sent == [], "a group waits for others of its crawl until it is due"
    outbox.flush(now=0.0, everything=True)
    [message] = rt.sender.sent
    assert (message.queue, message.then) == ("crawl.parse", [("crawltasks.store", "crawl.store")])
    by_url = {f.request.url: f for f in rt.sender.fetched()}
    assert set(by_url) == {ok.url, gone.url}, "the transient failure is not sent on"
    assert by_url[ok.url].body_key == Keys.body("c", ok.ticket) and by_url[gone.url].body_key is None
    assert rt.bodies.load([by_url[ok.url].body_key]) == [b"<p>hi</p>"]
    assert rt.frontier.sizes("c").queued == 1  # /busy, to be tried again
    assert counted(rt, "c") == {"fetched": 1, "retried": 1}
