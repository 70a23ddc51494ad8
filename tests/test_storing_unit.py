"""The store stage decides, then acts: ``decide_store`` returns what a part of a batch comes to
(documents, outcomes, counters, hook errors) and leaves its arguments alone, on no service;
``store_stage`` carries it out on the twins (frontier, registry, storage, bodies). Milliseconds."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from crawltasks.backends.memory.bodies import MemoryBodies
from crawltasks.backends.memory.frontier import MemoryFrontier
from crawltasks.backends.memory.registry import MemoryRegistry
from crawltasks.backends.memory.storage import MemoryStorage
from crawltasks.frontier.queues import HostPolicy
from crawltasks.items import DropItem
from crawltasks.models import Parsed, Request
from crawltasks.runtime import ProcessCaches
from crawltasks.settings import CrawlOptions
from crawltasks.spiders import Spider, SpiderNotFound, StopCrawl
from crawltasks.stages.itempipes import Chain
from crawltasks.stages.storedecision import StoreDecision, bodies_needed, decide_store, needs_spider
from crawltasks.stages.storing import carry_out, store_stage
from crawltasks.states import CrawlState
from crawltasks.urls import canonicalize, fingerprint


class Keeper(Spider):
    """Keeps every document; says which it saw, and fails or stops where a test asks it to."""

    name = "storing-unit-keeper"

    def __init__(self, crawl_id: str = "c", **kw: Any) -> None:
        super().__init__(crawl_id=crawl_id, **kw)
        self.seen: list[tuple[str, str]] = []
        self.stored: list[tuple[int, int]] = []

    def before_store(self, kind: str, doc: dict[str, Any]) -> dict[str, Any] | None:
        self.seen.append((kind, doc["url"]))
        if doc.get("title") == "bad":
            raise KeyError("broke")
        if doc.get("title") == "drop":
            return None
        if doc.get("title") == "stop":
            raise StopCrawl("enough")
        doc["checked"] = True
        return doc

    def after_store(self, pages: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
        self.stored.append((len(pages), len(items)))
        if any(p.get("title") == "late" for p in pages):
            raise RuntimeError("after the fact")


class NoNumbers:
    name = "nonumbers"

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        if "n" in item:
            raise DropItem("a number")
        return item


def url(path: str) -> str:
    return canonicalize(f"http://s.test{path}")


def page(path: str, lease: str = "", title: str = "t", body_key: str = "") -> dict[str, Any]:
    u = url(path)
    doc = {"crawl_id": "c", "fp": fingerprint(u), "ticket": fingerprint(u), "lease": lease or f"L{path}", "url": u,
           "status": 200, "depth": 0, "title": title, "referer": None}
    return {**doc, "body_key": body_key} if body_key else doc


def record(path: str) -> dict[str, Any]:
    u = url(path)
    return {"crawl_id": "c", "fp": fingerprint(u), "ticket": fingerprint(u), "outcome": "failed", "url": u,
            "final_url": u, "depth": 0, "reason": "http_404", "message": "", "status": 404, "attempts": 1,
            "transient": False, "referer": None, "meta": {}, "failed_at": "t", "lease": f"L{path}"}


def item(of: dict[str, Any] | None, **fields: Any) -> tuple[dict[str, Any], str]:
    doc = {"crawl_id": "c", "url": of["url"] if of else url("/"), "fp": fingerprint(repr(fields)), **fields}
    return doc, of["ticket"] if of else ""


def batch(pages: list[dict[str, Any]], items: list[tuple[dict[str, Any], str]] | None = None,
          records: list[dict[str, Any]] | None = None, skipped: list[tuple[str, str]] | None = None) -> Parsed:
    items = items or []
    return Parsed("c", pages=list(pages), items=[i for i, _ in items], item_tickets=[t for _, t in items],
                  records=list(records or []), skipped=list(skipped or []))


# --- the decision, on no service ---------------------------------------------------------------------
def test_a_batch_decides_its_documents_and_outcomes_and_changes_nothing_it_was_given():
    a, b = page("/a", body_key="body:a"), page("/b")
    given = batch([a, b], items=[item(a, title="x")], records=[record("/gone")], skipped=[("T-skip", "L-skip")])
    options, lost, bodies = CrawlOptions(), {a["lease"]: 0}, {"body:a": b"<p>a</p>"}
    before = copy.deepcopy((given.to_dict(), options, lost, bodies))
    d = decide_store(given, options, Keeper(), lost, bodies)
    assert [(p["url"], p.get("html"), p["checked"]) for p in d.pages] == [(a["url"], "<p>a</p>", True),
                                                                         (b["url"], None, True)]
    assert not any(k in p for p in d.pages for k in ("ticket", "lease", "body_key"))
    assert [i["title"] for i in d.items] == ["x"]
    assert [r["url"] for r in d.records] == [url("/gone")] and "lease" not in d.records[0]
    assert d.outcomes == [(a["ticket"], "stored", a["lease"]), (b["ticket"], "stored", b["lease"]),
                          (record("/gone")["ticket"], "failed", "L/gone"), ("T-skip", "skipped", "L-skip")]
    assert (d.counters, d.hook_errors, d.cancel) == ({}, [], None)
    assert d.failed == d.records
    assert copy.deepcopy((given.to_dict(), options, lost, bodies)) == before


def test_a_page_lost_too_often_ends_worker_lost_without_its_hooks():
    a, b = page("/a", body_key="body:a"), page("/b", body_key="body:b")
    given, options, lost, spider = batch([a, b]), CrawlOptions(max_worker_lost=2), {a["lease"]: 2}, Keeper()
    assert bodies_needed(given, options, lost) == ["body:b"]
    d = decide_store(given, options, spider, lost)
    assert spider.seen == [("page", b["url"])]
    [r] = d.records
    assert (r["url"], r["reason"], r["outcome"]) == (a["url"], "worker_lost", "failed")
    assert "died 2 times" in r["message"]
    assert d.outcomes == [(b["ticket"], "stored", b["lease"]), (a["ticket"], "failed", a["lease"])]


def test_the_spider_is_needed_only_for_what_is_left_to_store():
    a = page("/a")
    options = CrawlOptions(max_worker_lost=1)
    assert not needs_spider(batch([a]), options, {a["lease"]: 1})
    assert needs_spider(batch([a], items=[item(None, title="x")]), options, {a["lease"]: 1})
    assert needs_spider(batch([a]), options, {})


def test_a_spider_this_worker_cannot_load_fails_every_page_and_drops_the_items():
    a, b = page("/a"), page("/b")
    given = batch([a, b], items=[item(a, title="x"), item(None, title="y")])
    d = decide_store(given, CrawlOptions(max_worker_lost=1), None, {b["lease"]: 1}, missing="no spider 'x'")
    assert [(r["url"], r["reason"]) for r in d.records] == [(a["url"], "spider_not_found"), (b["url"], "worker_lost")]
    assert d.records[0]["message"] == "no spider 'x'"
    assert (d.pages, d.items) == ([], [])


def test_a_before_store_that_raises_ends_its_request_and_every_document_of_it():
    bad, good = page("/bad", title="bad"), page("/good")
    given = batch([bad, good], items=[item(bad, title="x"), item(good, title="bad"), item(None, title="y")])
    d = decide_store(given, CrawlOptions(), Keeper(), {})
    assert [p["url"] for p in d.pages] == []  # /good's item failed: /good ends with it
    assert [i["title"] for i in d.items] == ["y"]
    assert [(r["url"], r["reason"]) for r in d.records] == [(bad["url"], "hook_error"), (good["url"], "hook_error")]
    assert d.records[0]["message"] == "before_store(page): KeyError: 'broke'"
    assert d.counters == {"hook_errors": 2}
    assert [(e.hook, e.url) for e in d.hook_errors] == [("before_store(page)", bad["url"]),
                                                        ("before_store(item)", good["url"])]


def test_a_page_the_hook_drops_ends_skipped_and_is_not_written():
    dropped = page("/d", title="drop")
    d = decide_store(batch([dropped]), CrawlOptions(), Keeper(), {})
    assert (d.pages, d.records, d.outcomes) == ([], [], [(dropped["ticket"], "skipped", dropped["lease"])])


def test_stop_crawl_in_before_store_asks_for_a_cancel_and_keeps_the_document():
    stop = page("/s", title="stop")
    d = decide_store(batch([stop, page("/t", title="stop")]), CrawlOptions(), Keeper(), {})
    assert d.cancel == "enough"
    assert [p["url"] for p in d.pages] == [stop["url"], url("/t")]


def test_items_go_through_the_processors_only_when_some_reach_them():
    a = page("/a")
    opened: list[Chain] = []

    def chain() -> Chain:
        opened.append(Chain([NoNumbers()]))
        return opened[-1]

    decide_store(batch([a]), CrawlOptions(), Keeper(), {}, chain=chain)
    assert opened == [], "no item: the chain is not opened"
    d = decide_store(batch([a], items=[item(a, n=1), item(a, title="x")]), CrawlOptions(), Keeper(), {}, chain=chain)
    assert [i["title"] for i in d.items] == ["x"]
    assert d.counters == {"items_dropped_nonumbers": 1, "items_dropped": 1}
    assert len(opened) == 1


# --- acting on the twins -------------------------------------------------------------------------------
@dataclass
class Beat:
    id: str = "worker-1"

    def start(self) -> Beat:
        return self


@dataclass
class StoreRuntime:
    """The ports the store stage uses, as twins; the registry shares the frontier's counters."""

    options_of: dict[str, CrawlOptions] = field(default_factory=dict)
    the_spider: Spider | None = field(default_factory=Keeper)
    frontier: MemoryFrontier = field(default_factory=MemoryFrontier)
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    bodies: MemoryBodies = field(default_factory=MemoryBodies)
    heartbeat: Beat = field(default_factory=Beat)
    caches: ProcessCaches = field(default_factory=ProcessCaches)

    def __post_init__(self) -> None:
        self.state = MemoryRegistry(frontier=self.frontier)
        for crawl_id, options in self.options_of.items():
            self.state.create_crawl(crawl_id, options.to_dict(), [])

    def options(self, crawl_id: str) -> CrawlOptions:
        return self.options_of[crawl_id]

    def spider(self, crawl_id: str) -> Spider:
        if self.the_spider is None:
            raise SpiderNotFound("no spider 'gone'")
        return self.the_spider


