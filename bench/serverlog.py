"""Politeness and load seen by the lab server, from its access log alone.

A line is ``server_addr end_epoch request_seconds client_port connection_id status bytes uri``
(bench/labserve.py); a request's start is its end minus its duration. From these:

* in flight at the server: the time-weighted mean over the span from the first start to the last end
  (total request time / span) and the maximum;
* per host, the gaps between consecutive request starts (robots.txt included): how many are shorter
  than ``tolerance`` x the delay (10 % slack for clock jitter), the minimum and the 1st percentile;
* per host, the moments it had more requests in flight than its concurrency: each start that raises
  the host's count above it is one violation. A request ending at the same instant another starts
  does not overlap it (nginx stamps both from the same millisecond clock).
* the politeness limit: the busiest host's request count x the delay, the shortest time a polite
  crawler can take (one host's requests cannot start closer than the delay).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EPS = 1e-6  # below the log's resolution: equal stamps are equal


@dataclass(frozen=True)
class Request:
    host: str
    start: float
    end: float
    uri: str
    status: int
    connection: str = ""
    client_port: int = 0


def parse_line(line: str) -> Request | None:
    """One access-log line, or None for a malformed one."""
    parts = line.rstrip("\n").split(" ", 7)
    if len(parts) != 8:
        return None
    host, end, took, port, conn, status, _bytes, uri = parts
    try:
        end_f, took_f = float(end), float(took)
        decimals = max(len(end.partition(".")[2]), len(took.partition(".")[2]))
        start = round(end_f - took_f, decimals)  # exact to the log's resolution, not float noise
        return Request(host, start, end_f, uri, int(status), conn, int(port) if port.isdigit() else 0)
    except ValueError:
        return None


def read_log(path: Path) -> list[Request]:
    if not Path(path).exists():
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return [r for r in map(parse_line, f) if r is not None]


def max_in_flight(intervals: Iterable[tuple[float, float]]) -> int:
    """Most intervals open at once; an interval ending when another starts does not overlap it."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # -1 sorts first
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def over_limit(intervals: list[tuple[float, float]], limit: int) -> int:
    """Starts that raise the number in flight above ``limit``."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = count = 0
    for _, step in events:
        now += step
        if step == 1 and now > limit:
            count += 1
    return count


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def analyze(requests: list[Request], delay: float, concurrency: int, tolerance: float = 0.9) -> dict[str, Any]:
    """Everything the broad-crawl table shows about the server side of one crawl."""
    if not requests:
        return {"requests": 0}
    by_host: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        by_host[r.host].append(r)
    first, last = min(r.start for r in requests), max(r.end for r in requests)
    span = last - first
    gaps: list[float] = []
    gap_violations = concurrency_violations = host_peak = 0
    for reqs in by_host.values():
        starts = sorted(r.start for r in reqs)
        host_gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        gaps += host_gaps
        gap_violations += sum(1 for g in host_gaps if g < tolerance * delay - EPS)
        intervals = [(r.start, r.end) for r in reqs]
        concurrency_violations += over_limit(intervals, concurrency)
        host_peak = max(host_peak, max_in_flight(intervals))
    busiest_host, busiest = max(((h, len(v)) for h, v in by_host.items()), key=lambda kv: (kv[1], kv[0]))
    statuses = Counter(r.status for r in requests)
    min_gap, p1_gap = (min(gaps), percentile(gaps, 1)) if gaps else (None, None)
    return {
        "requests": len(requests),
        "robots_requests": sum(1 for r in requests if r.uri.split("?", 1)[0] == "/robots.txt"),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "hosts": len(by_host),
        "connections": len({(r.host, r.connection) for r in requests}),
        "busiest_host": busiest_host,
        "busiest_host_requests": busiest,
        "limit_seconds": round(busiest * delay, 3),
        "span_seconds": round(span, 3),
        "mean_in_flight": round(sum(r.end - r.start for r in requests) / span, 2) if span > 0 else 0.0,
        "max_in_flight": max_in_flight([(r.start, r.end) for r in requests]),
        "gap_threshold": round(tolerance * delay, 6),
        "gap_violations": gap_violations,
        "concurrency_violations": concurrency_violations,
        "max_host_in_flight": host_peak,
        "min_gap": None if min_gap is None else round(min_gap, 4),
        "p1_gap": None if p1_gap is None else round(p1_gap, 4),
        "gaps": len(gaps),
    }
