"""Incremental re-crawls: a page stored by an earlier crawl of the same spider is asked for again
with its validators (``If-None-Match`` / ``If-Modified-Since``), and a 304 leaves it as it is.

The validators of every page a ``visit_ttl`` crawl stores wait in the runtime's ``ValidatorStore``
(Redis: one hash per spider), by fingerprint (crawl id, ETag, Last-Modified, content hash): the
request of a later crawl has the same fingerprint, and the store has no index on it across crawls.
A 304 ends the request ``not_modified`` (a recorded skip, counted ``not_modified``); the earlier
crawl's page document keeps its content and gets a new ``checked_at``, and the page counts as
visited again. The page's content hash
(``content_hash``) tells an unchanged page apart where the server sends no validators.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from ..models import Fetched, Request
from ..ports import Validators
from ..reasons import Reason
from ..runtime import Runtime
from ..settings import CrawlOptions

KEEP_AT_LEAST = 30 * 24 * 3600  # seconds the validators outlive their last write (and 10 x visit_ttl)


def page_fields(f: Fetched, body: bytes) -> dict[str, Any]:
    """What a page document keeps to be re-crawled cheaply: validators, content hash, when checked."""
    fields: dict[str, Any] = {"content_hash": hashlib.sha1(body).hexdigest(), "checked_at": f.fetched_at}
    if f.headers.get("etag"):
        fields["etag"] = f.headers["etag"]
    if f.headers.get("last-modified"):
        fields["last_modified"] = f.headers["last-modified"]
    return fields


def add_conditions(rt: Runtime, options: CrawlOptions, requests: list[Request]) -> None:
    """Give the GETs of pages stored before their validators, in one round trip (a request that
    carries conditions of its own keeps them)."""
    if not options.visit_ttl:
        return
    plain = [r for r in requests if r.method == "GET" and not any(
        k.lower() in ("if-none-match", "if-modified-since") for k in r.headers)]
    if not plain:
        return
    for req, known in zip(plain, rt.validators.get(options.spider, [r.fp for r in plain]), strict=True):
        if known is None:
            continue
        extra = {"If-None-Match": known.etag} if known.etag else {}
        if known.last_modified:
            extra["If-Modified-Since"] = known.last_modified
        req.headers = {**req.headers, **extra}


def remember(rt: Runtime, options: CrawlOptions, crawl_id: str, pages: list[dict[str, Any]]) -> None:
    """Keep the validators of pages just stored, for the next crawl of the spider."""
    if not options.visit_ttl or not pages:
        return
    rows = {p["fp"]: Validators(crawl_id, p.get("etag"), p.get("last_modified"), p.get("content_hash"))
            for p in pages}
    rt.validators.put(options.spider, rows, int(max(KEEP_AT_LEAST, 10 * options.visit_ttl)))


def not_modified(rt: Runtime, options: CrawlOptions, crawl_id: str, records: list[dict[str, Any]]) -> None:
    """Requests that ended ``not_modified``: their stored pages get a new ``checked_at`` and count as
    visited again; the crawl counts them."""
    fps = [r["fp"] for r in records if r["reason"] == Reason.NOT_MODIFIED]
    if not fps:
        return
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    rows = rt.validators.get(options.spider, fps)
    stored = [(row.crawl_id, fp) for fp, row in zip(fps, rows, strict=True) if row is not None]
    rt.storage.touch_pages(stored, now)  # each page where it was stored: the crawl that stored it
    rt.state.mark_visited(options.spider, fps, options.visit_ttl)
    rt.state.incr(crawl_id, not_modified=len(fps))
