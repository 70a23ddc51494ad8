"""On Redis, a worker drains the high-priority fetch queue before the default and low ones."""

from crawltasks import Request, start_crawl
from crawltasks.local.workers import InProcessWorker
from crawltasks.worker.app import app

from .sites import FAST, page, serve


def test_high_priority_requests_overtake_queued_low_ones(rt, crawl_id):
    server = serve({f"/{kind}/{i}": page(f"{kind} {i}") for kind in ("low", "high") for i in range(12)})
    try:
        opts = dict(FAST, max_depth=0, batch_size=1)
        low = start_crawl([Request(server.url(f"/low/{i}"), priority="low") for i in range(12)],
                          crawl_id=crawl_id + "-low", **opts)
        high = start_crawl([Request(server.url(f"/high/{i}"), priority="high") for i in range(12)],
                           crawl_id=crawl_id + "-high", **opts)
        worker = InProcessWorker(app, concurrency=1)  # one slot: the order of fetches is the queue order
        worker.start()
        try:
            assert high.wait(timeout=60) and low.wait(timeout=60)
        finally:
            worker.stop()
        order = [p for p in server.fetched_paths() if p != "/robots.txt"]
        assert sorted(order) == sorted(f"/{k}/{i}" for k in ("low", "high") for i in range(12))
        assert all(p.startswith("/high/") for p in order[:12]), " ".join(order)
    finally:
        server.stop()
