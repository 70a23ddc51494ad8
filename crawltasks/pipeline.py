"""The three stages as plain functions over JSON-safe values; the Celery tasks are thin wrappers.

fetch_stage  -> results to parse; retries, deferrals (busy hosts) and parked batches (paused crawl)
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import logs
from .frontier import QUEUED_LEASES, Sender, backoff, bloom_of, dispatch, schedule
from .models import Fetched, Request
from .parse import is_html
from .politeness import HostGate, fetch_batch
from .robots import DENY, WAIT, Robots
from .runtime import Runtime
from .sitemaps import looks_like_sitemap, parse_sitemap
from .spiders import Response, Spider, StopCrawl
from .store import FAILURES, ITEMS, PAGES

TEXT_CAP = 200_000  # characters of visible text kept per page when a spider stores text
SILENT_SKIPS = frozenset({"duplicate_redirect", "cancelled"})  # skipped without a record
RECORDED_SKIPS = frozenset({"robots_disallowed", "skipped_by_hook"})  # skipped, with a record


@dataclass
class FetchOutcome:
    results: list[Fetched] = field(default_factory=list)
    retries: list[tuple[Request, float]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # ticket -> why it is retried
    deferred: list[Request] = field(default_factory=list)
    defer_for: float = 0.0


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


def fetch_stage(rt: Runtime, crawl_id: str, batch: list[Request]) -> FetchOutcome:
    """Fetch a batch; park bodies in Redis; sort outcomes into results, retries and deferrals."""
    options, state = rt.options(crawl_id), rt.state
    current = state.state_of(crawl_id)
    if current == "paused":
        if state.park(crawl_id, json.dumps([r.to_dict() for r in batch])):
            return FetchOutcome()
        current = state.state_of(crawl_id)  # it changed meanwhile: resumed or cancelled
    if crawl_is_stopping(rt, crawl_id, current):
        return FetchOutcome(results=[_skip(r, "cancelled", "the crawl was cancelled") for r in batch])
    state.lease(crawl_id, [r.ticket for r in batch], options.lease_time)
    spider = rt.spider(crawl_id)
    out = FetchOutcome()
    robots = Robots(state, options) if options.obey_robots else None
    to_fetch: list[Request] = []
    skips: dict[str, int] = {}
    for req in batch:
        try:
            changed = spider.before_request(req)
        except StopCrawl as exc:
            cancel(rt, crawl_id, str(exc))
            out.results.append(_skip(req, "cancelled", f"stopped by the spider: {exc}"))
            continue
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            out.results.append(Fetched(request=req, error="hook_error", message=f"before_request: {exc!r}",
                                       fetched_at=_now()))
            continue
        if changed is None:
            out.results.append(_skip(req, "skipped_by_hook", "before_request returned None"))
            skips["skipped_by_hook"] = skips.get("skipped_by_hook", 0) + 1
            continue
        changed.fp, changed.ticket, changed.attempt = req.fp, req.ticket, req.attempt  # its identity stays
        verdict = robots.verdict(changed.url) if robots else None
        if verdict == DENY:
            out.results.append(_skip(req, "robots_disallowed", f"robots.txt disallows {changed.url}"))
            skips["skipped_robots"] = skips.get("skipped_robots", 0) + 1
        elif verdict == WAIT:
            out.deferred.append(req)
            out.defer_for = 0.5
        else:
            to_fetch.append(changed)
    done = fetch_batch(HostGate(state, options, robots.crawl_delay if robots else None, crawl_id), to_fetch, options)
    out.deferred += done.deferred
    out.defer_for = max(out.defer_for, done.wait)
    fetched = 0
    to_park: dict[str, bytes] = {}
    for result, body in done.fetched:
        req = result.request
        if result.ok:
            fetched += 1
            if result.fp != req.fp and not state.claim_seen(crawl_id, result.fp, bloom_of(state, crawl_id, options)):
                result.error, result.message = "duplicate_redirect", f"redirected to {result.url}, already seen"
            elif body is not None:
                to_park[req.ticket] = body
        elif result.transient and req.attempt < options.max_retries:
            retry = Request.from_dict({**req.to_dict(), "attempt": req.attempt + 1})
            out.retries.append((retry, backoff(req.attempt, options, result.retry_after)))
            out.reasons[req.ticket] = result.error or ""
            continue
        out.results.append(result)
    keys = state.park_bodies(crawl_id, to_park, options.body_ttl)
    for result in out.results:
        result.body_key = keys.get(result.request.ticket) if result.ok else None
    state.incr(crawl_id, fetched=fetched, retried=len(out.retries), deferred=len(out.deferred), **skips)
    return out


def send_later(rt: Runtime, crawl_id: str, outcome: FetchOutcome, send: Sender) -> None:
    """Put retries (with their backoff) and deferred requests back on the broker, leases renewed."""
    options = rt.options(crawl_id)
    queued = QUEUED_LEASES * options.lease_time
    for req, countdown in outcome.retries:
        rt.state.lease(crawl_id, [req.ticket], countdown + queued, [json.dumps(req.to_dict())])
        logs.request_retry(crawl_id, req.url, outcome.reasons.get(req.ticket), req.attempt, countdown)
        send(crawl_id, req.priority, [req], countdown)
    if outcome.deferred:
        countdown = max(0.05, outcome.defer_for)
        rt.state.lease(crawl_id, [r.ticket for r in outcome.deferred], countdown + queued)
        dispatch(crawl_id, outcome.deferred, options.batch_size, send, countdown=countdown)


def record_doc(crawl_id: str, f: Fetched, outcome: str = "failed") -> dict[str, Any]:
    """The failures-collection document of a request that ended failed (or skipped for a reason)."""
    req = f.request
    return {
        "crawl_id": crawl_id, "fp": req.fp, "ticket": req.ticket, "outcome": outcome, "url": req.url,
        "final_url": f.url, "depth": req.depth, "reason": f.error, "message": f.message, "status": f.status,
        "attempts": req.attempt + 1, "transient": f.transient, "referer": req.referer,
        "meta": req.meta, "failed_at": f.fetched_at or _now(),
    }


def parse_stage(rt: Runtime, crawl_id: str, results: list[Fetched], send: Sender) -> dict[str, Any]:
    """Parse HTML pages with the crawl's spider, schedule what it follows, and shape documents."""
    options = rt.options(crawl_id)
    spider = rt.spider(crawl_id)
    out: dict[str, Any] = {"crawl_id": crawl_id, "pages": [], "items": [], "records": [], "skipped": [],
                           "body_keys": []}
    ok = [f for f in results if f.ok and f.body_key]
    bodies = dict(zip([f.body_key for f in ok], rt.state.load_bodies([f.body_key for f in ok]), strict=True))
    follow: list[Request] = []
    parsed = 0
    for f in results:
        req = f.request
        if f.error in SILENT_SKIPS:
            out["skipped"].append(req.ticket)
            continue
        if not f.ok:
            out["records"].append(record_doc(crawl_id, f, "skipped" if f.error in RECORDED_SKIPS else "failed"))
            continue
        body = bodies.get(f.body_key) if f.body_key else b""
        if body is None and rt.state.outcome_of(crawl_id, req.ticket):
            out["skipped"].append(req.ticket)  # a replay: the first delivery stored it and dropped the body
            continue
        if body is None:
            f.error, f.message = "body_expired", "the fetched body expired before it was parsed"
            out["records"].append(record_doc(crawl_id, f))
            continue
        out["body_keys"].append(f.body_key)
        page = {
            "crawl_id": crawl_id, "fp": f.fp, "ticket": req.ticket, "url": f.url, "status": f.status,
            "depth": req.depth, "title": None, "content_type": f.content_type, "outlinks": 0,
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
        schedule(rt.state, crawl_id, follow, options, send)
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
    html_keys = [p["body_key"] for p in pages if p.get("body_key")]
    html = dict(zip(html_keys, state.load_bodies(html_keys), strict=True))
    outcomes: list[tuple[str, str]] = []
    page_docs: list[dict[str, Any]] = []
    for page in pages:
        page = dict(page)
        ticket = page.pop("ticket")
        key = page.pop("body_key", None)
        if key and html.get(key) is not None:
            page["html"] = html[key].decode("utf-8", "replace")
        kept = spider.before_store("page", page)
        if kept is not None:
            page_docs.append(kept)
        outcomes.append((ticket, "stored" if kept is not None else "skipped"))
    items = [d for d in (spider.before_store("item", dict(i)) for i in parsed["items"]) if d is not None]
    records = [dict(r) for r in parsed["records"]]
    for record in records:
        outcomes.append((record["ticket"], record["outcome"]))
    storage.add(PAGES, page_docs)
    storage.add(ITEMS, items)
    storage.add(FAILURES, records)
    storage.flush()
    spider.after_store(page_docs, items)
    outcomes += [(t, "skipped") for t in parsed["skipped"]]
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
    """Cancel a crawl: queued batches end as skipped when they reach a worker; parked ones at once."""
    changed, parked = rt.state.control(crawl_id, ["running", "paused"], "cancelling")
    if changed:
        logs.event("crawl.cancelled", logging.WARNING, crawl_id=crawl_id, reason=reason or None)
    tickets = [Request.from_dict(r).ticket for batch in parked for r in json.loads(batch)]
    rt.state.finish(crawl_id, [(t, "skipped") for t in tickets])
    return changed


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
