"""The store stage: bulk writes (one document per key), then the tickets are finished in Redis
(and completion may fire). What a batch comes to is decided in ``stages.storedecision``, on no
port; this module reads what the decision needs and carries it out against the ports."""

from __future__ import annotations

from functools import partial
from typing import Any

from .. import logs
from ..frontier import revisit
from ..models import Parsed
from ..monitor import notify
from ..runtime import Runtime
from ..spiders import Spider, SpiderNotFound, StopCrawl
from ..storage.mongo import FAILURES, ITEMS, PAGES
from ..worker.custody import Custody
from .itempipes import chain_for, close_chain
from .outcomes import cancel, hook_failed, log_hook_error, spider_missing
from .storedecision import StoreDecision, bodies_needed, decide_store, needs_spider


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
    """Read what the decision needs (the spider, the bodies), decide, carry it out. True if the
    crawl just finished."""
    options = rt.options(crawl_id)
    lost = {p["lease"]: custody.lost(p["lease"]) for p in batch.pages}
    spider, missing = None, None
    if needs_spider(batch, options, lost):
        try:
            spider = rt.spider(crawl_id)
        except SpiderNotFound as exc:
            missing = spider_missing(rt, crawl_id, exc, len(batch.pages))
    bodies: dict[str, bytes | None] = {}
    chain = None
    if spider is not None:
        keys = bodies_needed(batch, options, lost)
        bodies = dict(zip(keys, rt.bodies.load(keys), strict=True))
        chain = partial(chain_for, rt, crawl_id, spider)  # the item processors (crawltasks.stages.itempipes)
    decision = decide_store(batch, options, spider, lost, bodies, missing=missing, chain=chain)
    return carry_out(rt, crawl_id, spider, decision)


def carry_out(rt: Runtime, crawl_id: str, spider: Spider | None, decision: StoreDecision) -> bool:
    """What the decision says, against the ports: the documents are written before their requests
    count done, and ``after_store`` runs between the two. True if the crawl just finished."""
    storage, state, options = rt.storage, rt.state, rt.options(crawl_id)
    if decision.cancel is not None:
        cancel(rt, crawl_id, decision.cancel)
    for e in decision.hook_errors:
        log_hook_error(crawl_id, e.hook, e.url, e.message)
    if decision.counters:
        state.incr(crawl_id, **decision.counters)
    storage.add(PAGES, decision.pages)
    storage.add(ITEMS, decision.items)
    storage.add(FAILURES, decision.records)
    storage.flush()
    if spider is not None:
        _after_store(rt, crawl_id, spider, decision.pages, decision.items)
    if options.visit_ttl:  # recorded before the pages count done: a finished crawl owes nothing more
        state.mark_visited(options.spider, [p["fp"] for p in decision.pages], options.visit_ttl)
        revisit.remember(rt, options, crawl_id, decision.pages)
        revisit.not_modified(rt, options, crawl_id, decision.records)
    _, finished = state.finish(crawl_id, decision.outcomes)
    for r in decision.failed:
        logs.request_failed(crawl_id, r["url"], r["reason"], r["status"], r["attempts"], r["message"])
    return finished


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
