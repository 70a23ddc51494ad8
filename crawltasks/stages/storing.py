"""The store stage: bulk writes (one document per key), then the tickets are finished in Redis
(and completion may fire)."""

from __future__ import annotations

from typing import Any

from .. import logs
from ..frontier import revisit
from ..models import Fetched, Parsed, Request
from ..monitor import notify
from ..reasons import Reason
from ..runtime import Runtime
from ..spiders import Spider, SpiderNotFound, StopCrawl
from ..storage.mongo import FAILURES, ITEMS, PAGES
from ..worker.custody import Custody
from .itempipes import close_chain, run_items
from .outcomes import IN_TRANSIT, Ending, cancel, hook_failed, lost_message, now_iso, record_doc, spider_missing


def store_stage(rt: Runtime, crawl_id: str, parsed: Parsed) -> bool:
    """Upsert pages, items and records; only then count them done. True if the crawl just finished.

    Only the requests whose claims this delivery holds are stored, those lost with their worker
    before one at a time (``custody``). A ``before_store`` that raises fails its request
    (``hook_error``) and the rest is stored; ``after_store`` runs after the write, so its exception
    is logged and counted (``hook_errors``) but never undoes what was stored."""
    leases = [p["lease"] for p in parsed.pages] + [r["lease"] for r in parsed.records]
    leases += [lease for _, lease in parsed.skipped]
    custody = Custody(rt, crawl_id, leases)
    finished, tickets = False, []
    for n, part in enumerate(custody.parts(leases)):
        batch = _part(parsed, set(part), first=n == 0)
        with custody.working(part, cool=False):  # finished requests have no claim left to cool
            finished = _store_part(rt, crawl_id, batch, custody) or finished
        tickets += [p["ticket"] for p in batch.pages] + [r["ticket"] for r in batch.records]
        tickets += [ticket for ticket, _ in batch.skipped]
    held = {rt.bodies.key(crawl_id, ticket) for ticket in tickets}  # a stale delivery's keys are the refetch's
    rt.bodies.drop([key for key in parsed.body_keys if key in held])
    if finished:
        close_chain(rt, crawl_id)
        state = rt.state.state_of(crawl_id)
        rt.storage.crawl_ended(crawl_id, state)
        logs.crawl_finished(crawl_id, {**rt.state.stats(crawl_id), "state": state})
    notify.observe(rt, crawl_id, finished)  # the crawl's webhook, if it has one: never waits, never raises
    return finished


def _part(parsed: Parsed, leases: set[str], first: bool) -> Parsed:
    """The pages, items, records and skips of the requests in ``leases`` (items of no known page
    go with the first part); its bodies are dropped by the caller, once every part is stored."""
    pages = [p for p in parsed.pages if p["lease"] in leases]
    tickets = {p["ticket"] for p in pages} | {r["ticket"] for r in parsed.records if r["lease"] in leases}
    owned = zip(parsed.items, parsed.item_tickets, strict=True)
    items = [(i, t) for i, t in owned if t in tickets or (first and not t)]
    return Parsed(parsed.crawl_id, pages=pages, items=[i for i, _ in items], item_tickets=[t for _, t in items],
                  records=[r for r in parsed.records if r["lease"] in leases],
                  skipped=[(t, lease) for t, lease in parsed.skipped if lease in leases])


def _store_part(rt: Runtime, crawl_id: str, batch: Parsed, custody: Custody) -> bool:
    """Hooks, bulk writes, then the requests finished. True if the crawl just finished."""
    storage, state, options = rt.storage, rt.state, rt.options(crawl_id)
    ended = {p["ticket"]: Ending(reason=Reason.WORKER_LOST, message=lost_message(custody.lost(p["lease"])))
             for p in batch.pages if custody.lost(p["lease"]) >= options.max_worker_lost}
    spider = None
    if batch.items or len(ended) < len(batch.pages):
        try:
            spider = rt.spider(crawl_id)
        except SpiderNotFound as exc:
            message = spider_missing(rt, crawl_id, exc, len(batch.pages))
            missing = Ending(reason=Reason.SPIDER_NOT_FOUND, message=message)
            ended = {p["ticket"]: ended.get(p["ticket"], missing) for p in batch.pages}
    pages, items = _before_store(rt, crawl_id, spider, batch, ended) if spider else ({}, [])
    if spider is not None:
        items = run_items(rt, crawl_id, spider, items)  # the item processors (crawltasks.stages.itempipes)
    records = [dict(r) for r in batch.records]
    records += [_ended_record(crawl_id, p, ended[p["ticket"]]) for p in batch.pages if p["ticket"] in ended]
    outcomes = [(p["ticket"], "stored" if pages.get(p["ticket"]) is not None else "skipped", p["lease"])
                for p in batch.pages if p["ticket"] not in ended]
    outcomes += [(r["ticket"], r["outcome"], r.pop("lease", "")) for r in records]
    outcomes += [(ticket, "skipped", lease) for ticket, lease in batch.skipped]
    docs = [doc for doc in pages.values() if doc is not None]
    storage.add(PAGES, docs)
    storage.add(ITEMS, items)
    storage.add(FAILURES, records)
    storage.flush()
    if spider is not None:
        _after_store(rt, crawl_id, spider, docs, items)
    if options.visit_ttl:  # recorded before the pages count done: a finished crawl owes nothing more
        state.mark_visited(options.spider, [p["fp"] for p in docs], options.visit_ttl)
        revisit.remember(rt, options, crawl_id, docs)
        revisit.not_modified(rt, options, crawl_id, records)
    _, finished = state.finish(crawl_id, outcomes)
    for r in records:
        if r["outcome"] == "failed":
            logs.request_failed(crawl_id, r["url"], r["reason"], r["status"], r["attempts"], r["message"])
    return finished


