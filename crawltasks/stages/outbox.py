"""What a fetch engine hands on: per crawl, the results of finished requests, gathered into small
groups for parse, their bodies parked in Redis, and their counters, in one round trip each.

Kept apart from the engine's scheduling (which request may start, under which slot): this side only
decides where a finished request goes, on to parse or back to the frontier to be tried again.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from .. import logs
from ..frontier.schedule import backoff, bloom_of
from ..models import Fetched, Request
from ..reasons import Reason
from ..runtime import Runtime
from ..settings import CrawlOptions

FLUSH_AFTER = 0.1  # seconds a finished request waits for others of its crawl before they go to parse


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class CrawlBox:
    """What the engine holds for one crawl: results to hand on and claims whose fetch is over."""

    results: list[Fetched] = field(default_factory=list)
    bodies: dict[str, bytes] = field(default_factory=dict)
    since: float = 0.0
    fetched_leases: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Outbox:
    """The finished requests of every crawl in one engine, until they go to parse (through the
    process's sender, ``rt.sender``: one parse -> store chain a group)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt, self.sender = rt, rt.sender
        self.boxes: dict[str, CrawlBox] = {}

    def box(self, crawl_id: str) -> CrawlBox:
        box = self.boxes.get(crawl_id)
        if box is None:
            box = self.boxes[crawl_id] = CrawlBox()
        if not box.results:
            box.since = time.monotonic()
        return box

    def add(self, crawl_id: str, result: Fetched, count: str | None = None) -> None:
        """A request decided without parse's help being needed to fetch it (a skip, a refusal)."""
        box = self.box(crawl_id)
        box.results.append(result)
        box.fetched_leases.append(result.request.lease)
        if count:
            box.counts[count] += 1

    def refuse(self, crawl_id: str, req: Request, *, reason: str, message: str, count: str) -> None:
        """A request that ends here, unfetched (robots.txt said no)."""
        self.add(crawl_id, Fetched(request=req, error=reason, message=message, fetched_at=now_iso()), count)

    def sort(self, crawl_id: str, req: Request, result: Fetched, body: bytes | None) -> None:
        """A fetched request: on to parse, or back to the frontier to be tried again later (``settle``
        decides; a redirect's new URL is claimed first, as that answer is the frontier's)."""
        options, box = self.rt.options(crawl_id), self.box(crawl_id)
        state = self.rt.state
        duplicate = (result.ok and result.fp != req.fp
                     and not state.claim_seen(crawl_id, result.fp, bloom_of(state, crawl_id, options)))
        settled = settle(req, result, body, options, duplicate=duplicate)
        if settled.count:
            box.counts[settled.count] += 1
        if settled.retry is not None:
            logs.request_retry(crawl_id, req.url, result.error, settled.retry.attempt, settled.countdown)
            self.rt.frontier.give_back(crawl_id, [settled.retry], settled.countdown)
            return
        assert settled.result is not None
        if settled.body is not None:
            box.bodies[req.ticket] = settled.body
        box.results.append(settled.result)
        box.fetched_leases.append(req.lease)

    def due(self) -> list[float]:
        """When waiting results must go, whatever else comes."""
        return [box.since + FLUSH_AFTER for box in self.boxes.values() if box.results]

    def mark_fetched(self) -> None:
        """The frontier learns at once which fetches are over: their hosts may be given more work."""
        for crawl_id, box in self.boxes.items():
            if box.fetched_leases:
                self.rt.frontier.fetched(crawl_id, box.fetched_leases)
                box.fetched_leases = []

    def flush(self, now: float, everything: bool = False) -> None:
        """Results that waited long enough, or make a batch, go to parse (bodies parked in Redis)."""
        for crawl_id, box in list(self.boxes.items()):
            if not box.results and not box.counts:
                continue
            options = self.rt.options(crawl_id)
            if not everything and len(box.results) < options.batch_size and now - box.since < FLUSH_AFTER:
                continue
            keys = self.rt.bodies.park(crawl_id, box.bodies, options.body_ttl)
            results = [replace(r, body_key=keys.get(r.request.ticket) if r.ok else None) for r in box.results]
            self.rt.state.incr(crawl_id, **box.counts)
            if results:
                self.sender.send_results(crawl_id, results)
            self.boxes[crawl_id] = CrawlBox()


@dataclass(frozen=True)
class Settled:
    """What a fetched request turns into, decided before the outbox acts on it: a ``result`` for
    parse (with its ``body`` to park, if any), or a ``retry`` for the frontier in ``countdown``
    seconds; ``count`` names the counter it adds to."""

    result: Fetched | None = None
    body: bytes | None = None
    retry: Request | None = None
    countdown: float = 0.0
    count: str | None = None


def settle(req: Request, result: Fetched, body: bytes | None, options: CrawlOptions, *,
           duplicate: bool = False) -> Settled:
    """Where a fetched request goes: a page on to parse (a redirect to a URL already seen,
    ``duplicate``, ends without its body), a transient failure back to the frontier while it has
    retries left, any other failure on to parse to be recorded. Its arguments are left as they are."""
    if result.ok and duplicate:
        message = f"redirected to {result.url}, already seen"
        return Settled(result=replace(result, error=Reason.DUPLICATE_REDIRECT, message=message), count="fetched")
    if result.ok:
        return Settled(result=result, body=body, count="fetched")
    if result.transient and req.attempt < options.max_retries:
        retry = Request.from_dict({**req.to_dict(), "attempt": req.attempt + 1})
        return Settled(retry=retry, countdown=backoff(req.attempt, options, result.retry_after), count="retried")
    return Settled(result=result)
