"""A crawl whose Redis state was lost, rebuilt from what MongoDB holds.

A Redis restarted without its data (no AOF) takes a crawl's registry, counters, seen-set, frontier and
claims with it; the pages, items and failure records in MongoDB stay. Continuing such a crawl by its
id (``start_crawl(crawl_id=...)``, ``crawltasks crawl --crawl-id ID``) rebuilds what the crawl needs:

* the seen-set gets the fingerprints of every stored page (its own and, for a redirect, its
  request's) and failure record, so none of them is fetched again;
* the outcomes and counters say ``stored`` = the pages, ``failed``/``skipped`` = the records;
* the frontier gets the crawl's *edge*: every request some stored document discovered that is not
  stored or recorded itself. ``scheduled`` and ``pending`` grow by those, so the crawl finishes
  exactly when they are done.

Where the edge comes from. Page documents kept only a count of their links. The choices were (a)
keep each page's links, (b) parse stored bodies again, (c) snapshot the frontier. (b) works only for
crawls that store HTML and runs every spider again; (c) is stale between snapshots unless written as
often as the frontier changes. This is (a), narrowed: a page (or a failure record, for what its
errback yielded) keeps, in ``discovered``, only the requests that were **new** when it was parsed,
written in the same document write as the page itself. Each request is new exactly once, so over a
crawl the field holds one entry per scheduled request, not one per link: ~1 short entry per page on
average (the compact queue entry of ``frontier.queues.encode``, ~50-100 bytes), where the links of a page
are dozens. And because a page and what it discovered land in one write, the edge is exact whenever
Redis is lost: a page not yet stored is itself on the edge of the page that found it.

What is left out: requests are kept the way failure records keep them (URL and referer redacted,
no body, headers or cookies: nothing secret goes to MongoDB), so a POST is sent again without its body
and a URL's password comes back only from a seed of the same origin (as in ``retry-failed``); links
on a page that ``before_store`` dropped, seeds pushed with ``add`` and robots.txt (cached in Redis
only) are not recovered; requests that ended without any document (a redirect to a page the crawl
already had, a cancelled request) are sent again and end as they did.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from .. import logs
from ..frontier.queues import PRIORITY_CODES, PRIORITY_NAMES, decode, encode
from ..frontier.schedule import bloom_of, enqueue
from ..models import Parsed, Request
from ..runtime import Runtime
from ..settings import CrawlOptions
from ..states import CrawlState
from ..urls import redact, restore_userinfo
from .mongo import FAILURES, PAGES

LOST = CrawlState.LOST  # the state FINISH writes when a crawl's registry is gone or pending fell below 0
SECRET_OPTIONS = ("headers", "cookies", "notify")  # never written to MongoDB; given again on a rebuild
CHUNK = 1000  # fingerprints or requests per Redis round trip while rebuilding


# --- what the parse stage writes ------------------------------------------------------------------
def entry(req: Request) -> str:
    """A discovered request as kept in its page's ``discovered``: the priority's code, then the queue
    entry of the request without anything secret (``frontier.queues.encode`` keeps the fingerprint)."""
    plain = not (req.body or req.headers or req.cookies or req.attempt or req.lost or "@" in req.url
                 or "@" in (req.referer or ""))
    if not plain:  # a copy costs more than the encoding (dataclasses.replace: ~16 us): only when needed
        req = dataclasses.replace(req, url=redact(req.url), referer=redact(req.referer), body=b"", headers={},
                                  cookies={}, lease="", attempt=0, lost=0)
    return PRIORITY_CODES[req.priority] + encode(req)


def request_of(raw: str, seeds: Iterable[str]) -> Request:
    """The request of an ``entry``, with a URL's credentials put back from a seed of its origin."""
    req = decode(raw[1:], PRIORITY_NAMES.get(raw[:1], "default"))
    req.url = restore_userinfo(req.url, seeds)
    return req


def attach_discovered(out: Parsed, origins: dict[int, str], fresh: list[Request]) -> None:
    """Put each new request on the page (or failure record) of the parse output that found it."""
    found: dict[str, list[str]] = defaultdict(list)
    for req in fresh:
        ticket = origins.get(id(req))
        if ticket:
            found[ticket].append(entry(req))
    if found:
        for doc in [*out.pages, *out.records]:
            if doc["ticket"] in found:
                doc["discovered"] = found[doc["ticket"]]


# --- the crawl's record in MongoDB ------------------------------------------------------------------
def save_record(rt: Runtime, crawl_id: str, options: dict[str, Any], seeds: list[str]) -> None:
    """What a rerun needs once Redis has forgotten the crawl: its options and seeds, without secrets."""
    kept = {k: v for k, v in options.items() if k not in SECRET_OPTIONS}
    withheld = [k for k in SECRET_OPTIONS if options.get(k)]
    rt.storage.save_crawl(crawl_id, {"options": kept, "seeds": redact(list(seeds)), "withheld": withheld},
                          started_at=time.time())


def saved_seeds(rt: Runtime, crawl_id: str) -> list[str]:
    """The crawl's seeds: from Redis, else from its record in MongoDB (its Redis state was lost)."""
    import json

    raw = rt.state.crawl_meta(crawl_id).get("seeds")
    if raw:
        return json.loads(raw)
    record = rt.storage.crawl_record(crawl_id) or {}
    return list(record.get("seeds") or [])


def is_lost(meta: dict[str, str]) -> bool:
    """The crawl's registry is gone (no start time) or FINISH found its counters contradicting."""
    return not meta.get("started_at") or meta.get("state") == LOST


