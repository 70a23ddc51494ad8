"""The reclaimer: requests whose lease expired unfinished are sent again.

Celery redelivers a task whose pool child died, but a message taken by a worker that died whole
waits for the broker's visibility timeout (hours), and one lost with a broker restart never comes
back. Every request in flight holds a lease in Redis; workers run this loop and re-send what
nobody finished. The store's upsert and the once-only finish make a duplicate harmless.
"""

from __future__ import annotations

import logging
import os
import threading

from .frontier import Sender, dispatch
from .models import Request
from .runtime import Runtime, current

log = logging.getLogger("crawltasks")

RECLAIM_STATES = ("running", "cancelling")  # a paused crawl's leases wait for resume


def reclaim_interval() -> float:
    return float(os.environ.get("CRAWLTASKS_RECLAIM_INTERVAL", "15"))


def reclaim_crawl(rt: Runtime, crawl_id: str, send: Sender) -> int:
    """Re-send the crawl's requests whose lease expired; returns how many."""
    state = rt.state
    if state.state_of(crawl_id) not in RECLAIM_STATES:
        if state.is_finished(crawl_id):
            state.forget_active(crawl_id)
        return 0
    options = rt.options(crawl_id)
    expired = [Request.from_dict(r) for r in state.reclaim(crawl_id, 3 * options.lease_time)]
    if expired:
        log.warning("crawl %s: %d request(s) outlived their lease; sending them again", crawl_id, len(expired),
                    extra={"crawl_id": crawl_id})
        state.incr(crawl_id, reclaimed=len(expired))
        dispatch(crawl_id, expired, options.batch_size, send)
    return len(expired)


def reclaim_all(rt: Runtime, send: Sender) -> int:
    total = 0
    for crawl_id in rt.state.active_crawls():
        try:
            total += reclaim_crawl(rt, crawl_id, send)
        except LookupError:  # a crawl deleted meanwhile
            continue
    return total


class Reclaimer:
    """A daemon thread running reclaim_all every interval, until stopped."""

    def __init__(self, send: Sender, interval: float | None = None) -> None:
        self.send = send
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
                reclaim_all(current(), self.send)
            except Exception as exc:  # noqa: BLE001 - Redis away for a while: try again next round
                log.warning("reclaimer: %r", exc)
