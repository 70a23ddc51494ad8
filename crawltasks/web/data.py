"""What the dashboard shows, read through crawltasks' own APIs (``Crawl``, ``RedisState``,
``RedisFrontier``, ``MongoStorage``, ``monitor``), never raw keys. Every function here blocks on
Redis or Mongo: the handlers run them on threads. Numbers are those ``crawltasks stats`` prints
(``Crawl.stats``), plus rates from the crawl's time series (``crawltasks.monitor.series``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from ..crawl import Crawl
from ..monitor.progress import eta_seconds
from ..monitor.series import WIDTH, Bucket, Window, clip, life
from ..monitor.watch import crawl_hosts, failure_counts, host_states
from ..runtime import Runtime
from ..states import ENDED, CrawlState
from ..storage.mongo import ITEMS, PAGES
from ..urls import host_key, redact

NOW_WINDOW = 30.0  # seconds behind "pages/s now"
LIST_LIMIT = 100  # crawls in the list, newest first
HOSTS_SHOWN = 15  # rows of the hosts table, busiest first
LATEST_PAGES, LATEST_ITEMS = 15, 10
SLOW_SAMPLE, SLOWEST = 300, 5  # the slowest hosts: mean response time over the latest stored pages
SAMPLES, REASONS_SAMPLED = 3, 10  # sample URLs per failure reason, for the most frequent reasons
COUNTERS = ("scheduled", "stored", "failed", "skipped", "pending", "fetched", "parsed", "items", "duplicates",
            "filtered", "retried", "reclaimed", "redriven", "hook_errors")
SHOWN_OPTIONS = ("spider", "max_depth", "host_concurrency", "host_delay", "obey_robots", "dedupe", "batch_size",
                 "max_pages", "retention")  # never headers, cookies or the webhook URL


@dataclass
class Row:
    """One crawl in the list (and the head of its own page)."""

    crawl_id: str
    spider: str
    state: str
    scheduled: int
    stored: int
    failed: int
    skipped: int
    pending: int
    started_at: float | None
    finished_at: float | None
    elapsed: float | None
    rate_now: float | None  # stored pages/s over the last NOW_WINDOW s (running crawls)
    rate_avg: float  # stored pages/s since the start
    eta: float | None  # seconds, for the URLs known so far; None: cannot be told
    stalled: str = ""

    @property
    def done(self) -> int:
        return self.stored + self.failed + self.skipped

    @property
    def progress(self) -> float:
        """Percent of scheduled requests with an outcome."""
        return 100.0 * self.done / self.scheduled if self.scheduled else (100.0 if self.state in ENDED else 0.0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done, "progress": round(self.progress, 2)}


def make_row(stats: dict[str, Any], window: Window, spider: str) -> Row:
    """A Row from ``Crawl.stats()`` and the crawl's recent outcomes."""
    state = str(stats.get("state", CrawlState.UNKNOWN))
    running = state == CrawlState.RUNNING
    elapsed = stats.get("elapsed")
    pending = int(stats.get("pending", 0))
    done_rate = window.rate("done") if running else None
    eta = 0.0 if state in ENDED else eta_seconds(pending, done_rate) if running else None
    return Row(crawl_id=stats["crawl_id"], spider=spider, state=state, scheduled=int(stats.get("scheduled", 0)),
               stored=int(stats.get("stored", 0)), failed=int(stats.get("failed", 0)),
               skipped=int(stats.get("skipped", 0)), pending=pending, started_at=stats.get("started_at"),
               finished_at=stats.get("finished_at"), elapsed=elapsed,
               rate_now=(window.rate("stored") or 0.0) if running else None,
               rate_avg=int(stats.get("stored", 0)) / elapsed if elapsed else 0.0, eta=eta,
               stalled=str(stats.get("stalled", "")))


def spider_of(rt: Runtime, crawl_id: str) -> str:
    try:
        return rt.options(crawl_id).spider
    except Exception:  # noqa: BLE001 - a crawl saved by another version: still listed
        return "?"


def crawl_rows(rt: Runtime, limit: int = LIST_LIMIT) -> tuple[list[Row], int]:
    """The newest ``limit`` crawls known to Redis, and how many there are in all."""
    ids = rt.state.crawl_ids()
    shown = ids[::-1][:limit]
    stats = [Crawl(c, rt).stats() for c in shown]
    _, windows = rt.activity.recent(shown, NOW_WINDOW, [s.get("started_at") for s in stats])
    return [make_row(s, w, spider_of(rt, s["crawl_id"])) for s, w in zip(stats, windows, strict=True)], len(ids)


@dataclass
class HostRow:
    """A host of the crawl: its share of the frontier and of the shared gate."""

    host: str
    queued: int
    in_flight: int  # this crawl's requests there now
    gate: int  # requests in flight there across every crawl (the shared gate)
    limit: int
    next_in: float  # seconds until the next request may start
    backoff: float  # extra seconds between requests after 429/503 answers
    stored: int
    failed: int

    @property
    def label(self) -> str:
        if self.backoff > 0:
            return "backing off"
        if self.gate >= self.limit > 0:
            return "at limit"
        if self.next_in > 0:
            return "delay"
        return "fetching" if self.in_flight else ("waiting" if self.queued else "idle")


