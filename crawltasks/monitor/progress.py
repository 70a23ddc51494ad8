"""How far a crawl is: recent rates, an ETA, and the progress bar (or line) of ``crawltasks crawl``.
Pure arithmetic over successive ``Crawl.stats()`` readings: nothing here touches a service."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from ..states import ENDED, CrawlState

RATE_WINDOW = 10.0  # seconds of samples behind the "recent" pages/s
OVER = ENDED | {CrawlState.LOST}  # a view of the crawl stops following it then


class RateMeter:
    """Pages per second over a recent window, from successive counter readings (no clocks in Redis)."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, value: int, at: float | None = None) -> float | None:
        """Record a reading; returns the recent rate, or None until two readings span some time."""
        at = time.monotonic() if at is None else at
        self.samples.append((at, value))
        while len(self.samples) > 2 and at - self.samples[1][0] >= self.window:
            self.samples.popleft()
        return self.rate

    @property
    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        if t1 - t0 <= 0:
            return None
        return max(0.0, (v1 - v0) / (t1 - t0))


def average_rate(stats: dict[str, Any]) -> float:
    """Stored pages per second since the crawl started."""
    elapsed = float(stats.get("elapsed") or 0)
    return int(stats.get("stored", 0)) / elapsed if elapsed > 0 else 0.0


def eta_seconds(pending: int, rate: float | None) -> float | None:
    """Time to finish the URLs known so far at ``rate`` outcomes/s; None when it cannot be told.

    A crawl discovers URLs as it goes, so this is a lower bound that moves, not a promise.
    """
    if pending <= 0:
        return 0.0
    if not rate or rate <= 0:
        return None
    return pending / rate


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"



# --- the progress bar of `crawltasks crawl` -------------------------------------------------------
def progress_line(stats: dict[str, Any], rate: float | None, done_rate: float | None = None) -> str:
    """The same numbers as the bar, as one line (for logs and pipes)."""
    done = int(stats.get("stored", 0)) + int(stats.get("failed", 0)) + int(stats.get("skipped", 0))
    pending = int(stats.get("pending", 0))
    shown = rate if rate is not None else average_rate(stats)
    return (f"{stats.get('crawl_id')}: {done}/{stats.get('scheduled', 0)} done  stored {stats.get('stored', 0)}  "
            f"failed {stats.get('failed', 0)}  in flight {pending}  {shown:.1f} pages/s  "
            f"ETA {human_seconds(eta_seconds(pending, done_rate if done_rate is not None else rate))}"
            + (f"  {stats['stalled']}" if stats.get("stalled") else ""))


class CrawlProgress:
    """A progress callback for ``Crawl.wait``: a rich bar on a terminal, a line every few seconds otherwise.

    Use as a context manager; call the instance with each ``Crawl.stats()`` reading.
    """

    def __init__(self, quiet: bool = False, stream: TextIO | None = None, line_every: float = 5.0) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.line_every = line_every
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.meter = RateMeter()
        self.done_meter = RateMeter()
        self._last_line = 0.0
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> Callable[[dict[str, Any]], None]:
        if not self.quiet and self.tty:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("{task.completed}/{task.total} done"),
                TextColumn("stored {task.fields[stored]}  failed {task.fields[failed]}  "
                           "in flight {task.fields[pending]}"),
                TextColumn("{task.fields[rate]} pages/s  ETA {task.fields[eta]}"),
                console=Console(file=self.stream), transient=False, refresh_per_second=4,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, stats: dict[str, Any]) -> None:
        if self.quiet:
            return
        rate = self.meter.add(int(stats.get("stored", 0)))
        done = int(stats.get("stored", 0)) + int(stats.get("failed", 0)) + int(stats.get("skipped", 0))
        done_rate = self.done_meter.add(done)
        pending = int(stats.get("pending", 0))
        if self._progress is not None:
            fields = dict(stored=stats.get("stored", 0), failed=stats.get("failed", 0), pending=pending,
                          rate=f"{rate:.1f}" if rate is not None else "-",
                          eta=stats.get("stalled") or human_seconds(eta_seconds(pending, done_rate)))
            if self._task is None:
                self._task = self._progress.add_task(str(stats.get("crawl_id")), total=stats.get("scheduled") or 1,
                                                     completed=done, **fields)
            else:
                self._progress.update(self._task, total=max(1, int(stats.get("scheduled", 0))), completed=done,
                                      **fields)
            return
        now = time.monotonic()
        if now - self._last_line >= self.line_every or stats.get("state") in OVER:
            self._last_line = now
            print(progress_line(stats, rate, done_rate), file=self.stream, flush=True)