def taken(rt: StoreRuntime, *paths: str) -> dict[str, str]:
    """Leases of the crawl "c"'s requests, taken from the frontier as the dispatcher takes them: path -> lease."""
    rt.frontier.add("c", [Request(url=url(p), fp=fingerprint(url(p)), ticket=fingerprint(url(p))) for p in paths])
    got = rt.frontier.take("c", 10, HostPolicy(concurrency=10, delay=0)).requests
    by_url = {r.url: r.lease for r in got}
    return {p: by_url[url(p)] for p in paths}


def test_a_batch_is_written_then_its_requests_finish_and_the_crawl_completes_once():
    rt = StoreRuntime(options_of={"c": CrawlOptions()})
    leases = taken(rt, "/a", "/gone")
    rt.bodies.park("c", {fingerprint(url("/a")): b"<p>a</p>"}, ttl=60)
    a = page("/a", lease=leases["/a"], body_key=rt.bodies.key("c", fingerprint(url("/a"))))
    message = batch([a], items=[item(a, title="x")], records=[{**record("/gone"), "lease": leases["/gone"]}])
    message.body_keys.append(a["body_key"])
    assert store_stage(rt, "c", message) is True  # type: ignore[arg-type]
    assert [(p["url"], p["html"]) for p in rt.storage.pages("c")] == [(a["url"], "<p>a</p>")]
    assert [i["title"] for i in rt.storage.items("c")] == ["x"]
    assert [f["url"] for f in rt.storage.failures("c")] == [url("/gone")]
    assert (rt.state.outcome_of("c", a["ticket"]), rt.state.state_of("c")) == ("stored", CrawlState.FINISHED)
    assert rt.bodies.kept == {}
    assert store_stage(rt, "c", message) is False, "a stale delivery finishes nothing again"  # type: ignore[arg-type]


