"""The three stages as plain functions over JSON-safe values; the Celery tasks are thin wrappers.

admit_stage  -> requests for this process's fetch engine (crawltasks.engine), and those decided at once
parse_stage  -> {"crawl_id", "pages", "items", "records", "skipped", "body_keys"}; follow-ups scheduled
store_stage  -> bulk writes (one document per key), then the tickets are finished in Redis (and completion may fire)

A request ends in exactly one outcome: stored, failed or skipped. Failures and the skips worth
explaining (robots, hooks) are recorded in the failures collection with their reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from . import logs
from .frontier import schedule
from .models import Fetched, Request
from .parse import is_html
from .runtime import Runtime
from .sitemaps import looks_like_sitemap, parse_sitemap
from .spiders import Response, Spider, StopCrawl
from .store import FAILURES, ITEMS, PAGES

TEXT_CAP = 200_000  # characters of visible text kept per page when a spider stores text
SILENT_SKIPS = frozenset({"duplicate_redirect", "cancelled"})  # skipped without a record
RECORDED_SKIPS = frozenset({"robots_disallowed", "skipped_by_hook"})  # skipped, with a record


def _skip(req: Request, reason: str, message: str) -> Fetched:
    return Fetched(request=req, error=reason, message=message, fetched_at=_now())


def crawl_is_stopping(rt: Runtime, crawl_id: str, state: str) -> bool:
    """True when the crawl (in ``state``) is cancelled, or just ran past max_run_time (then it is cancelled)."""
    if state in ("cancelling", "cancelled"):
        return True
    limit = rt.options(crawl_id).max_run_time
    if limit and state in ("running", "paused"):
        started = float(rt.state.crawl_meta(crawl_id).get("started_at", time.time()))
        if time.time() - started > limit:
            cancel(rt, crawl_id, f"ran past max_run_time ({limit}s)")
            return True
    return False


def admit_stage(rt: Runtime, crawl_id: str, batch: list[Request]) -> tuple[list[Request], list[Fetched]]:
    """What of a dispatched batch this worker fetches, and what is decided without fetching.

    Requests whose claim is no longer current (the reclaimer sent them again) are dropped; a paused
    crawl's batch goes back to the frontier; a cancelled crawl's ends skipped; ``before_request``
    may change, skip or fail a request; one lost with its worker too often ends ``worker_lost``."""
    options, state = rt.options(crawl_id), rt.state
    current = [r for r, ok in zip(batch, rt.frontier.claim(crawl_id, [r.lease for r in batch],
                                                          rt.heartbeat.start().id), strict=True) if ok]
    status = state.state_of(crawl_id)
    if status == "paused":
        rt.frontier.give_back(crawl_id, current)
        return [], []
    if crawl_is_stopping(rt, crawl_id, status):
        return [], [_skip(r, "cancelled", "the crawl was cancelled") for r in current]
    spider = rt.spider(crawl_id)
    to_fetch: list[Request] = []
    decided: list[Fetched] = []
    for req in current:
        if req.lost >= options.max_worker_lost:
            decided.append(Fetched(request=req, error="worker_lost", fetched_at=_now(),
                                   message=f"its worker died {req.lost} times while it was being processed"))
            continue
        try:
            changed = spider.before_request(req)
        except StopCrawl as exc:
            cancel(rt, crawl_id, str(exc))
            decided.append(_skip(req, "cancelled", f"stopped by the spider: {exc}"))
            continue
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            decided.append(Fetched(request=req, error="hook_error", message=f"before_request: {exc!r}",
                                   fetched_at=_now()))
            continue
        if changed is None:
            decided.append(_skip(req, "skipped_by_hook", "before_request returned None"))
            continue
        for name in ("fp", "ticket", "attempt", "lease", "lost"):  # its identity stays
            setattr(changed, name, getattr(req, name))
        to_fetch.append(changed)
    skipped = sum(f.error == "skipped_by_hook" for f in decided)
    if skipped:
        state.incr(crawl_id, skipped_by_hook=skipped)
    return to_fetch, decided


def record_doc(crawl_id: str, f: Fetched, outcome: str = "failed") -> dict[str, Any]:
    """The failures-collection document of a request that ended failed (or skipped for a reason)."""
    req = f.request
    return {
        "crawl_id": crawl_id, "fp": req.fp, "ticket": req.ticket, "outcome": outcome, "url": req.url,
        "final_url": f.url, "depth": req.depth, "reason": f.error, "message": f.message, "status": f.status,
        "attempts": req.attempt + 1, "transient": f.transient, "referer": req.referer,
        "meta": req.meta, "failed_at": f.fetched_at or _now(), "lease": req.lease,
    }


def parse_stage(rt: Runtime, crawl_id: str, results: list[Fetched]) -> dict[str, Any]:
    """Parse HTML pages with the crawl's spider, schedule what it follows, and shape documents."""
    options = rt.options(crawl_id)
    spider = rt.spider(crawl_id)
    rt.frontier.claim(crawl_id, [f.request.lease for f in results], rt.heartbeat.start().id)  # ours now
    out: dict[str, Any] = {"crawl_id": crawl_id, "pages": [], "items": [], "records": [], "skipped": [],
                           "body_keys": []}
    ok = [f for f in results if f.ok and f.body_key]
    bodies = dict(zip([f.body_key for f in ok], rt.state.load_bodies([f.body_key for f in ok]), strict=True))
    follow: list[Request] = []
    parsed = 0
    for f in results:
        req = f.request
        if f.error in SILENT_SKIPS:
            out["skipped"].append([req.ticket, req.lease])
            continue
        if not f.ok:
            out["records"].append(record_doc(crawl_id, f, "skipped" if f.error in RECORDED_SKIPS else "failed"))
            continue
        body = bodies.get(f.body_key) if f.body_key else b""
        if body is None and rt.state.outcome_of(crawl_id, req.ticket):
            out["skipped"].append([req.ticket, req.lease])  # a replay: stored by the first delivery
            continue
        if body is None:
            f.error, f.message = "body_expired", "the fetched body expired before it was parsed"
            out["records"].append(record_doc(crawl_id, f))
            continue
        out["body_keys"].append(f.body_key)
        page = {
            "crawl_id": crawl_id, "fp": f.fp, "ticket": req.ticket, "lease": req.lease, "url": f.url,
            "status": f.status, "depth": req.depth, "title": None, "content_type": f.content_type, "outlinks": 0,
            "size": f.size, "fetched_at": f.fetched_at, "elapsed": f.elapsed, "referer": req.referer,
        }
        if f.url != req.url:
            page["requested_url"] = req.url
        try:
            kept = parse_page(rt, crawl_id, spider, f, body, page, out, follow)
        except StopCrawl as exc:
            cancel(rt, crawl_id, str(exc))
            kept = True
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            logs.event("spider.error", logging.WARNING, crawl_id=crawl_id, url=f.url, spider=options.spider,
                       message=f"{type(exc).__name__}: {exc}")
            f.error, f.message = "spider_error", f"{type(exc).__name__}: {exc}"
            out["records"].append(record_doc(crawl_id, f))
            continue
        if not kept:
            f.error, f.message = "skipped_by_hook", "after_response returned None"
            out["records"].append(record_doc(crawl_id, f, "skipped"))
            continue
        parsed += page.pop("_parsed", 0)
        if options.store_html or spider.store_html:
            page["body_key"] = f.body_key
        out["pages"].append(page)
    rt.state.incr(crawl_id, parsed=parsed, items=len(out["items"]))
    if follow:
        schedule(rt.state, rt.frontier, crawl_id, follow, options)
    return out