# --- the rebuild --------------------------------------------------------------------------------------
def rebuild_if_lost(rt: Runtime, crawl_id: str, options: dict[str, Any], seeds: list[str]) -> bool:
    """If the crawl's Redis state is lost and MongoDB knows the crawl, rebuild it (see the module's
    docstring) and return True. ``options`` are the caller's (the record's win, but for the secret
    ones, which only the caller can give again); ``seeds`` restore credentials of stored URLs.
    Never for a crawl whose state is whole: that one simply continues."""
    state, storage = rt.state, rt.storage
    meta = state.crawl_meta(crawl_id)
    if meta and not is_lost(meta):
        return False
    record = storage.crawl_record(crawl_id)
    if record is None and not storage.count(PAGES, crawl_id):
        if meta:  # what FINISH left of a crawl nothing remembers: start it afresh
            state.delete_crawl(crawl_id)
        return False
    saved = dict((record or {}).get("options") or options)
    saved.update({k: options[k] for k in SECRET_OPTIONS if options.get(k)})
    missing = [k for k in (record or {}).get("withheld", []) if not options.get(k)]
    all_seeds = list(dict.fromkeys([*seeds, *((record or {}).get("seeds") or [])]))
    state.delete_crawl(crawl_id)  # what workers wrote after the loss goes with it
    state.create_crawl(crawl_id, saved, all_seeds)
    state.mark_rebuilt(crawl_id, record["started_at"] if record else None)
    opts = rt.forget_options(crawl_id)
    done = restore_done(rt, crawl_id, opts)
    edge = restore_edge(rt, crawl_id, opts, all_seeds)
    logs.event("crawl.rebuilt", logging.WARNING, crawl_id=crawl_id, done=done, edge=edge,
               message=("its Redis state was lost; rebuilt from MongoDB"
                        + (f" without {', '.join(missing)} (give them again)" if missing else "")))
    return True


def _done_docs(rt: Runtime, crawl_id: str) -> Iterator[tuple[str, str, list[str]]]:
    """(ticket, outcome, fingerprints) of every stored page and failure record of the crawl."""
    for doc in rt.storage.scan(PAGES, crawl_id, ["fp", "request_fp"]):
        fps = [doc["fp"], *([doc["request_fp"]] if doc.get("request_fp") else [])]
        yield fps[-1], "stored", fps
    for doc in rt.storage.scan(FAILURES, crawl_id, ["fp", "ticket", "outcome"]):
        yield doc.get("ticket") or doc["fp"], doc.get("outcome", "failed"), [doc["fp"]]


def restore_done(rt: Runtime, crawl_id: str, opts: CrawlOptions) -> int:
    """Seen-set, outcomes and counters of what MongoDB holds; returns how many requests that is."""
    counts = {"stored": 0, "failed": 0, "skipped": 0}
    bloom = bloom_of(rt.state, crawl_id, opts)
    batch: list[tuple[str, str, list[str]]] = []

    def flush() -> None:
        fps = [fp for _, _, group in batch for fp in group]
        rt.state.restore_outcomes(crawl_id, [(ticket, outcome) for ticket, outcome, _ in batch],
                                  fps if bloom is None else [])
        if bloom is not None:
            bloom.check_and_add(fps)
        batch.clear()

    for ticket, outcome, fps in _done_docs(rt, crawl_id):
        counts[outcome] = counts.get(outcome, 0) + 1
        batch.append((ticket, outcome, fps))
        if len(batch) >= CHUNK:
            flush()
    if batch:
        flush()
    total = sum(counts.values())
    rt.state.restore_counts(crawl_id, {**counts, "scheduled": total, "pending": 0})
    return total


def restore_edge(rt: Runtime, crawl_id: str, opts: CrawlOptions, seeds: list[str]) -> int:
    """Queue what stored documents discovered and nothing stored or recorded; returns how many."""
    bloom = bloom_of(rt.state, crawl_id, opts)
    queued, batch = 0, []
    for name in (PAGES, FAILURES):
        for doc in rt.storage.scan(name, crawl_id, ["discovered"], having="discovered"):
            batch += doc.get("discovered") or []
            if len(batch) >= CHUNK:
                queued += _queue(rt, crawl_id, opts, [request_of(raw, seeds) for raw in batch], bloom)
                batch = []
    return queued + _queue(rt, crawl_id, opts, [request_of(raw, seeds) for raw in batch], bloom)


def _queue(rt: Runtime, crawl_id: str, opts: CrawlOptions, reqs: list[Request], bloom: Any) -> int:
    """The requests of ``reqs`` not seen yet, into the frontier (counted scheduled and pending)."""
    if not reqs:
        return 0
    fps = [r.fp for r in reqs]
    seen = bloom.contains(fps) if bloom is not None else rt.state.seen_already(crawl_id, fps)
    return len(enqueue(rt.state, rt.frontier, crawl_id, [r for r, s in zip(reqs, seen, strict=True) if not s], opts))


# --- `crawltasks list`: crawls MongoDB knows and Redis forgot ------------------------------------------
def lost_crawls(rt: Runtime, known: set[str]) -> list[dict[str, Any]]:
    """Rows for the crawls MongoDB has a record of, never finished, that Redis does not know (one
    query over the small ``crawls`` collection, then a count of pages for each crawl it finds)."""
    rows = []
    for record in rt.storage.unfinished_crawls():
        crawl_id = record["_id"]
        if crawl_id in known or not is_lost(rt.state.crawl_meta(crawl_id)):
            continue
        rows.append({"crawl_id": crawl_id, "state": LOST, "started_at": record.get("started_at"),
                     "finished_at": None, "elapsed": None, "scheduled": None,
                     "stored": rt.storage.count(PAGES, crawl_id), "failed": rt.storage.count(FAILURES, crawl_id),
                     "pending": None, "stalled": None, "pages_per_s": 0.0})
    return rows