def test_after_store_that_raises_undoes_nothing():
    rt = StoreRuntime(options_of={"c": CrawlOptions()})
    late = page("/late", lease=taken(rt, "/late")["/late"], title="late")
    assert store_stage(rt, "c", batch([late])) is True  # type: ignore[arg-type]
    assert [p["url"] for p in rt.storage.pages("c")] == [late["url"]]
    assert rt.state.stats("c")["hook_errors"] == 1
    assert rt.state.outcome_of("c", late["ticket"]) == "stored"


def test_a_request_lost_with_its_worker_too_often_ends_worker_lost():
    rt = StoreRuntime(options_of={"c": CrawlOptions(max_worker_lost=1)})
    lease = taken(rt, "/poison")["/poison"]
    claim = rt.frontier.claims["c"][lease]
    claim.owner, claim.hot = "dead-worker", True  # it was being worked on when its worker died
    poison = page("/poison", lease=lease)
    assert store_stage(rt, "c", batch([poison])) is True  # type: ignore[arg-type]
    assert list(rt.storage.pages("c")) == []
    assert [(f["url"], f["reason"]) for f in rt.storage.failures("c")] == [(poison["url"], "worker_lost")]


def test_a_spider_this_worker_cannot_load_fails_the_pages_spider_not_found():
    rt = StoreRuntime(options_of={"c": CrawlOptions()}, the_spider=None)
    a = page("/a", lease=taken(rt, "/a")["/a"])
    store_stage(rt, "c", batch([a]))  # type: ignore[arg-type]
    assert [(f["url"], f["reason"]) for f in rt.storage.failures("c")] == [(a["url"], "spider_not_found")]


def test_carrying_out_a_cancel_stops_the_crawl_before_the_write():
    rt = StoreRuntime(options_of={"c": CrawlOptions()})
    a = page("/a", lease=taken(rt, "/a")["/a"])
    rt.frontier.add("c", [Request(url=url("/b"), fp=fingerprint(url("/b")), ticket=fingerprint(url("/b")))])
    decision = StoreDecision(pages=[{k: v for k, v in a.items() if k not in ("ticket", "lease")}],
                             outcomes=[(a["ticket"], "stored", a["lease"])], counters={"hook_errors": 1},
                             cancel="enough")
    carry_out(rt, "c", None, decision)  # type: ignore[arg-type]
    assert rt.state.state_of("c") == CrawlState.CANCELLED  # /b, queued, ended skipped with the cancel
    assert [p["url"] for p in rt.storage.pages("c")] == [a["url"]]
    assert rt.state.stats("c")["hook_errors"] == 1
