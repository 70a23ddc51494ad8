"""Redis goes away mid-crawl and comes back: workers reconnect and the crawl finishes, nothing lost.

The test runs its own redis-server (its own port, append-only file on) as broker and crawl state,
stops it for a few seconds while two worker processes are busy, and starts it again on the same data.
"""

import shutil
import time
from dataclasses import replace
from urllib.parse import urlsplit

import pytest

from crawltasks import runtime, start_crawl
from crawltasks.local.embedded import MongoProcess
from crawltasks.settings import Settings
from crawltasks.worker.app import use_broker

from .helpers import OwnRedis, wait_for
from .sites import serve, slow_page
from .workers import WorkerProcess

N_PAGES = 300


def slow_site(n: int, delay: float) -> dict:
    """n pages answering after ``delay`` seconds, each linking to two others: work stays in flight."""
    return {f"/p/{i}": slow_page(f"P {i}", [f"/p/{(i + 1) % n}", f"/p/{(i * 7 + 3) % n}"], delay) for i in range(n)}


def crawl_through_outage(local: Settings, here: runtime.Runtime, crawl_id: str, tmp_path, stop, start) -> dict:
    """Crawl with two worker processes; once 40 pages are stored, stop() a service for 5 s, then start()
    it again. Asserts every page stored exactly once and consistent counters; returns the stats."""
    server = serve(slow_site(N_PAGES, 0.02))
    workers = [WorkerProcess(local, f"outage{i}", concurrency=4, log_path=tmp_path / f"w{i}.log",
                             env={"CRAWLTASKS_RECLAIM_INTERVAL": "1"}) for i in range(2)]
    try:
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, host_delay=0, host_concurrency=8, batch_size=4,
                            obey_robots=False, retry_base=0.05, timeout=3, lease_time=8, rt=here)
        assert wait_for(lambda: crawl.stats()["stored"] >= 40, timeout=60)
        stop()
        time.sleep(5)  # the outage itself: letting time pass while the service is down is the point
        start()
        assert crawl.wait(timeout=180), crawl.stats()
        stored = [urlsplit(p["url"]).path for p in crawl.pages()]
        assert sorted(stored) == sorted(f"/p/{i}" for i in range(N_PAGES)), "a page was lost or stored twice"
        stats = crawl.stats()
        assert stats["stored"] == N_PAGES and stats["pending"] == 0 and stats["failed"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["skipped"]
        return stats
    finally:
        for w in workers:
            w.kill()
        server.stop()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_crawl_survives_a_redis_outage(settings, rt, tmp_path, crawl_id):
    own = OwnRedis(tmp_path)
    own.start()
    local = replace(settings, broker_url=own.url, redis_url=own.url)
    use_broker(own.url)
    try:
        here = runtime.Runtime(local)  # this test's own Redis; the session's runtime stays as it is
        stats = crawl_through_outage(local, here, crawl_id, tmp_path, own.stop, own.start)
        print(f"redis outage: {N_PAGES} pages stored once; reclaimed {stats['reclaimed']}")
    finally:
        own.stop()
        use_broker(settings.broker_url)


def test_crawl_survives_a_mongo_outage(settings, rt, tmp_path, crawl_id):
    mongo = MongoProcess(tmp_path / "mongo", tmp_path / "mongo.log")
    local = replace(settings, mongo_url=mongo.start(), mongo_db="outage")
    here = runtime.Runtime(local)
    try:
        stats = crawl_through_outage(local, here, crawl_id, tmp_path, mongo.stop, mongo.start)
        print(f"mongo outage: {N_PAGES} pages stored once; reclaimed {stats['reclaimed']}")
    finally:
        here.close()
        mongo.stop()
