"""Per-crawl monitoring, which Flower cannot give: Flower sees tasks, this sees a crawl.

``snapshot`` reads one crawl's counters (Redis), failures by reason (Mongo) and the shared per-host
gate (Redis); ``render`` turns it into a rich view; ``watch`` keeps that view live until the crawl
finishes (``crawltasks stats ID --watch``); ``render_list`` is ``crawltasks list`` (the bar of ``crawltasks crawl``
is in ``progress.py``). Everything here only reads, so it is safe to run from
any machine that reaches the crawl's Redis and Mongo, as often as you like.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .. import runtime
from ..runtime import Runtime
from ..states import CrawlState
from ..urls import host_key, redact
from .progress import OVER, RateMeter, average_rate, eta_seconds, human_seconds

MAX_HOSTS = 12  # rows of the per-host table; the busiest first
STATE_STYLE = {CrawlState.RUNNING: "bold yellow", CrawlState.FINISHED: "bold green", CrawlState.UNKNOWN: "dim",
               CrawlState.LOST: "bold red"}


@dataclass
class HostState:
    """One host's share of the politeness gate (shared by every crawl that fetches from it)."""

    host: str
    in_flight: int
    wait: float  # seconds until the next request may start (0: now)
    limit: int | None = None
    backoff: float = 0.0  # extra seconds between requests after the host answered 429/503

    @property
    def label(self) -> str:
        if self.backoff > 0:
            return "backing off"
        if self.limit is not None and self.in_flight >= self.limit:
            return "at limit"
        if self.wait > 0:
            return "delay"
        return "fetching" if self.in_flight else "idle"


@dataclass
class Snapshot:
    """What a crawl looks like at one moment."""

    crawl_id: str
    stats: dict[str, Any]
    failures: dict[str, int] = field(default_factory=dict)
    hosts: list[HostState] = field(default_factory=list)
    seeds: list[str] = field(default_factory=list)
    taken_at: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        """Requests with a final outcome (stored, failed or skipped)."""
        return int(self.stats.get("stored", 0)) + int(self.stats.get("failed", 0)) + int(self.stats.get("skipped", 0))

    @property
    def finished(self) -> bool:
        """Nothing more will happen to the crawl: finished, cancelled, or its state lost."""
        return self.stats.get("state") in OVER

    @property
    def fetching(self) -> int:
        return sum(h.in_flight for h in self.hosts)


# --- reading ---------------------------------------------------------------------------------------
def failure_counts(rt: Runtime, crawl_id: str) -> dict[str, int]:
    """Final failures by reason, most frequent first (one aggregation in Mongo)."""
    counts = rt.storage.failure_counts(crawl_id)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def host_states(rt: Runtime, hosts: Iterable[str], limit: int | None = None) -> list[HostState]:
    """In-flight leases, remaining delay and back-off of each host, as the shared gate sees them now."""
    hosts = sorted(set(hosts))
    out = [HostState(host, load.in_flight, load.wait, limit, load.backoff)
           for host, load in zip(hosts, rt.gate.view(hosts), strict=True)]
    out.sort(key=lambda h: (-h.in_flight, -h.wait, h.host))
    return out


def crawl_hosts(rt: Runtime, crawl_id: str, seeds: list[str], options: dict[str, Any]) -> set[str]:
    """The seeds' hosts plus every host the crawl has scheduled requests for."""
    hosts = {host_key(u) for u in seeds if host_key(u)}
    hosts.update(rt.activity.crawl_hosts(crawl_id))
    return hosts


def snapshot(crawl_id: str, rt: Runtime | None = None, with_failures: bool = True) -> Snapshot:
    """One reading of a crawl; raises LookupError for an unknown crawl id."""
    from ..crawl import Crawl

    rt = rt or runtime.current()
    crawl = Crawl(crawl_id, rt)
    meta = rt.state.crawl_meta(crawl_id)
    if not meta:
        raise LookupError(f"no crawl named {crawl_id!r}")
    stats = crawl.stats()
    seeds = json.loads(meta.get("seeds") or "[]")
    options = json.loads(meta.get("options") or "{}")
    hosts = host_states(rt, crawl_hosts(rt, crawl_id, seeds, options), options.get("host_concurrency"))
    failures = failure_counts(rt, crawl_id) if with_failures else {}
    return Snapshot(crawl_id, stats, failures, hosts, redact(seeds))  # shown: no password


