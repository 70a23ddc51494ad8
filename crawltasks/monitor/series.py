"""A crawl's outcomes over time, written by the FINISH script (``crawltasks.backends.redis.lua``) where pages are
counted done, and read here: for the dashboard's chart, its "pages/s now", the metrics and the
failure-rate alert.

One Redis hash per crawl (``Keys.series``), bounded whatever the crawl's length, in two parts:

* **recent**: a ring of ``RING`` buckets of ``WIDTH`` seconds (the last 15 minutes), field
  ``r<slot>`` = ``"<bucket> <stored> <failed> <skipped>"``; a slot reused for a newer bucket starts
  over. Rates "now" and the alert's last minute read a few of these.
* **life**: at most ``LIFE`` buckets from the crawl's first outcome, ``WIDTH`` seconds wide at first;
  when the crawl outgrows them, neighbours are merged in pairs and the width doubles (a three-day
  crawl ends with ~20-minute buckets). Fields ``t0`` (start), ``w`` (width), ``l<i>`` =
  ``"<stored> <failed> <skipped>"``. The chart draws these.

Times are Redis' own clock (``TIME``), so machines whose clocks disagree still write one series.
Cost per FINISH call (a batch of pages, not a page): five hash commands inside the script already
running, and once per doubling a merge of ``LIFE`` fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

WIDTH = 10  # seconds per bucket (recent ring; the life tier's first width)
RING = 90  # recent buckets kept: 15 minutes
LIFE = 360  # life buckets at most: one hour at 10 s, then merged in pairs


@dataclass(frozen=True)
class Bucket:
    """Outcomes counted done between ``start`` and ``start + width`` (epoch seconds)."""

    start: float
    width: float
    stored: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def done(self) -> int:
        return self.stored + self.failed + self.skipped


@dataclass(frozen=True)
class Window:
    """Totals over the last ``span`` seconds (``span`` is 0 when nothing can be said yet)."""

    stored: int
    failed: int
    skipped: int
    span: float

    def rate(self, what: str = "stored") -> float | None:
        """Per second over the window; None when the window is empty."""
        if self.span <= 0:
            return None
        value = self.stored + self.failed + self.skipped if what == "done" else getattr(self, what)
        return value / self.span

    @property
    def failure_rate(self) -> float | None:
        """Failed among stored + failed (skips are neither); None without outcomes."""
        total = self.stored + self.failed
        return self.failed / total if total else None


def _ints(text: str | bytes) -> list[int]:
    if isinstance(text, bytes):
        text = text.decode()
    return [int(x) for x in text.split()]


def life(raw: dict[str, str]) -> list[Bucket]:
    """The whole-life buckets in time order, empty ones included (a gap in the chart is a zero)."""
    if "t0" not in raw or "w" not in raw:
        return []
    t0, width = float(raw["t0"]), float(raw["w"])
    filled = {int(k[1:]): _ints(v) for k, v in raw.items() if k.startswith("l") and k[1:].isdigit()}
    if not filled:
        return []
    out = []
    for i in range(max(filled) + 1):
        s, f, k = filled.get(i, (0, 0, 0))
        out.append(Bucket(t0 + i * width, width, s, f, k))
    return out


def ring_fields(now: float, count: int) -> list[tuple[int, str]]:
    """The (bucket, field) of the last ``count`` recent buckets up to the one holding ``now``."""
    last = int(now // WIDTH)
    count = max(1, min(count, RING))
    return [(b, f"r{b % RING}") for b in range(last - count + 1, last + 1)]


def window(values: Sequence[str | bytes | None], fields: Sequence[tuple[int, str]], now: float,
           started_at: float | None = None) -> Window:
    """Totals of the ring ``values`` read for ``fields`` (``ring_fields``); a slot holding another
    bucket counts nothing. The span runs from the first bucket's start (or the crawl's start, if
    later) to ``now``, so the bucket under way counts for the part of it that has passed."""
    s = f = k = 0
    for (bucket, _), value in zip(fields, values, strict=True):
        if not value:
            continue
        b, vs, vf, vk = _ints(value)
        if b == bucket:
            s, f, k = s + vs, f + vf, k + vk
    begin = fields[0][0] * WIDTH if fields else now
    if started_at:
        begin = max(begin, started_at)
    return Window(s, f, k, max(0.0, now - begin))


def recent_from(raw: dict[str, str], now: float, seconds: float, started_at: float | None = None) -> Window:
    """``window`` over a whole series hash already read."""
    fields = ring_fields(now, math.ceil(seconds / WIDTH))
    return window([raw.get(name) for _, name in fields], fields, now, started_at)


def rates(buckets: Iterable[Bucket]) -> list[tuple[float, float, float]]:
    """(bucket middle, stored per second, failed per second) for a chart."""
    return [(b.start + b.width / 2, b.stored / b.width, b.failed / b.width) for b in buckets]


def clip(buckets: Sequence[Bucket], start: float | None, end: float | None) -> list[Bucket]:
    """The buckets cut to the time the crawl ran (from its start to its finish, or now): a crawl of
    two seconds shows its rate over two seconds, not diluted over a whole bucket."""
    out = []
    for b in buckets:
        lo = max(b.start, start) if start else b.start
        hi = min(b.start + b.width, end) if end else b.start + b.width
        out.append(Bucket(lo, hi - lo, b.stored, b.failed, b.skipped) if hi - lo >= 1.0 else b)
    return out


def record(raw: dict[str, str], now: float, stored: int, failed: int, skipped: int) -> None:
    """Count outcomes done at ``now`` into a series hash held in memory, as FINISH does in Redis (the
    twin registry's write; ``lua.FINISH`` is the one that runs on Redis): the ring slot of the bucket,
    restarted if it held an older one, and the life bucket, merging pairs while the crawl outgrows ``LIFE``."""
    now = int(now)  # Redis' TIME seconds
    b = now // WIDTH
    slot = f"r{b % RING}"
    cur = _ints(raw[slot]) if slot in raw else [b - 1, 0, 0, 0]
    s, f, k = cur[1:] if cur[0] == b else (0, 0, 0)
    raw[slot] = f"{b} {s + stored} {f + failed} {k + skipped}"
    if "t0" not in raw:
        raw["t0"], raw["w"] = str(b * WIDTH), str(WIDTH)
    t0, w = int(float(raw["t0"])), int(float(raw["w"]))
    while (now - t0) // w >= LIFE:  # outgrown: neighbours merge in pairs, the width doubles
        merged: dict[int, list[int]] = {}
        for j in range(LIFE):
            value = raw.pop(f"l{j}", None)
            if value is not None:
                m = merged.setdefault(j // 2, [0, 0, 0])
                for n, x in enumerate(_ints(value)):
                    m[n] += x
        raw.update({f"l{h}": " ".join(map(str, m)) for h, m in merged.items()})
        w *= 2
        raw["w"] = str(w)
    field = f"l{(now - t0) // w}"
    s, f, k = _ints(raw[field]) if field in raw else (0, 0, 0)
    raw[field] = f"{s + stored} {f + failed} {k + skipped}"