@dataclass
class Detail:
    """Everything the page of one crawl shows."""

    row: Row
    stats: dict[str, Any]
    seeds: list[str]
    options: dict[str, Any]
    buckets: list[Bucket]
    bucket_width: float  # seconds per bucket of the series (they widen as a long crawl goes on)
    now: float
    failures: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    hosts: list[HostRow] = field(default_factory=list)
    host_count: int = 0
    slowest: list[tuple[str, float, int]] = field(default_factory=list)
    pages: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    workers: int = 0

    @property
    def counters(self) -> list[tuple[str, int]]:
        return [(name, int(self.stats.get(name, 0))) for name in COUNTERS if name in self.stats]

    @property
    def filtered(self) -> dict[str, int]:
        return {k.removeprefix("filtered_"): int(v) for k, v in sorted(self.stats.items())
                if k.startswith("filtered_") and v}


def crawl_detail(rt: Runtime, crawl_id: str) -> Detail | None:
    """One crawl's page, or None for a crawl Redis does not know."""
    meta = rt.state.crawl_meta(crawl_id)
    if not meta:
        return None
    stats = Crawl(crawl_id, rt).stats()
    now, [window] = rt.activity.recent([crawl_id], NOW_WINDOW, [stats.get("started_at")])
    options = json.loads(meta.get("options") or "{}")
    seeds = json.loads(meta.get("seeds") or "[]")
    failures = failure_counts(rt, crawl_id)
    recent = rt.storage.latest(PAGES, crawl_id, SLOW_SAMPLE,
                               ["url", "status", "title", "depth", "size", "elapsed", "fetched_at"])
    hosts, host_count = host_table(rt, crawl_id, seeds, options)
    raw = rt.activity.series(crawl_id)
    return Detail(
        row=make_row(stats, window, str(options.get("spider", "?"))), stats=stats, seeds=redact(seeds),
        options={k: options[k] for k in SHOWN_OPTIONS if options.get(k) is not None}
        | {"notify": "on" if options.get("notify") else "off"},
        buckets=clip(life(raw), stats.get("started_at"), stats.get("finished_at") or now),
        bucket_width=float(raw.get("w", WIDTH)), now=now, failures=failures,
        samples=rt.storage.failure_samples(crawl_id, list(failures)[:REASONS_SAMPLED], SAMPLES),
        hosts=hosts, host_count=host_count, slowest=slowest_hosts(recent), pages=recent[:LATEST_PAGES],
        items=[item_line(i) for i in rt.storage.latest(ITEMS, crawl_id, LATEST_ITEMS)],
        workers=len(rt.fleet().read()[0]))


def host_table(rt: Runtime, crawl_id: str, seeds: list[str], options: dict[str, Any]) -> tuple[list[HostRow], int]:
    """The busiest HOSTS_SHOWN hosts of the crawl (of a sample of 500 in a broad crawl), and how many
    were looked at: the crawl's queues and in-flight requests, the shared gate, per-host outcomes."""
    names = sorted(crawl_hosts(rt, crawl_id, seeds, options))
    default_limit = int(options.get("host_concurrency") or 0)
    gate = {h.host: h for h in host_states(rt, names)}
    frontier = rt.frontier.host_queues(crawl_id, names)
    done = rt.activity.host_done(crawl_id, names)
    rows = []
    for host in names:
        own, shared = frontier[host], gate[host]
        limit = own.limits.concurrency if own.limits else default_limit
        stored, failed = done[host]
        rows.append(HostRow(host, own.queued, own.in_flight, shared.in_flight, limit, max(own.wait, shared.wait),
                            shared.backoff, stored, failed))
    rows.sort(key=lambda r: (-r.in_flight, -r.queued, -r.stored, r.host))
    return rows[:HOSTS_SHOWN], len(rows)


def slowest_hosts(pages: list[dict[str, Any]]) -> list[tuple[str, float, int]]:
    """(host, mean seconds per response, pages) over the given pages, slowest first."""
    times: dict[str, list[float]] = defaultdict(list)
    for page in pages:
        if page.get("elapsed") is not None and page.get("url"):
            times[host_key(page["url"]) or "?"].append(float(page["elapsed"]))
    means = [(host, sum(t) / len(t), len(t)) for host, t in times.items()]
    return sorted(means, key=lambda m: -m[1])[:SLOWEST]


def item_line(item: dict[str, Any], width: int = 240) -> dict[str, Any]:
    """An item as the page shows it: its source URL and its own fields as short JSON."""
    fields = {k: v for k, v in item.items() if k not in ("crawl_id", "url", "fp")}
    text = json.dumps(fields, ensure_ascii=False, default=str, sort_keys=True)
    return {"url": item.get("url", ""), "fields": text if len(text) <= width else text[:width - 1] + "…"}


def failures_page(rt: Runtime, crawl_id: str, reason: str | None, page: int, size: int) -> list[dict[str, Any]]:
    """One page of the crawl's failure records (URLs are stored redacted)."""
    return rt.storage.failures_page(crawl_id, reason, max(0, page) * size, size)
