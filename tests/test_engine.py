"""The fetch engine against a real server and the real Redis gate: per-host limits hold at the server,
slots come back, a held host's requests go back to the frontier, robots.txt is fetched under the gate."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from crawltasks.backends.memory.gate import MemoryGate, _Host
from crawltasks.backends.memory.sender import MemorySender
from crawltasks.backends.redis.keys import Keys
from crawltasks.models import Fetched, Request
from crawltasks.settings import CrawlOptions
from crawltasks.stages.engine import FetchEngine
from crawltasks.stages.latestarts import LateStarts
from crawltasks.urls import canonicalize, host_key

from .sites import serve, slow_page
from .test_fleet import max_overlap


class Results:
    """What the engine sends on to parse, as a parse task would decode it (the twin sender, put in
    the runtime while the engine runs)."""

    def __init__(self) -> None:
        self.sender = MemorySender()

    @property
    def got(self) -> list[Fetched]:
        return self.sender.fetched()

    def wait_for(self, n: int, timeout: float = 20) -> list[Fetched]:
        self.sender.wait_for(lambda s: len(s.fetched()) >= n, timeout)
        got = self.sender.fetched()
        assert len(got) >= n, f"{len(got)} of {n}"
        return got


@pytest.fixture
def server():
    routes = {f"/p/{i}": slow_page(f"P{i}", [], 0.05) for i in range(12)}
    routes["/robots.txt"] = lambda s, p: (200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /p/11\n")
    s = serve(routes)
    yield s
    s.stop()


@pytest.fixture
def engine(rt):
    results = Results()
    before, rt._sender = rt._sender, results.sender
    eng = FetchEngine(rt, capacity=64, owner=rt.heartbeat.start().id)
    yield eng, results
    eng.stop()
    rt._sender = before
    for crawl_id in CRAWLS:  # no dispatcher of a later test should see these half-made crawls
        rt.state.delete_crawl(crawl_id)
    CRAWLS.clear()


CRAWLS: list[str] = []


def crawl_of(rt, server, n: int, **options) -> tuple[str, list[Request]]:
    """A crawl of n pages of the server, taken from the frontier as a dispatcher would."""
    crawl_id = f"eng-{uuid.uuid4().hex[:8]}"
    CRAWLS.append(crawl_id)
    opts = CrawlOptions(timeout=10, allow_private=True, **options)
    rt.state.create_crawl(crawl_id, opts.to_dict(), [])
    reqs = []
    for i in range(n):
        url = canonicalize(server.url(f"/p/{i}"))
        reqs.append(Request(url=url))
    from crawltasks.frontier.schedule import schedule

    schedule(rt.state, rt.frontier, crawl_id, reqs, opts)
    taken = rt.frontier.take(crawl_id, 100, _free()).requests
    assert len(taken) == n
    rt.frontier.claim(crawl_id, [r.lease for r in taken], rt.heartbeat.id)
    return crawl_id, taken


def _free():
    from crawltasks.frontier.queues import HostPolicy

    return HostPolicy(concurrency=100, delay=0)


def test_the_hosts_limit_holds_at_the_server_and_every_slot_comes_back(rt, engine, server):
    eng, results = engine
    crawl_id, reqs = crawl_of(rt, server, 10, host_concurrency=2, host_delay=0, obey_robots=False)
    eng.admit(crawl_id, reqs, [])
    got = results.wait_for(10)
    assert sorted(f.url for f in got) == sorted(r.url for r in reqs) and all(f.status == 200 for f in got)
    assert all(f.body_key for f in got), "bodies are parked in Redis for the parse task"
    assert max_overlap(server.hits) <= 2
    deadline = time.monotonic() + 5
    while rt.state.r.zcard(Keys.host_slots(host_key(reqs[0].url))) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rt.state.r.zcard(Keys.host_slots(host_key(reqs[0].url))) == 0, "slots must all be given back"
    assert rt.frontier.sizes(crawl_id).outstanding == 0, "the frontier knows every fetch is over"


def test_a_delay_spaces_request_starts_at_the_server_robots_txt_included(rt, engine, server):
    eng, results = engine
    crawl_id, reqs = crawl_of(rt, server, 4, host_concurrency=4, host_delay=0.15)
    eng.admit(crawl_id, reqs, [])
    results.wait_for(4)
    paths = [h.path for h in sorted(server.hits, key=lambda h: h.started)]
    assert paths[0] == "/robots.txt" and paths.count("/robots.txt") == 1
    starts = sorted(h.started for h in server.hits)
    assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.15 * 0.9


def asks_of(rt, monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts the slots asked of the gate, per host, from now on."""
    asked: Counter = Counter()
    exchange = rt.gate.exchange

    def counting(release, requests, *args, **kwargs):
        asked.update(r.host for r in requests)
        return exchange(release, requests, *args, **kwargs)

    monkeypatch.setattr(rt.gate, "exchange", counting)
    return asked


