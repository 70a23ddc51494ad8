"""The reclaimer: requests whose worker died go back to the frontier within seconds.

A request taken from the frontier holds a claim until it is finished: unowned while its message
waits in the broker, then owned by the worker process handling it (``liveness`` tells which are
alive; a fetch engine claims the requests in its hands again every few seconds, so one it lost
track of goes back as if its worker had died). Celery redelivers a task whose pool child died, but
a message taken by a worker that died whole waits for the broker's visibility timeout (hours), and
one lost with a broker restart never comes back. So every worker runs this loop: a claim whose
owner stopped heart-beating or stopped renewing it, an unowned one nobody took up within
``dispatch_lease()``, or one older than the crawl's ``lease_time`` (a hung worker) goes back to the
front of its host's queue. A loss with a dead worker is counted in the request when the worker was
fetching it or working on it (its claim *hot*, see ``custody``), so a page that kills its worker
every time ends ``worker_lost`` instead of looping, while the pages that merely waited in that worker
go back unmarked. The store's upsert and the once-only finish make a duplicate harmless.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

from ..runtime import Runtime, current
from ..states import CrawlState
from .liveness import dead_after

log = logging.getLogger("crawltasks")

RECLAIM_STATES = (CrawlState.RUNNING, CrawlState.CANCELLING)  # a paused crawl's claims are given back by its workers


def reclaim_interval() -> float:
    return float(os.environ.get("CRAWLTASKS_RECLAIM_INTERVAL", "5"))


def dispatch_lease() -> float:
    """Seconds a dispatched request may wait in the broker before it is sent again (its first
    message, if it ever arrives, finds its claim gone and is dropped)."""
    return float(os.environ.get("CRAWLTASKS_DISPATCH_LEASE", "10"))


def stage_queues_empty() -> bool:
    """True when no parse or store message waits in the broker. Then a request handed on between
    two stages long ago has lost its message (taken off the queue by a worker that died before the
    broker recorded it as unacknowledged), rather than waiting its turn behind others."""
    from .app import app, celeryconfig

    try:
        with app.connection_for_read() as conn:
            return not any(_waiting(conn, name) for name in (celeryconfig.PARSE_QUEUE, celeryconfig.STORE_QUEUE))
    except Exception as exc:  # noqa: BLE001 - a broker away: assume busy, reclaim nothing on this ground
        log.debug("stage queues: %r", exc)
        return False


def _waiting(conn: Any, queue: str) -> int:
    """Messages waiting in ``queue``; a queue the broker does not know holds none (Redis keeps no key
    for an empty one). A channel of its own: a refused declare closes it on AMQP."""
    channel = conn.channel()
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except conn.channel_errors as exc:
        if getattr(exc, "code", None) == 404 or "NOT_FOUND" in str(exc):
            return 0
        raise
    finally:
        with contextlib.suppress(Exception):
            channel.close()


def reclaim_crawl(rt: Runtime, crawl_id: str, live: set[str], stages_idle: bool = False) -> int:
    """Put the crawl's lost claims back in the frontier; returns how many. ``stages_idle``: no stage
    message waits in the broker (``stage_queues_empty``)."""
    state = rt.state
    if state.state_of(crawl_id) not in RECLAIM_STATES:
        if state.is_finished(crawl_id):
            state.retire(crawl_id)  # its finisher died before doing so: its keys still need their expiry
        return 0
    back = rt.frontier.reclaim(crawl_id, live, dispatch_lease(), rt.options(crawl_id).lease_time,
                               renew_within=dead_after(), handoff_within=dispatch_lease() if stages_idle else 0.0)
    if back:
        log.warning("crawl %s: %d request(s) lost with their worker or message; back in the frontier",
                    crawl_id, back, extra={"crawl_id": crawl_id})
        state.incr(crawl_id, reclaimed=back)
    return back


def reclaim_all(rt: Runtime) -> int:
    live, _ = rt.fleet().read()
    total = 0
    crawls = rt.state.active_crawls()
    idle = bool(crawls) and stage_queues_empty()
    for crawl_id in crawls:
        try:
            total += reclaim_crawl(rt, crawl_id, live, idle)
        except LookupError:  # a crawl deleted meanwhile
            continue
    return total


class Reclaimer:
    """A daemon thread running reclaim_all every interval, until stopped."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = reclaim_interval() if interval is None else interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crawltasks-reclaimer", daemon=True)

    def start(self) -> Reclaimer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                reclaim_all(current())
            except Exception as exc:  # noqa: BLE001 - Redis away for a while: try again next round
                log.warning("reclaimer: %r", exc)
