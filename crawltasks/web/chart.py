"""The chart of a crawl's life as inline SVG: stored pages/s and failures/s per bucket of its time
series (``crawltasks.monitor.series``), drawn as steps so a bucket reads as what it is, a count over its
width. No JavaScript and no library: the page refreshes it with the rest of its sections.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from xml.sax.saxutils import escape

from ..monitor.series import Bucket

WIDTH, HEIGHT = 920, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 34
STORED_COLOR, FAILED_COLOR = "#2a7ab8", "#c9302c"


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (an axis' top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def _clock(ts: float, span: float) -> str:
    return time.strftime("%m-%d %H:%M" if span > 86400 else "%H:%M:%S", time.localtime(ts))


def _steps(buckets: Sequence[Bucket], value: str, x: Callable[[float], float], y: Callable[[float], float]) -> str:
    """An SVG path of horizontal steps, one per bucket, at its rate of ``value`` per second."""
    parts = []
    for b in buckets:
        level = y(getattr(b, value) / b.width)
        parts.append(f"{'M' if not parts else 'L'}{x(b.start):.1f},{level:.1f} H{x(b.start + b.width):.1f}")
    return " ".join(parts)


def svg(buckets: Sequence[Bucket], width_s: float | None = None) -> str:
    """The chart of these buckets (the crawl's whole life, ``width_s`` seconds each but where cut to
    the crawl's run), or a note when there is nothing yet."""
    if not buckets:
        return (f'<svg class="chart" viewBox="0 0 {WIDTH} 60" role="img" aria-label="no outcomes yet">'
                f'<text x="{WIDTH / 2}" y="35" text-anchor="middle" class="muted">no outcomes yet</text></svg>')
    t0, t1 = buckets[0].start, buckets[-1].start + buckets[-1].width
    span = max(t1 - t0, 1.0)
    top = nice_ceiling(max(max(b.stored, b.failed) / b.width for b in buckets))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    def y(rate: float) -> float:
        return TOP + plot_h - rate / top * plot_h

    width_s = width_s or max(b.width for b in buckets)
    label = (f"stored pages/s and failures/s, {len(buckets)} buckets of {width_s:g} s; "
             f"peak {max(b.stored / b.width for b in buckets):.1f} pages/s")
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">']
    for frac in (0.0, 0.5, 1.0):  # horizontal grid and the y axis' labels
        yy = y(top * frac)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{WIDTH - RIGHT}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{top * frac:g}</text>')
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        out.append(f'<text x="{x(t0 + span * frac):.1f}" y="{HEIGHT - 10}" text-anchor="{anchor}">'
                   f"{escape(_clock(t0 + span * frac, span))}</text>")
    out.append(f'<path d="{_steps(buckets, "stored", x, y)}" fill="none" stroke="{STORED_COLOR}" '
               'stroke-width="2" class="stored"/>')
    out.append(f'<path d="{_steps(buckets, "failed", x, y)}" fill="none" stroke="{FAILED_COLOR}" '
               'stroke-width="1.5" class="failed"/>')
    out.append(f'<text x="{LEFT}" y="16" fill="{STORED_COLOR}">&#9632; stored pages/s</text>')
    out.append(f'<text x="{LEFT + 150}" y="16" fill="{FAILED_COLOR}">&#9632; failures/s</text>')
    out.append(f'<text x="{WIDTH - RIGHT}" y="16" text-anchor="end" class="muted">'
               f"{width_s:g} s buckets</text></svg>")
    return "".join(out)