def test_a_host_granted_a_slot_is_asked_again_only_once_its_next_start_is_due(rt, engine, server, monkeypatch):
    eng, results = engine
    asked = asks_of(rt, monkeypatch)
    crawl_id, reqs = crawl_of(rt, server, 4, host_concurrency=4, host_delay=0.15, obey_robots=False)
    eng.admit(crawl_id, reqs, [])
    results.wait_for(4)
    starts = sorted(h.started for h in server.hits)
    assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.15 * 0.9
    assert asked[host_key(reqs[0].url)] == 4, "one ask per request: none the gate could only answer 'wait'"


def test_a_grant_with_a_delay_over_give_back_after_gives_the_others_back_at_once(rt, engine, server):
    eng, results = engine
    crawl_id, reqs = crawl_of(rt, server, 3, host_concurrency=4, host_delay=5.0, obey_robots=False)
    eng.admit(crawl_id, reqs, [])
    [first] = results.wait_for(1, timeout=5)
    sizes = rt.frontier.sizes(crawl_id)
    assert first.ok and (sizes.queued, sizes.outstanding) == (2, 0) and len(server.hits) == 1
    rt.state.r.delete(Keys.host_next(host_key(reqs[0].url)))


def test_robots_disallowed_pages_are_not_fetched(rt, engine, server):
    eng, results = engine
    crawl_id, reqs = crawl_of(rt, server, 12, host_concurrency=4, host_delay=0)
    eng.admit(crawl_id, reqs, [])
    got = {f.request.url.rsplit("/", 1)[1]: f for f in results.wait_for(12)}
    assert got["11"].error == "robots_disallowed" and "/p/11" not in server.counts
    assert all(got[str(i)].ok for i in range(11))


def test_a_host_held_for_long_gets_its_requests_back_in_the_frontier(rt, engine, server):
    eng, results = engine
    crawl_id, reqs = crawl_of(rt, server, 3, host_concurrency=1, host_delay=0, obey_robots=False)
    host = host_key(reqs[0].url)
    rt.gate.feedback(host, slow=True, wait=30.0)  # the site asked every crawler to wait 30 s
    eng.admit(crawl_id, reqs, [])
    deadline = time.monotonic() + 10
    while rt.frontier.sizes(crawl_id).queued < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    sizes = rt.frontier.sizes(crawl_id)
    assert (sizes.queued, sizes.outstanding, sizes.claimed) == (3, 0, 0)
    assert not server.hits and results.got == []
    rt.state.r.delete(Keys.host_next(host), Keys.host_backoff(host))


