"""The three stages as plain functions over JSON-safe values; the Celery tasks are thin wrappers.

admit_stage  -> requests for this process's fetch engine (crawltasks.engine), and those decided at once
parse_stage  -> {"crawl_id", "pages", "items", "item_tickets", "records", "skipped", "body_keys"}; follow-ups scheduled
store_stage  -> bulk writes (one document per key), then the tickets are finished in Redis (and completion may fire)

A request ends in exactly one outcome: stored, failed or skipped. Failures and the skips worth
explaining (robots, hooks) are recorded in the failures collection with their reason (``reasons``).
Whatever the spider's code does, it costs only the request it was given: its exceptions end that
request (``spider_error``, ``hook_error``), a spider the worker cannot load fails the crawl's requests
(``spider_not_found``), and a page that kills its worker process ends ``worker_lost`` (``custody``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, NamedTuple

from . import callbacks, logs, notify, revisit
from .custody import Custody
from .frontier import schedule
from .itempipes import close_chain, run_items
from .models import Fetched, Request
from .parse import is_html
from .reasons import RECORDED_SKIPS, SILENT_SKIPS
from .redisstate import Keys
from .runtime import Runtime
from .sitemaps import looks_like_sitemap, parse_sitemap
from .spiders import Response, Spider, SpiderNotFound, StopCrawl
from .store import FAILURES, ITEMS, PAGES
from .urls import redact

TEXT_CAP = 200_000  # characters of visible text kept per page when a spider stores text
IN_TRANSIT = ("ticket", "lease", "body_key", "request")  # page fields for the store stage, never stored


def _skip(req: Request, reason: str, message: str) -> Fetched:
    return Fetched(request=req, error=reason, message=message, fetched_at=_now())


class HookFailed(Exception):
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
    message = f"{hook}: {type(exc).__name__}: {exc}"
    logs.event("hook.error", logging.WARNING, crawl_id=crawl_id, url=url, hook=hook, message=message)
    rt.state.incr(crawl_id, hook_errors=1)
    return message


def spider_missing(rt: Runtime, crawl_id: str, exc: SpiderNotFound, requests: int) -> str:
    """Log that this worker cannot load the crawl's spider; its requests fail ``spider_not_found``
    at once (deploy the module to every worker, then ``retry-failed``) rather than loop."""
    logs.event("spider.not_found", logging.ERROR, crawl_id=crawl_id, spider=rt.options(crawl_id).spider,
               requests=requests, message=str(exc))
    return str(exc)


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
    if status in ("paused", "interrupted"):
        rt.frontier.give_back(crawl_id, current)
        return [], []
    if crawl_is_stopping(rt, crawl_id, status):
        return [], [_skip(r, "cancelled", "the crawl was cancelled") for r in current]
    try:
        spider = rt.spider(crawl_id)
    except SpiderNotFound as exc:
        message = spider_missing(rt, crawl_id, exc, len(current))
        return [], [Fetched(request=r, error="spider_not_found", message=message, fetched_at=_now()) for r in current]
    to_fetch: list[Request] = []
    decided: list[Fetched] = []
    for req in current:
        if req.lost >= options.max_worker_lost:
            decided.append(Fetched(request=req, error="worker_lost", fetched_at=_now(),
                                   message=lost_message(req.lost)))
            continue
        try:
            changed = spider.before_request(req)
        except StopCrawl as exc:
            cancel(rt, crawl_id, str(exc))
            decided.append(_skip(req, "cancelled", f"stopped by the spider: {exc}"))
            continue
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            message = hook_failed(rt, crawl_id, "before_request", req.url, exc)
            decided.append(Fetched(request=req, error="hook_error", message=message, fetched_at=_now()))
            continue
        if changed is None:
            decided.append(_skip(req, "skipped_by_hook", "before_request returned None"))
            continue
        for name in ("fp", "ticket", "attempt", "lease", "lost"):  # its identity stays
            setattr(changed, name, getattr(req, name))
        to_fetch.append(changed)
    revisit.add_conditions(rt, options, to_fetch)  # a re-crawl asks for a 304 if the page did not change
    skipped = sum(f.error == "skipped_by_hook" for f in decided)
    if skipped:
        state.incr(crawl_id, skipped_by_hook=skipped)
    return to_fetch, decided


def record_doc(crawl_id: str, f: Fetched, outcome: str = "failed") -> dict[str, Any]:
    """The failures-collection document of a request that ended failed (or skipped for a reason).
    URLs and the message are redacted (no password leaves the request: see ``urls.redact``)."""
    req = f.request
    return {
        "crawl_id": crawl_id, "fp": req.fp, "ticket": req.ticket, "outcome": outcome, "url": redact(req.url),
        "final_url": redact(f.url), "depth": req.depth, "reason": f.error, "message": redact(f.message),
        "status": f.status, "attempts": req.attempt + 1, "transient": f.transient, "referer": redact(req.referer),
        "meta": req.meta, "failed_at": f.fetched_at or _now(), "lease": req.lease,
    }


def parse_stage(rt: Runtime, crawl_id: str, results: list[Fetched]) -> dict[str, Any]:
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
        self.bodies = dict(zip(keys, rt.state.load_bodies(keys), strict=True))
        self.out: dict[str, Any] = {"crawl_id": crawl_id, "pages": [], "items": [], "item_tickets": [],
                                    "records": [], "skipped": [], "body_keys": []}
        self.follow: list[Request] = []
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
            out["body_keys"].append(f.body_key)
        if f.error in SILENT_SKIPS or (f.ok and self.stopping):
            out["skipped"].append([req.ticket, req.lease])
        elif not f.ok:
            out["records"].append(record_doc(self.crawl_id, f, "skipped" if f.error in RECORDED_SKIPS else "failed"))
            if req.errback and f.error not in RECORDED_SKIPS and f.error != "spider_not_found":
                self.failed(f)
        else:
            body = self.bodies.get(f.body_key) if f.body_key else b""
            if body is None and self.rt.state.outcome_of(self.crawl_id, req.ticket):
                out["skipped"].append([req.ticket, req.lease])  # a replay: stored by the first delivery
            elif body is None:
                self.fail(f, "body_expired", "the fetched body expired before it was parsed")
            elif self.custody.lost(req.lease) >= self.options.max_worker_lost:
                self.fail(f, "worker_lost", lost_message(self.custody.lost(req.lease)))
            elif (spider := self.spider()) is None:
                self.fail(f, "spider_not_found", self.missing or "")
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
        self.follow += follow
        self.add_items(f, f.url or f.request.url, items)

    def add_items(self, f: Fetched, url: str, items: list[dict[str, Any]]) -> None:
        """Items a callback yielded for this request's page (or failure), as documents."""
        req = f.request
        docs = [item_doc(self.crawl_id, url, f.fp or req.fp, {**req.meta, **i} if self.options.item_meta else i)
                for i in items]
        self.out["items"] += docs
        self.out["item_tickets"] += [req.ticket] * len(docs)  # whose they are, should a hook fail one

    def fail(self, f: Fetched, reason: str, message: str, outcome: str = "failed") -> None:
        """The request ends here, recorded with its reason."""
        f.error, f.message = reason, message
        self.out["records"].append(record_doc(self.crawl_id, f, outcome))

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
        # for the store stage, should the page end there (a record only: no password needs to travel)
        page["request"] = {**req.to_dict(), "url": redact(req.url), "referer": redact(req.referer),
                           "body": None, "headers": {}, "cookies": {}}
        page.update(revisit.page_fields(f, body))
        try:
            kept = parse_page(self.rt, self.crawl_id, spider, f, body, page, self)
        except StopCrawl as exc:
            cancel(self.rt, self.crawl_id, str(exc))
            kept = True
        except HookFailed as exc:
            return self.fail(f, "hook_error", hook_failed(self.rt, self.crawl_id, exc.hook, f.url, exc.error))
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            logs.event("spider.error", logging.WARNING, crawl_id=self.crawl_id, url=f.url,
                       spider=self.options.spider, message=f"{type(exc).__name__}: {exc}")
            return self.fail(f, "spider_error", f"{type(exc).__name__}: {exc}")
        if not kept:
            return self.fail(f, "skipped_by_hook", "after_response returned None", "skipped")
        self.parsed += page.pop("_parsed", 0)
        if self.options.store_html or spider.store_html:
            page["body_key"] = f.body_key
        self.out["pages"].append(page)

    def done(self) -> dict[str, Any]:
        """Count, schedule what the pages follow, and hand the output on to the store stage."""
        self.rt.state.incr(self.crawl_id, parsed=self.parsed, items=len(self.out["items"]))
        if self.follow:
            schedule(self.rt.state, self.rt.frontier, self.crawl_id, self.follow, self.options)
        return self.out


