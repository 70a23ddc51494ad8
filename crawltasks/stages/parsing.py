"""The parse stage: the crawl's spider on fetched pages, follow-ups scheduled, documents shaped."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from .. import logs
from ..frontier import revisit
from ..frontier.schedule import schedule_new
from ..frontier.sitemaps import looks_like_sitemap, parse_sitemap
from ..models import Fetched, Parsed, Request
from ..reasons import RECORDED_SKIPS, SILENT_SKIPS, Reason
from ..runtime import Runtime
from ..settings import CrawlOptions
from ..spiders import Response, Spider, SpiderNotFound, StopCrawl
from ..storage.recovery import attach_discovered
from ..urls import redact
from ..worker.custody import Custody
from . import callbacks
from .html import is_html
from .outcomes import HookFailed, cancel, crawl_is_stopping, hook_failed, lost_message, record_doc, spider_missing

TEXT_CAP = 200_000  # characters of visible text kept per page when a spider stores text


def parse_stage(rt: Runtime, crawl_id: str, results: list[Fetched]) -> Parsed:
    """Parse HTML pages with the crawl's spider, schedule what it follows, and shape documents.

    Only the requests whose claims this delivery holds are parsed; those lost with their worker
    before are parsed one at a time, and one lost ``max_worker_lost`` times ends ``worker_lost``
    (see ``custody``). A cancelled crawl's pages end skipped without running the spider."""
    run = _Parse(rt, crawl_id, results)
    for part in run.custody.parts(f.request.lease for f in results):
        with run.custody.working(part):
            for lease in part:
                for f in run.held.get(lease, ()):
                    run.one(f)
    return run.done()


class _Parse:
    """One parse task: its claims, the bodies, the spider (loaded when a page needs it), the output."""

    def __init__(self, rt: Runtime, crawl_id: str, results: list[Fetched]) -> None:
        self.rt, self.crawl_id, self.options = rt, crawl_id, rt.options(crawl_id)
        self.custody = Custody(rt, crawl_id, [f.request.lease for f in results])
        self.held: dict[str, list[Fetched]] = defaultdict(list)
        for f in results:
            if self.custody.holds(f.request.lease):
                self.held[f.request.lease].append(f)
        self.stopping = crawl_is_stopping(rt, crawl_id, rt.state.state_of(crawl_id))
        keys = [] if self.stopping else [f.body_key for fs in self.held.values() for f in fs if f.ok and f.body_key]
        self.bodies = dict(zip(keys, rt.bodies.load(keys), strict=True))
        self.out = Parsed(crawl_id)
        self.follow: list[Request] = []
        self.origins: dict[int, str] = {}  # id(follow-up) -> ticket of the page or failure that yielded it
        self.parsed = 0
        self._spider: Spider | None = None
        self.missing: str | None = None  # why this worker cannot load the spider

    def spider(self) -> Spider | None:
        """The crawl's spider, loaded once; None when this worker cannot load it."""
        if self._spider is None and self.missing is None:
            try:
                self._spider = self.rt.spider(self.crawl_id)
            except SpiderNotFound as exc:
                self.missing = spider_missing(self.rt, self.crawl_id, exc, sum(map(len, self.held.values())))
        return self._spider

    def one(self, f: Fetched) -> None:
        """One result: skipped, recorded as it failed, or parsed."""
        req, out = f.request, self.out
        if f.ok and f.body_key:
            out.body_keys.append(f.body_key)
        if f.error in SILENT_SKIPS or (f.ok and self.stopping):
            out.skipped.append((req.ticket, req.lease))
        elif not f.ok:
            out.records.append(record_doc(self.crawl_id, f, "skipped" if f.error in RECORDED_SKIPS else "failed"))
            if req.errback and f.error not in RECORDED_SKIPS and f.error != Reason.SPIDER_NOT_FOUND:
                self.failed(f)
        else:
            body = self.bodies.get(f.body_key) if f.body_key else b""
            if body is None and self.rt.state.outcome_of(self.crawl_id, req.ticket):
                out.skipped.append((req.ticket, req.lease))  # a replay: stored by the first delivery
            elif body is None:
                self.fail(f, Reason.BODY_EXPIRED, "the fetched body expired before it was parsed")
            elif self.custody.lost(req.lease) >= self.options.max_worker_lost:
                self.fail(f, Reason.WORKER_LOST, lost_message(self.custody.lost(req.lease)))
            elif (spider := self.spider()) is None:
                self.fail(f, Reason.SPIDER_NOT_FOUND, self.missing or "")
            else:
                self.page(f, body, spider)

    def failed(self, f: Fetched) -> None:
        """The errback of a request that ended failed: what it yields is kept, the request stays failed."""
        failure = callbacks.Failure(f.request, f.error or "", f.status, f.message, f.url)
        try:
            follow, items = callbacks.errback(self.spider(), failure, self.crawl_id)
        except StopCrawl as exc:
            cancel(self.rt, self.crawl_id, str(exc))
            return
        self.follows(f.request.ticket, follow)
        self.add_items(f, f.url or f.request.url, items)

    def follows(self, ticket: str, requests: list[Request]) -> None:
        """Follow-ups of the request ``ticket``: what is new among them is kept with its document."""
        self.follow += requests
        for req in requests:
            self.origins[id(req)] = ticket

    def add_items(self, f: Fetched, url: str, items: list[dict[str, Any]]) -> None:
        """Items a callback yielded for this request's page (or failure), as documents."""
        req = f.request
        docs = [item_doc(self.crawl_id, url, f.fp or req.fp, {**req.meta, **i} if self.options.item_meta else i)
                for i in items]
        self.out.items += docs
        self.out.item_tickets += [req.ticket] * len(docs)  # whose they are, should a hook fail one

    def fail(self, f: Fetched, reason: str, message: str, outcome: str = "failed") -> None:
        """The request ends here, recorded with its reason (the Fetched it came as is left as it was)."""
        self.out.records.append(record_doc(self.crawl_id, replace(f, error=reason, message=message), outcome))

    def page(self, f: Fetched, body: bytes, spider: Spider) -> None:
        """Parse one fetched page with the spider; its exceptions end this request only."""
        req = f.request
        page = {
            "crawl_id": self.crawl_id, "fp": f.fp, "ticket": req.ticket, "lease": req.lease, "url": redact(f.url),
            "status": f.status, "depth": req.depth, "title": None, "content_type": f.content_type, "outlinks": 0,
            "size": f.size, "fetched_at": f.fetched_at, "elapsed": f.elapsed, "referer": redact(req.referer),
        }
        if f.url != req.url:
            page["requested_url"] = redact(req.url)
        if f.fp != req.fp:  # a redirect: its request is done too (crawltasks.storage.recovery)
            page["request_fp"] = req.fp
        # for the store stage, should the page end there (a record only: no password needs to travel)
        page["request"] = {**req.to_dict(), "url": redact(req.url), "referer": redact(req.referer),
                           "body": None, "headers": {}, "cookies": {}}
        page.update(revisit.page_fields(f, body))
        try:
            made = parse_page(self.options, self.crawl_id, spider, f, body)
        except StopCrawl as exc:
            cancel(self.rt, self.crawl_id, str(exc))
            made = PageMade()
        except HookFailed as exc:
            return self.fail(f, Reason.HOOK_ERROR, hook_failed(self.rt, self.crawl_id, exc.hook, f.url, exc.error))
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            logs.event("spider.error", logging.WARNING, crawl_id=self.crawl_id, url=f.url,
                       spider=self.options.spider, message=f"{type(exc).__name__}: {exc}")
            return self.fail(f, Reason.SPIDER_ERROR, f"{type(exc).__name__}: {exc}")
        if not made.kept:
            return self.fail(f, Reason.SKIPPED_BY_HOOK, "after_response returned None", "skipped")
        page.update(made.fields)
        self.parsed += made.parsed
        self.follows(req.ticket, made.follow)
        self.add_items(f, f.url or req.url, made.items)
        if self.options.store_html or spider.store_html:
            page["body_key"] = f.body_key
        self.out.pages.append(page)

    def done(self) -> Parsed:
        """Count, schedule what the pages follow, and hand the output on to the store stage."""
        self.rt.state.incr(self.crawl_id, parsed=self.parsed, items=len(self.out.items))
        if self.follow:
            fresh = schedule_new(self.rt.state, self.rt.frontier, self.crawl_id, self.follow, self.options,
                                 self.rt.caches.known)
            attach_discovered(self.out, self.origins, fresh)
        return self.out