def parse_page(rt: Runtime, crawl_id: str, spider: Spider, f: Fetched, body: bytes, page: dict[str, Any],
               out: dict[str, Any], follow: list[Request]) -> bool:
    """Fill a page document, collect items and follow-ups. False if a hook skipped the page."""
    options, req = rt.options(crawl_id), f.request
    url = f.url or req.url
    if looks_like_sitemap(url, f.content_type, body):
        kind, locs = parse_sitemap(body)
        follow.extend(Request(url=loc, depth=req.depth, priority=req.priority, referer=url) for loc in locs)
        page["sitemap"], page["outlinks"] = kind, len(locs)
        return True
    if not is_html(f.content_type, body):
        return True
    response = spider.after_response(Response(url, f.status or 200, body, req, f.content_type, crawl_id))
    if response is None:
        return False
    produced = list(spider.parse(response) or ())
    page["_parsed"] = 1
    page["title"] = response.title
    page["outlinks"] = len(response.links)
    if options.store_text or spider.store_text:
        page["text"] = response.visible_text[:TEXT_CAP]
    for thing in produced:
        if isinstance(thing, Request):
            follow.append(thing)
        elif isinstance(thing, dict):
            item = {**req.meta, **thing} if options.item_meta else thing
            out["items"].append(item_doc(crawl_id, url, f.fp or req.fp, item))
    return True


