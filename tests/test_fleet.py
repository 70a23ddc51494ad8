"""Two real worker processes share one crawl: per-host limits hold across them, pause reaches both."""

import time
from urllib.parse import urlsplit

import pytest

from crawltasks import start_crawl

from .helpers import settled, wait_for
from .sites import serve, slow_page
from .workers import WorkerProcess


def slow_pages(n: int, delay: float) -> dict:
    routes = {"/": slow_page("Home", [f"/p/{i}" for i in range(n)], delay)}
    routes.update({f"/p/{i}": slow_page(f"P {i}", [f"/p/{(i * 3) % n}"], delay) for i in range(n)})
    return routes


@pytest.fixture(scope="module")
def fleet(rt, settings, tmp_path_factory):
    """Two worker processes, shared by the tests here (each runs a crawl of its own): starting and
    stopping them once saves seconds per test."""
    logs = tmp_path_factory.mktemp("fleet")
    workers = [WorkerProcess(settings, f"w{i}", concurrency=4, log_path=logs / f"w{i}.log") for i in range(2)]
    yield workers
    for w in workers:
        w.stop()


def max_overlap(hits) -> int:
    events = sorted([(h.started, 1) for h in hits] + [(h.ended, -1) for h in hits])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def test_two_workers_respect_one_hosts_parallel_limit_and_delay(fleet, rt, crawl_id):
    server = serve(slow_pages(40, 0.15))
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, host_concurrency=2, host_delay=0.1,
                            batch_size=4, retry_base=0.05, obey_robots=False, timeout=10)
        assert crawl.wait(timeout=120), crawl.stats()
        assert len(crawl.pages()) == 41
        hits = [h for h in server.hits if h.ended]
        assert len(hits) == 41, "each page once"
        assert max_overlap(hits) <= 2, "more than host_concurrency requests at once"
        started = sorted(h.started for h in hits)
        gaps = [b - a for a, b in zip(started, started[1:], strict=False)]
        # The gate grants a slot right before the request starts: at the server, starts are a delay
        # apart, with 10 % allowed for clock jitter.
        assert started[-1] - started[0] >= 0.95 * 0.1 * (len(started) - 1), "faster than one request per delay"
        assert min(gaps) >= 0.09, f"two requests closer than host_delay: {min(gaps):.3f}s"
        print(f"two workers, one host: peak {max_overlap(hits)} in flight (limit 2), "
              f"min gap {min(gaps):.3f}s (delay 0.1s), {len(hits)} requests")
    finally:
        server.stop()


def test_pause_stops_both_workers_and_resume_finishes_the_same_pages(fleet, rt, crawl_id):
    server = serve(slow_pages(80, 0.05))
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, host_concurrency=4, host_delay=0.02,
                            batch_size=2, obey_robots=False, retry_base=0.05, timeout=10)
        assert wait_for(lambda: crawl.stats()["stored"] >= 10, timeout=60)
        assert crawl.pause()
        assert crawl.stats()["state"] == "paused"
        # batches that were already fetching finish; then nothing
        hits = settled(lambda: len(server.hits), hold=1.0, timeout=30, what="the site's request log")
        time.sleep(2.0)  # letting time pass is the point: a paused crawl must fetch nothing meanwhile
        assert len(server.hits) == hits, "a paused crawl kept fetching"
        assert crawl.stats()["pending"] > 0
        assert crawl.resume()
        assert crawl.wait(timeout=120), crawl.stats()
        stored = {urlsplit(p["url"]).path for p in crawl.pages()}
        assert stored == {"/", *(f"/p/{i}" for i in range(80))}
        assert crawl.stats()["state"] == "finished"
    finally:
        server.stop()