def lost_message(lost: int) -> str:
    """The message of a ``worker_lost`` record."""
    return f"its worker died {lost} times while it was being processed"


def parse_page(rt: Runtime, crawl_id: str, spider: Spider, f: Fetched, body: bytes, page: dict[str, Any],
               run: _Parse) -> bool:
    """Fill a page document, collect items and follow-ups. False if a hook skipped the page.
    HTML goes to the request's callback (else ``parse``); other types only when the spider asks
    (``callbacks.wants``)."""
    options, req = rt.options(crawl_id), f.request
    url = f.url or req.url
    if looks_like_sitemap(url, f.content_type, body) and not req.callback:
        kind, locs = parse_sitemap(body)
        run.follow.extend(Request(url=loc, depth=req.depth, priority=req.priority, referer=url) for loc in locs)
        page["sitemap"], page["outlinks"] = kind, len(locs)
        return True
    if not callbacks.wants(spider, req, f.content_type, body):
        return True
    try:
        response = spider.after_response(Response(url, f.status or 200, body, req, f.content_type, crawl_id,
                                                  f.headers))
    except StopCrawl:
        raise
    except Exception as exc:  # a hook's failure, told apart from parse's
        raise HookFailed("after_response", exc) from exc
    if response is None:
        return False
    follow, items = callbacks.resolve(callbacks.call(spider, response), req, url)
    page["_parsed"] = 1
    if is_html(f.content_type, body):
        page["title"] = response.title
        page["outlinks"] = len(response.links)
        if options.store_text or spider.store_text:
            page["text"] = response.visible_text[:TEXT_CAP]
    run.follow += follow
    run.add_items(f, url, items)
    return True


