"""The supervisor of ``crawltasks crawl``'s worker processes: a clean copy of the command, forked
before the command starts a thread or connects to anything, whose only job is to fork the workers
and to fork a replacement when one dies.

A worker can die of what it runs: a spider calling ``os._exit``, a parser that crashes the
interpreter, the OOM killer. The command forks no replacement itself, because by then it has
threads (a fork copies only the calling thread, and a lock another thread held stays held for ever
in the copy). The zygote has none, so each copy it makes is as clean as the first. A replacement
first tells the fleet that its predecessor is dead, so the requests it held go back to the frontier
at once (a page that killed it is counted as lost once, see ``custody``), not after a heartbeat's
silence. A worker that dies while it works is restarted however often (the pages that kill it end
``worker_lost`` after ``max_worker_lost`` deaths each, so the crawl moves on); but workers that die
before they are ready (a crash loop: the spider cannot be loaded, the broker refuses) are not
restarted for ever: after a few in a row the zygote stops restarting, says why, and exits once no
worker is left.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

MAX_FAILED_STARTS = 5  # workers in a row dead before they were ready, after which none is restarted
BACKOFF = 0.1  # seconds before a restart, doubled for each failed start in a row ...
BACKOFF_MAX = 2.0  # ... up to this


@dataclass
class Slot:
    """One worker process of the N: which one it is, and since when it runs."""

    index: int
    started: float
    generation: int = 0


def exit_reason(code: int) -> str:
    """``exit code 1`` or ``killed by SIGKILL``, from ``os.waitstatus_to_exitcode``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class Zygote:
    """Forks ``processes`` workers (``start(index, generation, predecessor)`` forks one and returns
    its pid; the worker calls ``mark_ready(index)`` once it consumes) and keeps them running until
    SIGTERM, which it passes on to each for a warm stop. ``report`` gets a line for each death."""

    def __init__(self, processes: int, start: Callable[[int, int, int | None], int],
                 report: Callable[[str], None]) -> None:
        self.processes, self.start, self.report = processes, start, report
        self.running: dict[int, Slot] = {}  # pid -> its slot
        self.stopping = False
        self.gave_up = False
        self.failed_starts = 0
        self.ready = mmap.mmap(-1, processes)  # shared with the workers: a byte each, set once ready

    def mark_ready(self, index: int) -> None:
        """In a worker: it consumes now; dying from here on is not a failed start."""
        self.ready[index] = 1

    def run(self) -> int:
        """Until every worker has exited: 0 after a stop asked for, 1 when they died and stayed dead."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for index in range(self.processes):
            self._fork(Slot(index, 0.0), None)
        while self.running:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            slot = self.running.pop(pid, None)
            if slot is not None and not self.stopping:
                self._died(slot, pid, os.waitstatus_to_exitcode(status))
        if not self.stopping:
            self.report("no local worker process is left")
        return 0 if self.stopping else 1

    def _stop(self, signum: int, frame: object) -> None:
        """A warm stop: no more restarts; each worker finishes what it holds and leaves."""
        self.stopping = True
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _died(self, slot: Slot, pid: int, code: int) -> None:
        ready = self.ready[slot.index] == 1
        self.failed_starts = 0 if ready else self.failed_starts + 1
        lived = time.monotonic() - slot.started
        what = (f"local worker {slot.index} (pid {pid}) died ({exit_reason(code)}) "
                f"{f'after {lived:.1f} s' if ready else 'before it was ready'}")
        if self.gave_up:
            self.report(f"{what}; not restarted")
            return
        if self.failed_starts >= MAX_FAILED_STARTS:
            self.gave_up = True
            self.report(f"{what}: {self.failed_starts} workers in a row died before they were ready, so none "
                        "is restarted any more (the workers' log says why they die)")
            return
        time.sleep(min(BACKOFF_MAX, BACKOFF * 2 ** self.failed_starts))  # a SIGTERM meanwhile is seen below
        if self.stopping:
            return
        new = self._fork(Slot(slot.index, 0.0, slot.generation + 1), pid)
        self.report(f"{what}; restarted it (pid {new})")

    def _fork(self, slot: Slot, predecessor: int | None) -> int:
        slot.started = time.monotonic()
        self.ready[slot.index] = 0
        pid = self.start(slot.index, slot.generation, predecessor)
        self.running[pid] = slot
        if self.stopping:  # the stop came while it was being forked: it gets its SIGTERM too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        return pid


def fork(target: Callable[[], int], parent: int) -> int:
    """Run ``target`` in a forked copy that dies with ``parent`` (this process); returns its pid. The
    copy leaves with ``os._exit``: the objects it was copied with (the parent's clients and servers'
    handles) must not be finalized there, or it would close what belongs to the parent."""
    from .embedded import die_with_parent

    for stream in (sys.stdout, sys.stderr):  # what is buffered is printed once, not by each copy
        stream.flush()
    stops = {signal.SIGTERM, signal.SIGINT}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # held until the copy's handlers are in place
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid
    code = 1
    try:
        for sig in stops:  # not the parent's handlers: until the target sets its own, a stop ends it
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        die_with_parent(parent)  # whatever kills the parent, even SIGKILL, takes this copy with it
        code = target()
    except BaseException:  # noqa: BLE001 - reported in the log; the parent sees the exit code
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
