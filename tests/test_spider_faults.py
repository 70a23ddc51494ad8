"""A spider's faults cost only the requests they touch: hooks and parse that raise, a spider the worker
cannot load. On the twins: a whole crawl in this process, the fixture site in memory."""

from __future__ import annotations

import logging
import sys
from urllib.parse import urlsplit

import pytest

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.spiders import Spider, SpiderNotFound, resolve_spider

from .sites import FAST, on_twins, page, twin_site

FAULTY = ["/bad-after-response", "/bad-parse", "/bad-before-store", "/bad-item", "/bad-after-store"]
GOOD = ["/", "/a", "/b", "/c"]


def paths(docs) -> dict[str, dict]:
    return {urlsplit(d["url"]).path: d for d in docs}


@pytest.fixture
def faulty_site():
    routes = {"/": page("Home", [*FAULTY, "/a", "/b", "/c"])}
    routes.update({p: page(p.strip("/").title()) for p in [*FAULTY, "/a", "/b", "/c"]})
    yield twin_site(routes)


def test_hook_and_parse_errors_fail_their_own_request_and_the_crawl_finishes(faulty_site, crawl_id, caplog):
    caplog.set_level(logging.WARNING, logger="crawltasks.events")
    rt = on_twins(faulty_site)
    crawl = start_crawl(faulty_site.url("/"), spider="test-faulty", crawl_id=crawl_id, batch_size=16, rt=rt, **FAST)
    try:
        assert run_crawl(rt, crawl, timeout=60), f"a hook's exception stalled the crawl: {crawl.stats()}"
    finally:
        rt.close()

    failures = paths(crawl.failures())
    assert {p: f["reason"] for p, f in failures.items()} == {
        "/bad-after-response": "hook_error", "/bad-parse": "spider_error",
        "/bad-before-store": "hook_error", "/bad-item": "hook_error"}
    assert "after_response: RuntimeError: after_response broke" in failures["/bad-after-response"]["message"]
    assert "before_store(page): KeyError" in failures["/bad-before-store"]["message"]
    assert "before_store(item): TypeError" in failures["/bad-item"]["message"]
    assert all(f["outcome"] == "failed" and f["attempts"] == 1 for f in failures.values())

    stored = paths(crawl.pages())
    assert set(stored) == {*GOOD, "/bad-after-store"}, "a page beside a failing one was not stored"
    assert not [k for doc in stored.values() for k in ("request", "ticket", "lease") if k in doc]
    items = sorted(i["title"] for i in crawl.items())
    assert items == sorted(stored[p]["title"] for p in stored), "items of failed pages were stored"

    stats = crawl.stats()
    assert (stats["state"], stats["pending"], stats["stored"], stats["failed"]) == ("finished", 0, 5, 4)
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
    assert stats["hook_errors"] == 4  # after_response, before_store twice, after_store
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hook.error")]
    assert any("hook=after_store" in line and "after_store broke" in line for line in logged), logged


def _unimportable() -> type[Spider]:
    class Unimportable(Spider):  # its import path names a function's locals: no worker can import it
        pass
    return Unimportable


@pytest.mark.parametrize(("spider", "message"), [(_unimportable(), "cannot import spider"),
                                                 ("test-broken-init", "SPIDER_API_KEY is not set")])
def test_a_spider_the_worker_cannot_load_fails_every_seed_at_once(crawl_id, spider, message):
    server = twin_site({"/": page("Home", ["/a"]), "/a": page("A"), "/b": page("B")})
    rt = on_twins(server)
    try:
        seeds = [server.url("/"), server.url("/a"), server.url("/b")]
        crawl = start_crawl(seeds, spider=spider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30), f"requests of a missing spider were not ended: {crawl.stats()}"
        failures = crawl.failures()
        assert sorted(f["url"] for f in failures) == sorted(seeds)
        assert {f["reason"] for f in failures} == {"spider_not_found"}
        assert all(message in f["message"] and f["outcome"] == "failed" for f in failures), failures
        stats = crawl.stats()
        assert (stats["state"], stats["failed"], stats["stored"], stats["pending"]) == ("finished", 3, 0, 0)
        assert server.hits == [], "requests of a spider nobody can run were fetched"
    finally:
        rt.close()


def test_a_spider_module_that_fails_to_import_is_a_missing_spider(tmp_path, monkeypatch):
    (tmp_path / "broken_spiders.py").write_text("raise RuntimeError('half deployed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SpiderNotFound, match="half deployed"):
        resolve_spider("broken_spiders:Whatever")
    with pytest.raises(SpiderNotFound, match="broken_spiders: RuntimeError: half deployed"):
        resolve_spider("not-registered-anywhere", ["broken_spiders"])
    sys.modules.pop("broken_spiders", None)