def item_doc(crawl_id: str, url: str, page_fp: str, item: dict[str, Any]) -> dict[str, Any]:
    """An item keyed by its content and source page, so a replay upserts the same document."""
    payload = json.dumps(item, sort_keys=True, default=str)
    fp = hashlib.sha1(f"{page_fp}:{payload}".encode()).hexdigest()
    return {**json.loads(payload), "crawl_id": crawl_id, "url": redact(url), "fp": fp}


def store_stage(rt: Runtime, crawl_id: str, parsed: dict[str, Any]) -> bool:
    """Upsert pages, items and records; only then count them done. True if the crawl just finished.

    Only the requests whose claims this delivery holds are stored, those lost with their worker
    before one at a time (``custody``). A ``before_store`` that raises fails its request
    (``hook_error``) and the rest is stored; ``after_store`` runs after the write, so its exception
    is logged and counted (``hook_errors``) but never undoes what was stored."""
    leases = [p["lease"] for p in parsed["pages"]] + [r["lease"] for r in parsed["records"]]
    leases += [lease for _, lease in parsed["skipped"]]
    custody = Custody(rt, crawl_id, leases)
    finished, tickets = False, []
    for n, part in enumerate(custody.parts(leases)):
        batch = _part(parsed, set(part), first=n == 0)
        with custody.working(part, cool=False):  # finished requests have no claim left to cool
            finished = _store_part(rt, crawl_id, batch, custody) or finished
        tickets += [p["ticket"] for p in batch["pages"]] + [r["ticket"] for r in batch["records"]]
        tickets += [ticket for ticket, _ in batch["skipped"]]
    held = {Keys.body(crawl_id, ticket) for ticket in tickets}  # a stale delivery's keys are the refetch's
    rt.state.drop_bodies([key for key in parsed["body_keys"] if key in held])
    if finished:
        close_chain(rt, crawl_id)
        logs.crawl_finished(crawl_id, {**rt.state.stats(crawl_id), "state": rt.state.state_of(crawl_id)})
    notify.observe(rt, crawl_id, finished)  # the crawl's webhook, if it has one: never waits, never raises
    return finished