def _before_store(rt: Runtime, crawl_id: str, spider: Spider, batch: Parsed,
                  ended: dict[str, Ending]) -> tuple[dict[str, dict[str, Any] | None], list[dict[str, Any]]]:
    """``before_store`` on every document of the requests not ``ended``: (ticket -> page document,
    None if the hook dropped it; the items kept). A hook that raises ends its request ``hook_error``
    (added to ``ended``), every document of that request with it."""
    keys = [p["body_key"] for p in batch.pages if p.get("body_key") and p["ticket"] not in ended]
    html = dict(zip(keys, rt.bodies.load(keys), strict=True))
    pages: dict[str, dict[str, Any] | None] = {}
    for page in batch.pages:
        if page["ticket"] in ended:
            continue
        doc = {k: v for k, v in page.items() if k not in IN_TRANSIT}
        if html.get(page.get("body_key")) is not None:
            doc["html"] = html[page["body_key"]].decode("utf-8", "replace")
        kept = _guarded_before_store(rt, crawl_id, spider, "page", doc, page["ticket"], ended)
        if kept is not None and page.get("discovered"):
            kept["discovered"] = page["discovered"]  # written with the page (crawltasks.storage.recovery)
        pages[page["ticket"]] = kept
    items = [(ticket, _guarded_before_store(rt, crawl_id, spider, "item", dict(item), ticket, ended))
             for item, ticket in zip(batch.items, batch.item_tickets, strict=True) if ticket not in ended]
    return ({t: doc for t, doc in pages.items() if t not in ended},
            [doc for t, doc in items if doc is not None and t not in ended])


def _guarded_before_store(rt: Runtime, crawl_id: str, spider: Spider, kind: str, doc: dict[str, Any],
                          ticket: str, ended: dict[str, Ending]) -> dict[str, Any] | None:
    """``before_store`` on one document; if it raises, the document's request ends ``hook_error``."""
    try:
        return spider.before_store(kind, doc)
    except StopCrawl as exc:
        cancel(rt, crawl_id, str(exc))
        return doc
    except Exception as exc:  # user code: its failure is this request's, not the worker's
        message = hook_failed(rt, crawl_id, f"before_store({kind})", doc.get("url"), exc)
        if ticket:
            ended.setdefault(ticket, Ending(reason=Reason.HOOK_ERROR, message=message))
        return None


def _after_store(rt: Runtime, crawl_id: str, spider: Spider, pages: list[dict[str, Any]],
                 items: list[dict[str, Any]]) -> None:
    """``after_store``, once the documents are written: an exception is logged and counted; what was
    stored stays stored and counts done."""
    try:
        spider.after_store(pages, items)
    except StopCrawl as exc:
        cancel(rt, crawl_id, str(exc))
    except Exception as exc:  # user code, after the fact: nothing to undo
        hook_failed(rt, crawl_id, "after_store", pages[0]["url"] if pages else None, exc)


def _ended_record(crawl_id: str, page: dict[str, Any], ending: Ending) -> dict[str, Any]:
    """The failure record of a parsed page that ends in the store stage."""
    raw = page.get("request") or {"url": page.get("requested_url") or page["url"], "depth": page["depth"],
                                  "fp": page["fp"], "ticket": page["ticket"], "referer": page.get("referer")}
    req = Request.from_dict({**raw, "lease": page["lease"]})
    f = Fetched(request=req, error=ending.reason, message=ending.message, status=page["status"], url=page["url"],
                fetched_at=now_iso())
    return record_doc(crawl_id, f)
