"""What a fetch engine's pool threads do: the HTTP of one job, and a late request's turn at its host.

The control thread (``engine.py``) decides which job goes when; these run on the pool threads, so they
touch nothing of the engine but the events queue they report to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any

from ..http import sessions
from ..http.fetch import fetch_one
from ..http.robots import Robots
from ..models import PRIORITIES, Request
from ..ports import HostGate
from ..settings import CrawlOptions

START_SLACK = 0.02  # a request that starts later than this after its slot was asked for is late
LATE_TRIES = 3  # times a late request asks for its turn again when the process stalls once more


@dataclass
class Job:
    """One request in the engine, or the robots.txt download of an origin (``robots``)."""

    crawl_id: str
    request: Request
    host: str
    robots: str | None = None


def rank_of(job: Job) -> int:
    """0 for a robots.txt download or a high-priority request, 1 default, 2 low."""
    return 0 if job.robots is not None else PRIORITIES.index(job.request.priority)


def fetch_job(events: SimpleQueue, job: Job, token: str, options: CrawlOptions, robots: Robots,
               on_send: Callable[[bool], None]) -> None:
    """On a pool thread: the HTTP of one job; its outcome goes back to the control thread."""
    try:
        if job.robots is not None:
            outcome: Any = robots.download(job.robots, on_send)
        else:  # a crawl that keeps cookies: this thread's hops send and keep them (crawltasks.http.sessions)
            jar = sessions.jar_of(robots.rt, job.crawl_id) if options.cookie_jar else None
            with sessions.using(jar):
                outcome = fetch_one(job.request, options, on_send, rt=robots.rt)
    except BaseException as exc:  # noqa: BLE001 - fetch_one never raises; reported as this job's error
        outcome = exc
    events.put(("done", job, token, outcome))


def take_turn(gate: HostGate, host: str, delay: float, held: list[float]) -> None:
    """Before the first byte of a late request: wait for its turn if another start of the host was
    granted after its own (again, up to LATE_TRIES times, when the wait itself ran late). ``held``:
    when the request may start (here), the host's next start it set (gate), both updated."""
    for _ in range(LATE_TRIES):
        asked = time.monotonic()
        wait, held[1] = gate.late_start(host, delay, held[1])
        held[0] = asked + wait
        if wait > 0:
            time.sleep(wait)
        if time.monotonic() - held[0] <= START_SLACK:
            return