def test_requests_in_hand_are_renewed_and_a_forgotten_claim_goes_back(rt, engine, monkeypatch):
    """The engine claims what it holds again and again; a claim its owner lost track of is not
    renewed, and the reclaimer puts it back long before the crawl's lease."""
    import crawltasks.stages.engine as engine_module

    monkeypatch.setattr(engine_module, "RENEW_EVERY", 0.1)
    eng, results = engine
    eng.renew_at = 0.0
    slow = serve({f"/p/{i}": slow_page(f"P{i}", [], 1.5) for i in range(2)})
    try:
        crawl_id, (flying, forgotten) = crawl_of(rt, slow, 2, host_concurrency=4, host_delay=0, obey_robots=False)
        eng.admit(crawl_id, [flying], [])
        deadline = time.monotonic() + 5
        while not slow.hits and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.6)  # the forgotten claim is now older than renew_within; the one in flight is renewed
        live = {rt.heartbeat.id}
        assert rt.frontier.reclaim(crawl_id, live, dispatch_lease=60, lease_time=600, renew_within=0.4) == 1
        [back] = rt.frontier.take(crawl_id, 5, _free()).requests
        assert back.url == forgotten.url and back.lost == 0, "a forgotten claim is not a worker's death"
        assert [f.url for f in results.wait_for(1)] == [flying.url]
    finally:
        slow.stop()


# --- a request that reaches the wire late (the gate's twin, the real clock) -----------------------------

class ToldStarts:
    """What the engine's late-starts thread is told, kept (it tells no gate)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, float]] = []

    def tell(self, host: str, delay: float) -> None:
        self.told.append((host, delay))


def late_start_hook(gate: MemoryGate, host: str, delay: float, late_by: float,
                    told: ToldStarts | None = None) -> Callable[[bool], None]:
    """The hook of a request of ``host`` whose slot was asked for ``late_by`` seconds ago (the grant set
    the host's next start a delay after that), in an engine with the gate's twin and ``told`` (what
    its late-starts thread is told)."""
    granted = time.monotonic() - late_by
    gate.hosts.setdefault(host, _Host()).next_at = round((granted + delay) * 1000)
    engine = SimpleNamespace(rt=SimpleNamespace(gate=gate), late_starts=told or ToldStarts())
    return FetchEngine._on_send(engine, host, delay, granted, granted + delay)


def test_a_request_on_time_goes_at_once_and_leaves_the_gate_alone():
    gate = MemoryGate()
    hook = late_start_hook(gate, "a:80", 0.3, late_by=0.0)
    next_at = gate.hosts["a:80"].next_at
    started = time.monotonic()
    hook(False)
    hook(True)
    assert time.monotonic() - started < 0.05 and gate.hosts["a:80"].next_at == next_at


def test_a_request_a_little_late_goes_at_once_and_its_start_is_told_through_the_late_starts_thread():
    gate, told = MemoryGate(), ToldStarts()
    hook = late_start_hook(gate, "a:80", 0.3, late_by=0.05, told=told)
    next_at = gate.hosts["a:80"].next_at
    started = time.monotonic()
    hook(False)
    hook(True)
    assert time.monotonic() - started < 0.05 and gate.hosts["a:80"].next_at == next_at  # no round trip
    assert told.told == [("a:80", 0.3)]


def test_the_late_starts_thread_moves_each_hosts_next_start_and_tells_everything_before_it_stops():
    clock = [100.0]
    gate = MemoryGate(clock=lambda: clock[0])
    late = LateStarts(gate)
    for i in range(50):
        late.tell(f"h{i}:80", 0.5)
    late.stop()
    assert [load.wait for load in gate.view([f"h{i}:80" for i in range(50)])] == [0.5] * 50
    assert not late._thread.is_alive()


def test_a_late_request_waits_for_a_start_granted_after_its_own_then_pushes_the_next_one():
    gate = MemoryGate()
    hook = late_start_hook(gate, "a:80", 0.3, late_by=0.35)  # its grant's delay has passed...
    other_start = time.monotonic() - 0.05
    gate.hosts["a:80"].next_at = round((other_start + 0.3) * 1000)  # ...and another start was granted
    hook(False)
    assert time.monotonic() - other_start >= 0.29  # a delay after the other start, not beside it
    assert gate.view(["a:80"])[0].wait > 0.25  # and the next start a delay after this one


def test_a_late_request_with_no_start_after_its_own_goes_now_and_moves_the_next_start():
    gate = MemoryGate()
    hook = late_start_hook(gate, "a:80", 0.3, late_by=0.1)
    started = time.monotonic()
    hook(False)
    assert time.monotonic() - started < 0.05 and 0.25 < gate.view(["a:80"])[0].wait <= 0.3
