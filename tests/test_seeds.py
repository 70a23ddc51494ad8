"""Seeds that keep coming: an endless start_requests() consumed lazily and stopped by max_pages, and
seeds pushed to a running feed crawl with Crawl.add and `crawltasks add`, until it is closed. The
pushed seeds (a command in another process) on a real worker; the rest on the twins."""

import subprocess
import sys

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import TwinDriver, run_crawl

from .sites import FAST, SiteServer, html, on_twins, serve, twin_site
from .spiders import EndlessSpider
from .workers import ROOT, wait_for, worker_env


def numbered(server: SiteServer, path: str):
    return 200, {}, html(f"Page {path}")


def numbered_site() -> dict:
    return {f"/n/{i}": numbered for i in range(2000)} | {f"/s/{i}": numbered for i in range(10)}


def test_an_endless_generator_is_stopped_by_max_pages(crawl_id):
    server = twin_site(numbered_site())
    rt = on_twins(server)
    try:
        EndlessSpider.base = server.base
        crawl = start_crawl(spider="test-endless", crawl_id=crawl_id, max_pages=300, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=90), crawl.stats()
        assert not crawl.feeder.alive
    finally:
        rt.close()
    stats = crawl.stats()
    assert stats["state"] == "finished" and stats["scheduled"] == 300 and stats["stored"] == 300
    assert len(crawl.pages()) == 300
    assert EndlessSpider.drawn[0] < 2000  # taken in chunks as the crawl needed them, not all at once


def test_seeds_pushed_to_a_running_feed_crawl(worker, rt, settings, crawl_id):
    server = serve(numbered_site())
    try:
        crawl = start_crawl(server.url("/s/0"), crawl_id=crawl_id, feed=True, **FAST)
        assert wait_for(lambda: crawl.stats()["stored"] == 1, timeout=30)
        assert not crawl.finished  # nothing pending, but open: more seeds may come
        assert crawl.add([server.url("/s/1"), server.url("/s/2"), server.url("/s/0")]) == 2
        done = subprocess.run([sys.executable, "-m", "crawltasks.cli", "add", crawl_id, server.url("/s/3")],
                              cwd=ROOT, env=worker_env(settings), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "1 new" in done.stdout
        assert wait_for(lambda: crawl.stats()["stored"] == 4, timeout=30), crawl.stats()
        assert not crawl.finished
        crawl.close()
        assert crawl.wait(timeout=30)
    finally:
        server.stop()
    assert sorted(p["url"].rsplit("/", 1)[-1] for p in crawl.pages()) == ["0", "1", "2", "3"]
    assert crawl.stats()["state"] == "finished"


def test_a_cancelled_feed_crawl_finishes(crawl_id):
    server = twin_site(numbered_site())
    rt = on_twins(server)
    driver = TwinDriver(rt)
    try:
        crawl = start_crawl(server.url("/s/0"), crawl_id=crawl_id, feed=True, rt=rt, **FAST)
        assert driver.run_until(lambda: crawl.stats()["stored"] == 1, timeout=30)
        crawl.cancel()
        assert driver.run(crawl, timeout=30)
    finally:
        driver.close()
        rt.close()
    assert crawl.stats()["state"] == "cancelled"
