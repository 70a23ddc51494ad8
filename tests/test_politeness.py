"""fetch_batch against a real server and the real Redis gate: limits hold, slots come back, busy hosts defer."""

from __future__ import annotations

import pytest

from crawltasks.models import Request
from crawltasks.politeness import HostGate, fetch_batch
from crawltasks.redisstate import Keys
from crawltasks.settings import CrawlOptions
from crawltasks.urls import canonicalize, fingerprint, host_key

from .sites import serve, slow_page
from .test_fleet import max_overlap


@pytest.fixture
def server():
    s = serve({f"/p/{i}": slow_page(f"P{i}", [], 0.05) for i in range(12)})
    yield s
    s.stop()


def requests_for(server, n: int) -> list[Request]:
    reqs = [Request(url=canonicalize(server.url(f"/p/{i}"))) for i in range(n)]
    for r in reqs:
        r.fp = r.ticket = fingerprint(r.url)
    return reqs


def test_a_batch_stays_under_the_hosts_limit_and_gives_every_slot_back(state, server):
    opts = CrawlOptions(host_concurrency=2, host_delay=0, fetch_threads=8, timeout=10, allow_private=True)
    reqs = requests_for(server, 12)
    done = fetch_batch(HostGate(state, opts), reqs, opts)
    assert sorted(f.url for f, _ in done.fetched) == sorted(r.url for r in reqs) and not done.deferred
    assert all(f.status == 200 and body for f, body in done.fetched)
    assert max_overlap(server.hits) <= 2
    assert state.r.zcard(Keys.host_slots(host_key(reqs[0].url))) == 0, "slots must all be given back"


def test_a_delay_spaces_the_requests_of_a_batch(state, server):
    opts = CrawlOptions(host_concurrency=4, host_delay=0.1, fetch_threads=8, timeout=10, allow_private=True)
    done = fetch_batch(HostGate(state, opts), requests_for(server, 4), opts)
    assert len(done.fetched) == 4
    starts = sorted(h.started for h in server.hits)
    assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.05


def test_a_host_that_stays_busy_is_deferred_not_waited_for(state, server):
    opts = CrawlOptions(host_concurrency=1, host_delay=0, timeout=10, allow_private=True)
    reqs = requests_for(server, 3)
    held, _ = state.acquire_slots(host_key(reqs[0].url), 1, limit=1, delay=0)  # another worker has it
    done = fetch_batch(HostGate(state, opts), reqs, opts, max_gate_wait=0.3)
    assert done.fetched == [] and len(done.deferred) == 3 and done.wait > 0
    assert not server.hits
    state.release_slots([(host_key(reqs[0].url), held[0])])
