"""What a worker does with a dispatched batch before fetching (``stages.admit``), seen through whole
crawls on the twins: a batch reaching a paused crawl goes back to the frontier, one reaching a
cancelled crawl ends skipped, and ``before_request`` may stop the crawl or fail its own request."""

from __future__ import annotations

from urllib.parse import urlsplit

from crawltasks import Crawl, start_crawl
from crawltasks.backends.memory.driver import TwinDriver, run_crawl
from crawltasks.spiders import Spider, StopCrawl

from .sites import FAST, on_twins, page, twin_site


class StopAtSpider(Spider):
    """Stops the crawl when it is about to ask for /stop."""

    name = "test-admit-stop"

    def before_request(self, request):
        if request.url.endswith("/stop"):
            raise StopCrawl("enough for today")
        return request


class BrokenHookSpider(Spider):
    """Its before_request fails on /broken and skips /b."""

    name = "test-admit-broken"

    def before_request(self, request):
        if request.url.endswith("/broken"):
            raise LookupError("no such key")
        return None if request.url.endswith("/b") else request


def site():
    return twin_site({"/": page("Home", ["/a", "/b", "/stop", "/broken"]), "/a": page("A"), "/b": page("B"),
                      "/stop": page("Stop"), "/broken": page("Broken")})


def paths(crawl: Crawl) -> list[str]:
    return sorted(urlsplit(p["url"]).path for p in crawl.pages())


def test_a_batch_reaching_a_paused_crawl_goes_back_and_is_fetched_after_resume(crawl_id):
    server = site()
    rt = on_twins(server)
    driver = TwinDriver(rt)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, rt=rt, obey_robots=False, **FAST)
        driver.dispatcher.step()  # the seed's batch is on its way to a worker ...
        assert crawl.pause() and driver.deliver() == 1  # ... which finds the crawl paused
        assert not server.hits and rt.frontier.sizes(crawl_id).queued == 1
        assert crawl.resume() and driver.run(crawl, timeout=20)
        assert paths(crawl) == ["/", "/a", "/b", "/broken", "/stop"] and server.counts["/"] == 1
    finally:
        driver.close()
        rt.close()


def test_a_batch_reaching_a_cancelled_crawl_ends_skipped(crawl_id):
    server = site()
    rt = on_twins(server)
    driver = TwinDriver(rt)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, rt=rt, obey_robots=False, **FAST)
        driver.dispatcher.step()
        assert crawl.cancel()
        assert driver.run(crawl, timeout=20)
        stats = crawl.stats()
        assert (stats["state"], stats["stored"], stats["skipped"]) == ("cancelled", 0, 1) and not server.hits
    finally:
        driver.close()
        rt.close()


def test_before_request_may_stop_the_crawl(crawl_id):
    server = site()
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, rt=rt, spider=StopAtSpider, obey_robots=False,
                            **{**FAST, "batch_size": 1, "host_concurrency": 1})
        assert run_crawl(rt, crawl, timeout=20)
        stats = crawl.stats()
        assert stats["state"] == "cancelled" and "/stop" not in server.counts
        assert stats["stored"] + stats["skipped"] == stats["scheduled"] and stats["skipped"] >= 1
        assert not crawl.failures()  # cancelled requests leave no record
    finally:
        rt.close()


def test_a_failing_before_request_fails_only_its_request(crawl_id):
    server = site()
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, rt=rt, spider=BrokenHookSpider, obey_robots=False,
                            **FAST)
        assert run_crawl(rt, crawl, timeout=20)
        assert paths(crawl) == ["/", "/a", "/stop"] and "/broken" not in server.counts and "/b" not in server.counts
        records = {urlsplit(f["url"]).path: f for f in crawl.failures()}
        assert (records["/broken"]["reason"], records["/broken"]["outcome"]) == ("hook_error", "failed")
        assert "LookupError" in records["/broken"]["message"]
        assert (records["/b"]["reason"], records["/b"]["outcome"]) == ("skipped_by_hook", "skipped")
        stats = crawl.stats()
        assert (stats["state"], stats["failed"], stats["skipped"]) == ("finished", 1, 1)
    finally:
        rt.close()