def item_doc(crawl_id: str, url: str, page_fp: str, item: dict[str, Any]) -> dict[str, Any]:
    """An item keyed by its content and source page, so a replay upserts the same document."""
    payload = json.dumps(item, sort_keys=True, default=str)
    fp = hashlib.sha1(f"{page_fp}:{payload}".encode()).hexdigest()
    return {**json.loads(payload), "crawl_id": crawl_id, "url": url, "fp": fp}


def store_stage(rt: Runtime, crawl_id: str, parsed: dict[str, Any]) -> bool:
    """Upsert pages, items and records; only then count them done. True if the crawl just finished."""
    storage, state, spider = rt.storage, rt.state, rt.spider(crawl_id)
    pages = parsed["pages"]
    leases = [p["lease"] for p in pages] + [r["lease"] for r in parsed["records"]]
    rt.frontier.claim(crawl_id, leases + [lease for _, lease in parsed["skipped"]], rt.heartbeat.start().id)
    html_keys = [p["body_key"] for p in pages if p.get("body_key")]
    html = dict(zip(html_keys, state.load_bodies(html_keys), strict=True))
    outcomes: list[tuple[str, str, str]] = []
    page_docs: list[dict[str, Any]] = []
    for page in pages:
        page = dict(page)
        ticket, lease = page.pop("ticket"), page.pop("lease")
        key = page.pop("body_key", None)
        if key and html.get(key) is not None:
            page["html"] = html[key].decode("utf-8", "replace")
        kept = spider.before_store("page", page)
        if kept is not None:
            page_docs.append(kept)
        outcomes.append((ticket, "stored" if kept is not None else "skipped", lease))
    items = [d for d in (spider.before_store("item", dict(i)) for i in parsed["items"]) if d is not None]
    records = [dict(r) for r in parsed["records"]]
    for record in records:
        outcomes.append((record["ticket"], record["outcome"], record.pop("lease", "")))
    storage.add(PAGES, page_docs)
    storage.add(ITEMS, items)
    storage.add(FAILURES, records)
    storage.flush()
    spider.after_store(page_docs, items)
    outcomes += [(ticket, "skipped", lease) for ticket, lease in parsed["skipped"]]
    options = rt.options(crawl_id)
    if options.visit_ttl:  # recorded before the pages count done: a finished crawl owes nothing more
        state.mark_visited(options.spider, [p["fp"] for p in page_docs])
    _, finished = state.finish(crawl_id, outcomes)
    state.drop_bodies(parsed["body_keys"])
    for r in records:
        if r["outcome"] == "failed":
            logs.request_failed(crawl_id, r["url"], r["reason"], r["status"], r["attempts"], r["message"])
    if finished:
        logs.crawl_finished(crawl_id, {**state.stats(crawl_id), "state": state.state_of(crawl_id)})
    return finished


def cancel(rt: Runtime, crawl_id: str, reason: str = "") -> bool:
    """Cancel a crawl: what waits in the frontier ends skipped now, what is in flight when it reaches
    its next stage; the crawl then finishes, cancelled."""
    changed = rt.state.control(crawl_id, ["running", "paused"], "cancelling")
    if changed:
        logs.event("crawl.cancelled", logging.WARNING, crawl_id=crawl_id, reason=reason or None)
    rt.frontier.drop_queued(crawl_id)
    rt.state.check_finished(crawl_id)
    return changed


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
