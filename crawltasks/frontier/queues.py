"""The per-host frontier: what waits to be fetched, per host, and which hosts may be fetched now.

The design of polite broad crawlers since Mercator: requests wait in one queue per host (three, by
priority: a ready host's high-priority requests leave first), and a heap of hosts keyed by the
earliest time each may be fetched again says which hosts are ready. ``take`` hands out requests of
ready hosts only, at most the host's concurrency in flight and one per ``delay``, and moves the host
on by its delay; the dispatcher turns what it takes into fetch chains, so the broker holds only work
that can start at once.

A taken request holds a **claim** (its ``lease`` id) until it is finished: owned by nobody while its
message waits in the broker, then by the worker process that handles it. The reclaimer puts back in
its host's queue every claim whose owner stopped heart-beating, or that nobody took up in time.

``Frontier`` (``crawltasks.ports.frontier``) is the port; ``RedisFrontier``
(``crawltasks.backends.redis.frontier``) is the shared one, and ``MemoryFrontier``
(``crawltasks.backends.memory.frontier``) its in-memory twin for fast tests of the policy: both pass
the same contract tests (``tests/test_hostqueues.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import Request, pack_body, unpack_body
from ..urls import InvalidURL, canonicalize, fingerprint, raw_fingerprint

NEW, DUPLICATE, OVER_MAX_PAGES, OVER_HOST_CAP = 1, 0, 2, 3  # add() verdicts
PRIORITY_CODES = {"high": "h", "default": "d", "low": "l"}  # the queue of each priority, first to last
PRIORITY_NAMES = {code: name for name, code in PRIORITY_CODES.items()}
PARKED_MS = 3_600_000  # a host at its concurrency waits this long, or until one of its fetches ends


@dataclass(frozen=True)
class HostPolicy:
    """How far a crawl's hosts may be pushed: requests at once, and seconds between request starts."""

    concurrency: int
    delay: float
    random_delay: float = 0.0


@dataclass(frozen=True)
class Caps:
    """Scheduling caps of a crawl (0: none)."""

    max_pages: int = 0
    max_per_host: int = 0


@dataclass
class Taken:
    """Requests taken from ready hosts, as stored (lease, priority, entry: they travel to the fetch
    worker as they are), and how long until the next host is ready (None: none waits)."""

    entries: list[Entry] = field(default_factory=list)
    next_ready: float | None = None

    @property
    def requests(self) -> list[Request]:
        return [decode(entry, priority, lease) for lease, priority, entry in self.entries]


Entry = tuple[str, str, str]  # (lease, priority, encoded request): a taken request on its way


@dataclass(frozen=True)
class HostQueue:
    """One host of a crawl as its frontier holds it, for the dashboard."""

    queued: int  # requests waiting
    in_flight: int  # taken and not yet fetched
    wait: float  # seconds until its next request may start (0: now)
    limits: HostPolicy | None  # its own limits (host rules, Crawl-delay); None: the crawl's


@dataclass
class Sizes:
    queued: int = 0  # waiting in host queues
    outstanding: int = 0  # taken and not yet fetched (in the broker, or being fetched)
    claimed: int = 0  # taken and not yet finished
    hosts: int = 0  # hosts with queued requests


# --- the compact form of a queued request ----------------------------------------------------------
# A JSON array [depth, url, referer, extras]: the priority is the queue it waits in, the fingerprint
# is computed again when it is taken, a referer on the same origin keeps only its path, and extras
# holds only what differs from the defaults (a POST's method, body, headers, cookies, callbacks).
# About 100 bytes for a typical link, so tens of millions of waiting URLs fit one Redis.

def _origin_end(url: str) -> int:
    """Index of the path in scheme://host[:port]/path (len(url) when there is none)."""
    start = url.find("://")
    if start < 0:
        return -1
    slash = url.find("/", start + 3)
    return len(url) if slash < 0 else slash


def encode(req: Request) -> str:
    """A queued request as stored: compact, JSON-safe."""
    referer = req.referer
    if referer:
        end = _origin_end(req.url)
        if end > 0 and referer.startswith(req.url[:end]) and referer[end:end + 1] == "/":
            referer = referer[end:]
    extras: dict[str, Any] = {}
    if req.method != "GET":
        extras["M"] = req.method
    if req.meta:
        extras["m"] = req.meta
    if req.dont_filter:
        extras["d"] = 1
    if req.ticket and req.ticket != req.fp:
        extras["t"] = req.ticket
    if req.attempt:
        extras["a"] = req.attempt
    if req.lost:
        extras["l"] = req.lost
    extras.update(_http_extras(req))
    if req.fp and req.fp != _fingerprint_of(req.url, req.method, req.meta, (), req.body):
        extras["f"] = req.fp  # not the plain fingerprint: fingerprint_meta, or a URL that cannot be canonical
    row: list[Any] = [req.depth, req.url, referer]
    if extras:
        row.append(extras)
    return json.dumps(row, separators=(",", ":"))


def decode(raw: str | bytes, priority: str = "default", lease: str = "") -> Request:
    """The Request of an encoded queue entry (inverse of ``encode``)."""
    row = json.loads(raw)
    depth, url, referer = row[0], row[1], row[2]
    extras = row[3] if len(row) > 3 else {}
    if referer and referer.startswith("/"):
        end = _origin_end(url)
        referer = url[:end] + referer if end > 0 else referer
    method = extras.get("M", "GET")
    meta = extras.get("m") or {}
    body = unpack_body(extras.get("b"))
    fp = extras.get("f") or _fingerprint_of(url, method, meta, (), body)
    return Request(url=url, depth=depth, priority=priority, method=method, meta=meta,
                   dont_filter=bool(extras.get("d")), fp=fp, ticket=extras.get("t", fp),
                   attempt=extras.get("a", 0), referer=referer, lease=lease, lost=extras.get("l", 0),
                   body=body, headers=extras.get("h") or {}, cookies=extras.get("c") or {},
                   callback=extras.get("cb"), errback=extras.get("eb"))


def _http_extras(req: Request) -> dict[str, Any]:
    """What a request adds to plain GETs, under short keys: body (text or base64), headers,
    cookies, callback and errback names. Empty for a plain link."""
    extras: dict[str, Any] = {}
    if req.body:
        extras["b"] = pack_body(req.body)
    if req.headers:
        extras["h"] = req.headers
    if req.cookies:
        extras["c"] = req.cookies
    if req.callback:
        extras["cb"] = req.callback
    if req.errback:
        extras["eb"] = req.errback
    return extras


def _fingerprint_of(url: str, method: str, meta: dict[str, Any], fields: Sequence[str], body: bytes = b"") -> str:
    try:
        return fingerprint(canonicalize(url), method, meta, fields, body)
    except InvalidURL:
        return raw_fingerprint(url, method)