@dataclass
class PageMade:
    """What the spider made of one page, decided before anything is scheduled or stored: fields for
    the page's document, the requests it follows, its items; ``kept`` False when a hook skipped it."""

    kept: bool = True
    fields: dict[str, Any] = field(default_factory=dict)
    follow: list[Request] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    parsed: int = 0  # 1 when the spider's callback ran on it


def parse_page(options: CrawlOptions, crawl_id: str, spider: Spider, f: Fetched, body: bytes) -> PageMade:
    """What the spider makes of one fetched page; its arguments are left as they are. HTML goes to
    the request's callback (else ``parse``); other types only when the spider asks
    (``callbacks.wants``); a sitemap's locations are followed."""
    req = f.request
    url = f.url or req.url
    if looks_like_sitemap(url, f.content_type, body) and not req.callback:
        kind, locs = parse_sitemap(body)
        follow = [Request(url=loc, depth=req.depth, priority=req.priority, referer=url) for loc in locs]
        return PageMade(fields={"sitemap": kind, "outlinks": len(locs)}, follow=follow)
    if not callbacks.wants(spider, req, f.content_type, body):
        return PageMade()
    try:
        response = spider.after_response(Response(url, f.status or 200, body, req, f.content_type, crawl_id,
                                                  f.headers))
    except StopCrawl:
        raise
    except Exception as exc:  # a hook's failure, told apart from parse's
        raise HookFailed("after_response", exc) from exc
    if response is None:
        return PageMade(kept=False)
    follow, items = callbacks.resolve(callbacks.call(spider, response), req, url)
    fields: dict[str, Any] = {}
    if is_html(f.content_type, body):
        fields["title"], fields["outlinks"] = response.title, len(response.links)
        if options.store_text or spider.store_text:
            fields["text"] = response.visible_text[:TEXT_CAP]
    return PageMade(fields=fields, follow=follow, items=items, parsed=1)


def item_doc(crawl_id: str, url: str, page_fp: str, item: dict[str, Any]) -> dict[str, Any]:
    """An item keyed by its content and source page, so a replay upserts the same document."""
    payload = json.dumps(item, sort_keys=True, default=str)
    fp = hashlib.sha1(f"{page_fp}:{payload}".encode()).hexdigest()
    return {**json.loads(payload), "crawl_id": crawl_id, "url": redact(url), "fp": fp}