# --- rendering -------------------------------------------------------------------------------------
def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def render(snap: Snapshot, rate: float | None = None, done_rate: float | None = None) -> RenderableType:
    """The live view: header, counters, speed and ETA, failures by reason, per-host state.

    ``rate`` is recent stored pages/s; ``done_rate`` recent outcomes/s (stored, failed or skipped),
    which is what the ETA divides by.
    """
    s = snap.stats
    state = str(s.get("state", CrawlState.UNKNOWN))
    header = Text.assemble(("crawl ", "dim"), (snap.crawl_id, "bold"), "  ",
                           (state, STATE_STYLE.get(state, "")), "  ",
                           (f"started {_when(s.get('started_at'))}", "dim"), "  ",
                           (f"elapsed {human_seconds(s.get('elapsed'))}", "dim"))
    if snap.seeds:
        more = f" (+{len(snap.seeds) - 1} more)" if len(snap.seeds) > 1 else ""
        header.append(f"\nseed {snap.seeds[0]}{more}", "dim")

    counters = Table(title="counters", title_justify="left", show_header=True, header_style="bold")
    names = ("scheduled", "stored", "failed", "skipped", "pending", "duplicates", "filtered", "retried",
             "reclaimed", "items")
    for name in names:
        counters.add_column(name, justify="right")
    counters.add_row(*(str(s.get(n, 0)) for n in names))

    avg = average_rate(s)
    pending = int(s.get("pending", 0))
    eta_rate = done_rate if done_rate is not None else rate
    speed = Table.grid(padding=(0, 3))
    speed.add_row(
        Text.assemble(("pages/s ", "dim"), (f"{rate:.1f}" if rate is not None else "-", "bold"),
                      (f" now, {avg:.1f} average", "dim")),
        Text.assemble(("in flight ", "dim"), (str(pending), "bold"), (f" pending, {snap.fetching} fetching", "dim")),
        Text.assemble(("ETA ", "dim"),
                      ("done" if snap.finished else human_seconds(eta_seconds(pending, eta_rate)), "bold"),
                      ("" if snap.finished else " for the URLs known so far", "dim")),
    )

    parts: list[RenderableType] = [header, counters, speed]
    if snap.failures:
        failures = Table(title="failures by reason", title_justify="left", header_style="bold")
        failures.add_column("reason")
        failures.add_column("count", justify="right")
        for reason, n in snap.failures.items():
            failures.add_row(reason, str(n))
        parts.append(failures)
    filtered = {k.removeprefix("filtered_"): v for k, v in s.items() if k.startswith("filtered_") and v}
    if filtered:
        parts.append(Text("filtered: " + ", ".join(f"{k} {v}" for k, v in sorted(filtered.items())), style="dim"))
    for kind in ("dropped", "failed"):  # the item processors' counts (crawltasks.stages.itempipes)
        per = {k.removeprefix(f"items_{kind}_"): v for k, v in s.items() if k.startswith(f"items_{kind}_") and v}
        if per:
            parts.append(Text(f"items {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(per.items())), style="dim"))
    if snap.hosts:
        hosts = Table(title="hosts (the gate is shared by every crawl)", title_justify="left", header_style="bold")
        hosts.add_column("host")
        hosts.add_column("in flight", justify="right")
        hosts.add_column("next request in", justify="right")
        hosts.add_column("back-off", justify="right")
        hosts.add_column("state")
        for h in snap.hosts[:MAX_HOSTS]:
            limit = f"/{h.limit}" if h.limit else ""
            hosts.add_row(h.host, f"{h.in_flight}{limit}", f"{h.wait:.2f}s" if h.wait else "now",
                          f"+{h.backoff:.2f}s" if h.backoff else "-", h.label)
        if len(snap.hosts) > MAX_HOSTS:
            hosts.caption = f"{len(snap.hosts) - MAX_HOSTS} more host(s)"
        parts.append(hosts)
    return Group(*parts)


def render_text(renderable: RenderableType, width: int = 120) -> str:
    """Plain text of a renderable (for logs, tests and pipes)."""
    console = Console(width=width, record=True, file=_NullFile(), color_system=None)
    console.print(renderable)
    return console.export_text()


class _NullFile:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def watch(crawl_id: str, interval: float = 1.0, console: Console | None = None, rt: Runtime | None = None,
          max_updates: int | None = None) -> Snapshot:
    """Keep the view of a crawl live until it finishes (or ``max_updates`` readings); returns the last."""
    rt = rt or runtime.current()
    console = console or Console()
    stored, done = RateMeter(), RateMeter()
    snap = snapshot(crawl_id, rt)
    stored.add(int(snap.stats.get("stored", 0)), snap.taken_at)
    done.add(snap.done, snap.taken_at)
    updates = 1
    with Live(render(snap), console=console, refresh_per_second=4, transient=False) as live:
        while not snap.finished and (max_updates is None or updates < max_updates):
            time.sleep(interval)
            snap = snapshot(crawl_id, rt)
            stored.add(int(snap.stats.get("stored", 0)), snap.taken_at)
            done.add(snap.done, snap.taken_at)
            updates += 1
            live.update(render(snap, stored.rate, done.rate))
    return snap


def list_rows(rt: Runtime | None = None) -> list[dict[str, Any]]:
    """Every crawl known to Redis with its state and main counters, oldest first; then the crawls
    whose Redis state was lost (MongoDB knows them: ``lost``), so that their id can be found."""
    from ..crawl import Crawl
    from ..storage.recovery import lost_crawls

    rt = rt or runtime.current()
    rows = []
    for crawl_id in rt.state.crawl_ids():
        stats = Crawl(crawl_id, rt).stats()
        rows.append({k: stats.get(k) for k in ("crawl_id", "state", "started_at", "finished_at", "elapsed",
                                                "scheduled", "stored", "failed", "pending", "stalled")}
                    | {"pages_per_s": round(average_rate(stats), 2)})
    return rows + lost_crawls(rt, {r["crawl_id"] for r in rows})


def render_list(rows: list[dict[str, Any]]) -> RenderableType:
    """``crawltasks list`` as a table."""
    if not rows:
        return Text("no crawls in Redis", style="dim")
    table = Table(header_style="bold")
    for name, justify in (("crawl id", "left"), ("state", "left"), ("started", "left"), ("elapsed", "right"),
                          ("stored", "right"), ("failed", "right"), ("pending", "right"), ("pages/s", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        state = str(r.get("state")) + (f" ({r['stalled']})" if r.get("stalled") else "")
        table.add_row(r["crawl_id"], Text(state, STATE_STYLE.get(state, "")), _when(r.get("started_at")),
                      human_seconds(r.get("elapsed")), _count(r.get("stored")), _count(r.get("failed")),
                      _count(r.get("pending")), f"{r.get('pages_per_s', 0):.1f}")
    return table


def _count(value: int | None) -> str:
    """A counter of ``list``; "-" where it is not known (a crawl whose counters Redis lost)."""
    return "-" if value is None else str(value)


def plain_list(rows: list[dict[str, Any]]) -> str:
    """``crawltasks list`` for pipes: one whitespace-separated line per crawl, full ids, no wrapping."""
    lines = [f"{'CRAWL_ID':<32} {'STATE':<11} {'STARTED':<19} {'ELAPSED':>8} {'STORED':>8} {'FAILED':>7} "
             f"{'PENDING':>8} {'PAGES/S':>8}"]
    for r in rows:
        lines.append(f"{r['crawl_id']:<32} {r.get('state')!s:<11} {_when(r.get('started_at')):<19} "
                     f"{human_seconds(r.get('elapsed')):>8} {_count(r.get('stored')):>8} {_count(r.get('failed')):>7} "
                     f"{_count(r.get('pending')):>8} {r.get('pages_per_s', 0):>8.1f}"
                     + (f"  {r['stalled']}" if r.get("stalled") else ""))
    return "\n".join(lines)