def _part(parsed: dict[str, Any], leases: set[str], first: bool) -> dict[str, Any]:
    """The pages, items, records and skips of the requests in ``leases`` (items of no known page
    go with the first part)."""
    pages = [p for p in parsed["pages"] if p["lease"] in leases]
    tickets = {p["ticket"] for p in pages} | {r["ticket"] for r in parsed["records"] if r["lease"] in leases}
    owners = parsed.get("item_tickets") or [""] * len(parsed["items"])
    items = [(i, t) for i, t in zip(parsed["items"], owners, strict=True) if t in tickets or (first and not t)]
    return {"pages": pages, "items": [i for i, _ in items], "item_tickets": [t for _, t in items],
            "records": [r for r in parsed["records"] if r["lease"] in leases],
            "skipped": [[t, lease] for t, lease in parsed["skipped"] if lease in leases]}


def _store_part(rt: Runtime, crawl_id: str, batch: dict[str, Any], custody: Custody) -> bool:
    """Hooks, bulk writes, then the requests finished. True if the crawl just finished."""
    storage, state, options = rt.storage, rt.state, rt.options(crawl_id)
    ended = {p["ticket"]: Ending(reason="worker_lost", message=lost_message(custody.lost(p["lease"])))
             for p in batch["pages"] if custody.lost(p["lease"]) >= options.max_worker_lost}
    spider = None
    if batch["items"] or len(ended) < len(batch["pages"]):
        try:
            spider = rt.spider(crawl_id)
        except SpiderNotFound as exc:
            missing = Ending(reason="spider_not_found", message=spider_missing(rt, crawl_id, exc, len(batch["pages"])))
            ended = {p["ticket"]: ended.get(p["ticket"], missing) for p in batch["pages"]}
    pages, items = _before_store(rt, crawl_id, spider, batch, ended) if spider else ({}, [])
    if spider is not None:
        items = run_items(rt, crawl_id, spider, items)  # the item processors (crawltasks.itempipes)
    records = [dict(r) for r in batch["records"]]
    records += [_ended_record(crawl_id, p, ended[p["ticket"]]) for p in batch["pages"] if p["ticket"] in ended]
    outcomes = [(p["ticket"], "stored" if pages.get(p["ticket"]) is not None else "skipped", p["lease"])
                for p in batch["pages"] if p["ticket"] not in ended]
    outcomes += [(r["ticket"], r["outcome"], r.pop("lease", "")) for r in records]
    outcomes += [(ticket, "skipped", lease) for ticket, lease in batch["skipped"]]
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


def _before_store(rt: Runtime, crawl_id: str, spider: Spider, batch: dict[str, Any],
                  ended: dict[str, Ending]) -> tuple[dict[str, dict[str, Any] | None], list[dict[str, Any]]]:
    """``before_store`` on every document of the requests not ``ended``: (ticket -> page document,
    None if the hook dropped it; the items kept). A hook that raises ends its request ``hook_error``
    (added to ``ended``), every document of that request with it."""
    keys = [p["body_key"] for p in batch["pages"] if p.get("body_key") and p["ticket"] not in ended]
    html = dict(zip(keys, rt.state.load_bodies(keys), strict=True))
    pages: dict[str, dict[str, Any] | None] = {}
    for page in batch["pages"]:
        if page["ticket"] in ended:
            continue
        doc = {k: v for k, v in page.items() if k not in IN_TRANSIT}
        if html.get(page.get("body_key")) is not None:
            doc["html"] = html[page["body_key"]].decode("utf-8", "replace")
        pages[page["ticket"]] = _guarded_before_store(rt, crawl_id, spider, "page", doc, page["ticket"], ended)
    items = [(ticket, _guarded_before_store(rt, crawl_id, spider, "item", dict(item), ticket, ended))
             for item, ticket in zip(batch["items"], batch["item_tickets"], strict=True) if ticket not in ended]
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
            ended.setdefault(ticket, Ending(reason="hook_error", message=message))
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
                fetched_at=_now())
    return record_doc(crawl_id, f)


def cancel(rt: Runtime, crawl_id: str, reason: str = "") -> bool:
    """Cancel a crawl: what waits in the frontier ends skipped now, what is in flight when it reaches
    its next stage; the crawl then finishes, cancelled."""
    changed = rt.state.control(crawl_id, ["running", "paused", "interrupted"], "cancelling")
    if changed:
        logs.event("crawl.cancelled", logging.WARNING, crawl_id=crawl_id, reason=reason or None)
    rt.frontier.drop_queued(crawl_id)
    rt.state.check_finished(crawl_id)
    return changed


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
