"""The three stages as plain functions over JSON-safe values; the Celery tasks are thin wrappers.

fetch_stage  -> {"crawl_id", "results": [Fetched]}; transient failures come back as retries
parse_stage  -> {"crawl_id", "pages", "items", "failures", "skipped", "body_keys"}; new requests scheduled
store_stage  -> bulk upserts, then the tickets are finished in Redis (and completion may fire)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .fetch import fetch_batch
from .frontier import Sender, backoff, dispatch, schedule
from .models import Fetched, Request
from .parse import is_html
from .runtime import Runtime
from .spiders import Response
from .store import FAILURES, ITEMS, PAGES

log = logging.getLogger("crawltasks")

TEXT_CAP = 200_000  # characters of visible text kept per page when a spider stores text


@dataclass
class FetchOutcome:
    results: list[Fetched] = field(default_factory=list)
    retries: list[tuple[Request, float]] = field(default_factory=list)
    deferred: list[Request] = field(default_factory=list)
    defer_for: float = 0.0


def fetch_stage(rt: Runtime, crawl_id: str, batch: list[Request]) -> FetchOutcome:
    """Fetch a batch; park bodies in Redis; sort outcomes into results, retries and deferrals."""
    options = rt.options(crawl_id)
    state = rt.state
    done = fetch_batch(state, batch, options)
    out = FetchOutcome(deferred=done.deferred, defer_for=done.wait)
    fetched = 0
    for result, body in done.fetched:
        req = result.request
        if result.ok:
            fetched += 1
            if result.fp != req.fp and not state.claim_seen(crawl_id, result.fp):
                result.error, result.message = "duplicate_redirect", f"redirected to {result.url}, already seen"
            elif body is not None:
                result.body_key = state.park_body(crawl_id, req.ticket, body, options.body_ttl)
        elif result.transient and req.attempt < options.max_retries:
            retry = Request.from_dict({**req.to_dict(), "attempt": req.attempt + 1})
            out.retries.append((retry, backoff(req.attempt, options, result.retry_after)))
            continue
        out.results.append(result)
    state.incr(crawl_id, fetched=fetched, retried=len(out.retries), deferred=len(out.deferred))
    return out


def send_later(crawl_id: str, outcome: FetchOutcome, batch_size: int, send: Sender) -> None:
    """Put retries (with their backoff) and deferred requests back on the broker."""
    for req, countdown in outcome.retries:
        log.info("retry %s in %.1fs (attempt %d)", req.url, countdown, req.attempt,
                 extra={"crawl_id": crawl_id, "url": req.url})
        send(crawl_id, req.priority, [req], countdown)
    if outcome.deferred:
        dispatch(crawl_id, outcome.deferred, batch_size, send, countdown=max(0.05, outcome.defer_for))


def failure_doc(crawl_id: str, f: Fetched) -> dict[str, Any]:
    req = f.request
    return {
        "crawl_id": crawl_id, "fp": req.fp, "ticket": req.ticket, "url": req.url, "final_url": f.url,
        "depth": req.depth,
        "reason": f.error, "message": f.message, "status": f.status, "attempts": req.attempt + 1,
        "transient": f.transient, "referer": req.referer, "failed_at": f.fetched_at or _now(),
    }


def parse_stage(rt: Runtime, crawl_id: str, results: list[Fetched], send: Sender) -> dict[str, Any]:
    """Parse HTML pages with the crawl's spider, schedule what it follows, and shape documents."""
    options = rt.options(crawl_id)
    spider = rt.spider(crawl_id)
    out: dict[str, Any] = {"crawl_id": crawl_id, "pages": [], "items": [], "failures": [], "skipped": [],
                           "body_keys": []}
    ok = [f for f in results if f.ok and f.body_key]
    bodies = dict(zip([f.body_key for f in ok], rt.state.load_bodies([f.body_key for f in ok]), strict=True))
    follow: list[Request] = []
    parsed = 0
    for f in results:
        req = f.request
        if f.error == "duplicate_redirect":
            out["skipped"].append(req.ticket)
            continue
        if not f.ok:
            out["failures"].append(failure_doc(crawl_id, f))
            continue
        body = bodies.get(f.body_key) if f.body_key else b""
        if body is None:
            f.error, f.message = "body_expired", "the fetched body expired before it was parsed"
            out["failures"].append(failure_doc(crawl_id, f))
            continue
        out["body_keys"].append(f.body_key)
        page = {
            "crawl_id": crawl_id, "fp": f.fp, "ticket": req.ticket, "url": f.url, "status": f.status,
            "depth": req.depth, "title": None, "content_type": f.content_type, "outlinks": 0,
            "size": f.size, "fetched_at": f.fetched_at, "elapsed": f.elapsed, "referer": req.referer,
        }
        if f.url != req.url:
            page["requested_url"] = req.url
        if is_html(f.content_type, body):
            response = Response(f.url or req.url, f.status or 200, body, req, f.content_type, crawl_id)
            try:
                produced = list(spider.parse(response) or ())
            except Exception as exc:  # user code: its failure is this request's, not the worker's
                log.warning("spider %s failed on %s: %r", options.spider, f.url, exc)
                f.error, f.message = "spider_error", f"{type(exc).__name__}: {exc}"
                out["failures"].append(failure_doc(crawl_id, f))
                continue
            parsed += 1
            page["title"] = response.title
            page["outlinks"] = len(response.links)
            if options.store_text or spider.store_text:
                page["text"] = response.visible_text[:TEXT_CAP]
            for n, thing in enumerate(produced):
                if isinstance(thing, Request):
                    follow.append(thing)
                elif isinstance(thing, dict):
                    out["items"].append(item_doc(crawl_id, f.url or req.url, f.fp or req.fp, n, thing))
        if options.store_html or spider.store_html:
            page["body_key"] = f.body_key
        out["pages"].append(page)
    rt.state.incr(crawl_id, parsed=parsed, items=len(out["items"]))
    if follow:
        schedule(rt.state, crawl_id, follow, options, send)
    return out


