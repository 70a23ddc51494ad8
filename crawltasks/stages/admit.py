"""The admit stage: what of a dispatched batch this worker fetches, and what is decided at once."""

from __future__ import annotations

from ..frontier import revisit
from ..models import Fetched, Request
from ..reasons import Reason
from ..runtime import Runtime
from ..spiders import SpiderNotFound, StopCrawl
from ..states import HELD
from .outcomes import cancel, crawl_is_stopping, hook_failed, lost_message, now_iso, skip, spider_missing


def admit_stage(rt: Runtime, crawl_id: str, batch: list[Request]) -> tuple[list[Request], list[Fetched]]:
    """What of a dispatched batch this worker fetches, and what is decided without fetching.

    Requests whose claim is no longer current (the reclaimer sent them again) are dropped; a paused
    crawl's batch goes back to the frontier; a cancelled crawl's ends skipped; ``before_request``
    may change, skip or fail a request; one lost with its worker too often ends ``worker_lost``."""
    options, state = rt.options(crawl_id), rt.state
    current = [r for r, ok in zip(batch, rt.frontier.claim(crawl_id, [r.lease for r in batch],
                                                          rt.heartbeat.start().id), strict=True) if ok]
    status = state.state_of(crawl_id)
    if status in HELD:
        rt.frontier.give_back(crawl_id, current)
        return [], []
    if crawl_is_stopping(rt, crawl_id, status):
        return [], [skip(r, Reason.CANCELLED, "the crawl was cancelled") for r in current]
    try:
        spider = rt.spider(crawl_id)
    except SpiderNotFound as exc:
        message = spider_missing(rt, crawl_id, exc, len(current))
        now = now_iso()
        return [], [Fetched(request=r, error=Reason.SPIDER_NOT_FOUND, message=message, fetched_at=now) for r in current]
    to_fetch: list[Request] = []
    decided: list[Fetched] = []
    for req in current:
        if req.lost >= options.max_worker_lost:
            decided.append(Fetched(request=req, error=Reason.WORKER_LOST, fetched_at=now_iso(),
                                   message=lost_message(req.lost)))
            continue
        try:
            changed = spider.before_request(req)
        except StopCrawl as exc:
            cancel(rt, crawl_id, str(exc))
            decided.append(skip(req, Reason.CANCELLED, f"stopped by the spider: {exc}"))
            continue
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            message = hook_failed(rt, crawl_id, "before_request", req.url, exc)
            decided.append(Fetched(request=req, error=Reason.HOOK_ERROR, message=message, fetched_at=now_iso()))
            continue
        if changed is None:
            decided.append(skip(req, Reason.SKIPPED_BY_HOOK, "before_request returned None"))
            continue
        for name in ("fp", "ticket", "attempt", "lease", "lost"):  # its identity stays
            setattr(changed, name, getattr(req, name))
        to_fetch.append(changed)
    revisit.add_conditions(rt, options, to_fetch)  # a re-crawl asks for a 304 if the page did not change
    skipped = sum(f.error == Reason.SKIPPED_BY_HOOK for f in decided)
    if skipped:
        state.incr(crawl_id, skipped_by_hook=skipped)
    return to_fetch, decided
