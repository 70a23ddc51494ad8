"""A crawl whose Redis state was lost is rebuilt from MongoDB when it is continued by its id: what is
stored is not fetched again, what is missing is, and the counters end exact.

The loss is made by hand here (the crawl's keys deleted, some pages taken out of MongoDB as if their
store never happened), so the site's log can be compared with exactly what MongoDB misses; the same
with a real redis-server restarted empty mid-crawl is in ``tests/test_services_down.py``."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from crawltasks import start_crawl
from crawltasks.backends.redis.keys import Keys
from crawltasks.monitor.watch import list_rows
from crawltasks.storage.mongo import CRAWLS, PAGES, of_crawl

from .sites import FAST, serve, slow_page

N_PAGES = 60
MISSING = {f"/p/{i}" for i in (7, 8, 9, 30, 59)}  # a run of pages that link on to each other, and the last


def branching_site(n: int) -> dict:
    return {f"/p/{i}": slow_page(f"P{i}", [f"/p/{j}" for j in (i + 1, 2 * i + 1) if j < n], 0.0) for i in range(n)}


@pytest.mark.parametrize("dedupe", [{}, {"dedupe": "bloom", "bloom_capacity": 10_000}], ids=["set", "bloom"])
def test_a_crawl_continued_after_its_redis_state_was_lost_fetches_only_what_mongo_misses(rt, worker, crawl_id,
                                                                                          dedupe):
    server = serve(branching_site(N_PAGES))
    try:
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, obey_robots=False, **FAST, **dedupe)
        assert crawl.wait(timeout=60), crawl.stats()
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
        assert again.wait(timeout=60), again.stats()
        assert sorted(server.fetched_paths()) == sorted(MISSING), "only what MongoDB missed is fetched"
        paths = [urlsplit(p["url"]).path for p in again.pages()]
        assert sorted(paths) == sorted(f"/p/{i}" for i in range(N_PAGES)), "every page once"
        stats = again.stats()
        assert stats["state"] == "finished" and stats["stored"] == N_PAGES and stats["pending"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
        assert crawl_id not in {r["crawl_id"] for r in list_rows(rt) if r["state"] == "lost"}
    finally:
        server.stop()


def test_a_crawl_that_mongo_does_not_know_starts_afresh(rt, worker, crawl_id):
    """No record and no page in MongoDB: nothing to rebuild from, the id is a new crawl."""
    server = serve(branching_site(5))
    try:
        rt.state.r.hset(Keys.meta(crawl_id), "state", "lost")  # what FINISH leaves after a loss
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, obey_robots=False, rt=rt, **FAST)
        assert crawl.wait(timeout=60), crawl.stats()
        assert crawl.stats()["stored"] == 5
    finally:
        server.stop()
