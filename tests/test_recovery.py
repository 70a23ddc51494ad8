"""A crawl whose Redis state was lost is rebuilt from MongoDB when it is continued by its id: what is
stored is not fetched again, what is missing is, and the counters end exact.

The loss is made by hand here (the crawl's keys deleted, some pages taken out of MongoDB as if their
store never happened), so the site's log can be compared with exactly what MongoDB misses. The crawls
run in this process on the real stores (``on_stores``: the test Redis and MongoDB, a driver in the
workers' place); the same with real workers and a real redis-server restarted empty mid-crawl is in
``tests/test_services_down.py``."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.monitor.watch import list_rows
from crawltasks.runtime import Runtime
from crawltasks.storage.mongo import CRAWLS, PAGES, of_crawl

from .sites import FAST, TwinSite, on_stores, on_twins, page, twin_site

N_PAGES = 30
MISSING = {f"/p/{i}" for i in (3, 7, 15, 20, 29)}  # a run of pages that link on to each other, and the last


def branching_site(n: int) -> TwinSite:
    """A binary tree of pages: /p/i links to /p/2i+1 and /p/2i+2."""
    return twin_site({f"/p/{i}": page(f"P{i}", [f"/p/{j}" for j in (2 * i + 1, 2 * i + 2) if j < n])
                      for i in range(n)})


@pytest.fixture
def server() -> TwinSite:
    return branching_site(N_PAGES)


@pytest.fixture
def rt(quiet_settings, server: TwinSite) -> Iterator[Runtime]:
    runtime = on_stores(server, quiet_settings)
    yield runtime
    runtime.close()


@pytest.mark.parametrize("dedupe", [{}, {"dedupe": "bloom", "bloom_capacity": 10_000}], ids=["set", "bloom"])
def test_a_crawl_continued_after_its_redis_state_was_lost_fetches_only_what_mongo_misses(rt, server, crawl_id,
                                                                                          dedupe):
    crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, obey_robots=False, rt=rt, **FAST, **dedupe)
    assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    assert crawl.stats()["stored"] == N_PAGES
    docs = {urlsplit(p["url"]).path: p for p in rt.storage.db[PAGES].find(of_crawl(crawl_id))}
    assert sum(len(p.get("discovered", [])) for p in docs.values()) == N_PAGES - 1  # each request once
    assert "discovered" not in crawl.pages()[0]  # kept for a rebuild, never read back
    rt.storage.db[PAGES].delete_many({"_id": {"$in": [docs[path]["_id"] for path in MISSING]}})
    rt.state.delete_crawl(crawl_id)  # Redis forgot everything of it
    rt.storage.db[CRAWLS].update_one({"_id": crawl_id}, {"$unset": {"finished_at": ""}})  # as if mid-crawl
    assert [r["state"] for r in list_rows(rt) if r["crawl_id"] == crawl_id] == ["lost"]
    assert crawl.stats()["state"] == "lost"
    server.hits.clear()

    again = start_crawl(crawl_id=crawl_id, rt=rt)  # by its id alone, as `crawltasks crawl --crawl-id`
    assert run_crawl(rt, again, timeout=60), again.stats()
    assert sorted(server.fetched_paths()) == sorted(MISSING), "only what MongoDB missed is fetched"
    paths = [urlsplit(p["url"]).path for p in again.pages()]
    assert sorted(paths) == sorted(f"/p/{i}" for i in range(N_PAGES)), "every page once"
    stats = again.stats()
    assert stats["state"] == "finished" and stats["stored"] == N_PAGES and stats["pending"] == 0
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
    assert crawl_id not in {r["crawl_id"] for r in list_rows(rt) if r["state"] == "lost"}


def test_a_crawl_that_mongo_does_not_know_starts_afresh(crawl_id):
    """No record and no page in MongoDB: nothing to rebuild from, the id is a new crawl."""
    server = branching_site(5)
    rt = on_twins(server)
    try:
        rt.state.finish(crawl_id, [("t", "stored", "")])  # a crawl with no record: FINISH leaves it lost
        assert rt.state.crawl_meta(crawl_id) == {"state": "lost"}
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, obey_robots=False, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert crawl.stats()["stored"] == 5
    finally:
        rt.close()
