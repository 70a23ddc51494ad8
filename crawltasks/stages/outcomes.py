"""What every stage shares: how a request ends without a page (a skip, a failure record), hook
and spider failures, and whether the crawl is stopping."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .. import logs
from ..errors import SpiderError
from ..models import Fetched, Request
from ..runtime import Runtime
from ..spiders import SpiderNotFound
from ..states import HELD, STOPPING, CrawlState
from ..urls import redact

IN_TRANSIT = ("ticket", "lease", "body_key", "request", "discovered")  # page fields for the store stage
# (what the page discovered is stored, but added after before_store: crawltasks.storage.recovery)


def skip(req: Request, reason: str, message: str) -> Fetched:
    """A request that ends skipped, for a reason, without being fetched or parsed."""
    return Fetched(request=req, error=reason, message=message, fetched_at=now_iso())


class HookFailed(SpiderError):
    """A spider hook raised (its request ends ``hook_error``; ``parse`` itself: ``spider_error``)."""

    def __init__(self, hook: str, error: Exception) -> None:
        super().__init__(f"{hook}: {error!r}")
        self.hook, self.error = hook, error


class Ending(NamedTuple):
    """Why a parsed page ends in the store stage without being stored."""

    reason: str
    message: str


def hook_failed(rt: Runtime, crawl_id: str, hook: str, url: str | None, exc: Exception) -> str:
    """Log and count (``hook_errors``) a hook's exception; returns the message its record carries."""
    message = hook_message(hook, exc)
    log_hook_error(crawl_id, hook, url, message)
    rt.state.incr(crawl_id, hook_errors=1)
    return message


def hook_message(hook: str, exc: Exception) -> str:
    """What the record of a request whose hook raised says (a stage that decides first keeps it)."""
    return f"{hook}: {type(exc).__name__}: {exc}"


def log_hook_error(crawl_id: str, hook: str, url: str | None, message: str) -> None:
    """The log line of a hook's exception; the caller counts it (``hook_errors``)."""
    logs.event("hook.error", logging.WARNING, crawl_id=crawl_id, url=url, hook=hook, message=message)


def spider_missing(rt: Runtime, crawl_id: str, exc: SpiderNotFound, requests: int) -> str:
    """Log that this worker cannot load the crawl's spider; its requests fail ``spider_not_found``
    at once (deploy the module to every worker, then ``retry-failed``) rather than loop."""
    logs.event("spider.not_found", logging.ERROR, crawl_id=crawl_id, spider=rt.options(crawl_id).spider,
               requests=requests, message=str(exc))
    return str(exc)


def crawl_is_stopping(rt: Runtime, crawl_id: str, state: str) -> bool:
    """True when the crawl (in ``state``) is cancelled, or just ran past max_run_time (then it is cancelled)."""
    if state in STOPPING:
        return True
    limit = rt.options(crawl_id).max_run_time
    if limit and state in (CrawlState.RUNNING, CrawlState.PAUSED):
        started = float(rt.state.crawl_meta(crawl_id).get("started_at", time.time()))
        if time.time() - started > limit:
            cancel(rt, crawl_id, f"ran past max_run_time ({limit}s)")
            return True
    return False


def record_doc(crawl_id: str, f: Fetched, outcome: str = "failed") -> dict[str, Any]:
    """The failures-collection document of a request that ended failed (or skipped for a reason).
    URLs and the message are redacted (no password leaves the request: see ``urls.redact``)."""
    req = f.request
    return {
        "crawl_id": crawl_id, "fp": req.fp, "ticket": req.ticket, "outcome": outcome, "url": redact(req.url),
        "final_url": redact(f.url), "depth": req.depth, "reason": f.error, "message": redact(f.message),
        "status": f.status, "attempts": req.attempt + 1, "transient": f.transient, "referer": redact(req.referer),
        "meta": req.meta, "failed_at": f.fetched_at or now_iso(), "lease": req.lease,
    }


def cancel(rt: Runtime, crawl_id: str, reason: str = "") -> bool:
    """Cancel a crawl: what waits in the frontier ends skipped now, what is in flight when it reaches
    its next stage; the crawl then finishes, cancelled."""
    changed = rt.state.control(crawl_id, [CrawlState.RUNNING, *HELD], CrawlState.CANCELLING)
    if changed:
        logs.event("crawl.cancelled", logging.WARNING, crawl_id=crawl_id, reason=reason or None)
    rt.frontier.drop_queued(crawl_id)
    rt.state.check_finished(crawl_id)
    return changed


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")

def lost_message(lost: int) -> str:
    """The message of a ``worker_lost`` record."""
    return f"its worker died {lost} times while it was being processed"
