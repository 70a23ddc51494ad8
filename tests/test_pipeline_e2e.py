"""End to end on real parts: a real worker, the machine's Redis, SecantusDB, a local fixture site; the
crawls that only check crawl behaviour (depth, a user spider's items, a crawl run again) on the twins."""

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from crawltasks import Crawl, start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.runtime import Runtime

from .sites import FAST, TwinSite, basic_site, expected_basic_paths, on_twins, twin_site


@pytest.fixture
def twin_basic() -> Iterator[tuple[Runtime, TwinSite]]:
    """The basic site answered in memory, and a twin runtime fetching from it."""
    site = twin_site(basic_site())
    rt = on_twins(site)
    yield rt, site
    rt.close()


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_basic_site_exact_pages_failures_and_counters(worker, rt, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=3, **FAST)
    assert crawl.wait(timeout=60), crawl.stats()

    pages = crawl.pages()
    stored = {path_of(p["url"]) for p in pages}
    assert stored == expected_basic_paths()
    assert len(pages) == len(stored), "a page was stored twice"
    by_path = {path_of(p["url"]): p for p in pages}
    assert by_path["/"]["depth"] == 0 and by_path["/"]["title"] == "Home"
    assert by_path["/target"]["requested_url"].endswith("/moved")
    assert by_path["/doc.pdf"]["content_type"] == "application/pdf" and by_path["/doc.pdf"]["title"] is None
    assert by_path["/flaky"]["title"] == "Flaky recovered"

    failures = {path_of(f["url"]): f for f in crawl.failures()}
    assert set(failures) == {"/missing", "/dead"}
    assert failures["/missing"]["reason"] == "http_404" and failures["/missing"]["attempts"] == 1
    assert failures["/dead"]["reason"] == "http_500" and failures["/dead"]["attempts"] == 4

    stats = crawl.stats()
    assert stats["state"] == "finished" and stats["pending"] == 0
    assert stats["stored"] == len(expected_basic_paths())
    assert stats["failed"] == 2
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
    assert stats["retried"] == 3 + 2  # the dead page's 3 retries, the flaky page's 2
    assert basic_server.counts["/dead"] == 4 and basic_server.counts["/missing"] == 1


def test_second_run_of_the_same_crawl_stores_nothing_twice(twin_basic, crawl_id):
    rt, basic_server = twin_basic
    first = start_crawl(basic_server.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    assert run_crawl(rt, first, timeout=60)
    before = (first.counts(), basic_server.counts.copy())
    again = start_crawl(basic_server.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    assert run_crawl(rt, again, timeout=30)
    assert again.counts() == before[0]
    assert basic_server.counts == before[1], "a second run fetched pages again"


def test_max_depth_zero_fetches_only_the_seed(twin_basic, crawl_id):
    rt, basic_server = twin_basic
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, rt=rt, max_depth=0, **FAST)
    assert run_crawl(rt, crawl, timeout=30)
    assert [path_of(p["url"]) for p in crawl.pages()] == ["/"]
    assert crawl.stats()["filtered_depth"] > 0


def test_user_spider_items_and_lazy_soup(twin_basic, crawl_id):
    rt, basic_server = twin_basic
    crawl = start_crawl(basic_server.url("/p/0"), spider="test-titles", crawl_id=crawl_id, rt=rt, max_depth=1,
                        **FAST)
    assert run_crawl(rt, crawl, timeout=30)
    items = crawl.items()
    assert {i["title"] for i in items} == {p["title"] for p in crawl.pages() if p["title"]}
    assert all(i["crawl_id"] == crawl_id and i["url"].startswith(basic_server.base) for i in items)
    assert Crawl(crawl_id, rt).stats()["items"] == len(items)


def test_bloom_dedupe_gives_the_same_pages(worker, rt, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, dedupe="bloom", bloom_capacity=10_000, **FAST)
    assert crawl.wait(timeout=60), crawl.stats()
    stored = {path_of(p["url"]) for p in crawl.pages()}
    assert stored == expected_basic_paths() and len(crawl.pages()) == len(stored)
    assert rt.state.r.exists(f"ct:{{{crawl_id}}}:bloom") and not rt.state.r.exists(f"ct:{{{crawl_id}}}:seen")
    stats = crawl.stats()
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