def item_doc(crawl_id: str, url: str, page_fp: str, n: int, item: dict[str, Any]) -> dict[str, Any]:
    """An item keyed by its content and source page, so a replay upserts the same document."""
    payload = json.dumps(item, sort_keys=True, default=str)
    fp = hashlib.sha1(f"{page_fp}:{payload}".encode()).hexdigest()
    return {**json.loads(payload), "crawl_id": crawl_id, "url": url, "fp": fp}


def store_stage(rt: Runtime, crawl_id: str, parsed: dict[str, Any]) -> bool:
    """Upsert pages, items and failures; only then count them done. True if the crawl just finished."""
    storage, state = rt.storage, rt.state
    pages = parsed["pages"]
    html_keys = [p["body_key"] for p in pages if p.get("body_key")]
    html = dict(zip(html_keys, state.load_bodies(html_keys), strict=True))
    docs = []
    for page in pages:
        page = dict(page)
        ticket = page.pop("ticket")
        key = page.pop("body_key", None)
        if key and html.get(key) is not None:
            page["html"] = html[key].decode("utf-8", "replace")
        docs.append((ticket, page))
    failures = [dict(fd) for fd in parsed["failures"]]
    failed_tickets = [fd.pop("ticket") for fd in failures]
    storage.add(PAGES, [d for _, d in docs])
    storage.add(ITEMS, parsed["items"])
    storage.add(FAILURES, failures)
    storage.flush()
    outcomes = [(t, "stored") for t, _ in docs]
    outcomes += [(t, "failed") for t in failed_tickets]
    outcomes += [(t, "skipped") for t in parsed["skipped"]]
    _, finished = state.finish(crawl_id, outcomes)
    state.drop_bodies(parsed["body_keys"])
    if finished:
        log.info("crawl %s finished: %s", crawl_id, state.stats(crawl_id), extra={"crawl_id": crawl_id})
    return finished


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
