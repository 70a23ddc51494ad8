"""Webhook notifications, in the spirit of Spidermon: a crawl with the ``notify`` option (a URL) gets
a JSON summary POSTed when it finishes, and an alert when the share of failed requests over the last
minute reaches ``notify_failure_rate``.

Sent from the workers: the store stage calls ``observe`` after every batch. A crawl without a webhook
costs a dict lookup there. With one, each process looks at the failure rate at most every
CHECK_EVERY seconds (a few ring slots of the crawl's time series, ``crawltasks.monitor.series``), and the
looking and sending happen on one background thread per process, with a short timeout, so a dead
webhook never holds up a store task. Each event is sent at most once across the fleet: the first
process to SET NX its marker in Redis sends it (a process killed in that instant loses it: at most
once, never twice). Redirects are not followed. The URL is configuration, not crawled content, so
unlike crawled links it may point at loopback or a private address.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import logs

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("crawltasks")

TIMEOUT = 5.0  # seconds a webhook may take to answer
CHECK_EVERY = 5.0  # seconds between two failure-rate looks at one crawl, per process
WINDOW = 60.0  # seconds of outcomes the failure rate is taken over
MIN_OUTCOMES = 10  # stored + failed within the window before a rate means anything
MARK_TTL = 24 * 3600.0  # a marker's life: a crawl failing for days is alerted about once a day at most
FINISHED, ALERT = "finished", "failure_rate"


def observe(rt: Runtime, crawl_id: str, finished: bool) -> None:
    """After a store batch: queue a look at the failure rate (at most every CHECK_EVERY s) and, when
    the batch finished the crawl, its summary. Never raises, never waits."""
    try:
        if not rt.options(crawl_id).notify:
            return
        now = time.monotonic()
        if not finished and now < _next_check.get(crawl_id, 0.0):
            return
        if len(_next_check) > 1000:
            _next_check.clear()
        _next_check[crawl_id] = now + CHECK_EVERY
        _notifier().submit(rt, crawl_id, finished)
    except Exception as exc:  # noqa: BLE001 - a notification never costs a batch
        log.warning("notify: %r", exc)


def run(rt: Runtime, crawl_id: str, finished: bool) -> None:
    """The alert if the failure rate calls for one, then (``finished``) the summary; each once."""
    options = rt.options(crawl_id)
    if not options.notify:
        return
    check_failure_rate(rt, crawl_id, options.notify, options.notify_failure_rate)
    if finished:
        event = finish_event(rt, crawl_id)
        if event and rt.state.mark_once(crawl_id, event, f"sending {os.getpid()}", MARK_TTL):
            rt.state.update_mark(crawl_id, event, post(options.notify, finish_payload(rt, crawl_id)))


def check_failure_rate(rt: Runtime, crawl_id: str, url: str, threshold: float) -> bool:
    """Alert once when failed / (stored + failed) over the last WINDOW s reaches ``threshold``."""
    meta = rt.state.crawl_meta(crawl_id)
    started = float(meta["started_at"]) if "started_at" in meta else None
    _, [window] = rt.activity.recent([crawl_id], WINDOW, [started])
    rate = window.failure_rate
    if rate is None or window.stored + window.failed < MIN_OUTCOMES or rate < threshold:
        return False
    if not rt.state.mark_once(crawl_id, ALERT, f"sending {os.getpid()}", MARK_TTL):
        return False
    reasons = _failure_counts(rt, crawl_id)
    top = ", ".join(f"{r} {n}" for r, n in list(reasons.items())[:3])
    payload = {
        "event": "crawl.failure_rate", "crawl_id": crawl_id, "failure_rate": round(rate, 4),
        "threshold": threshold, "window_seconds": WINDOW, "stored": window.stored, "failed": window.failed,
        "failures": reasons,
        "text": (f"crawl {crawl_id}: {rate:.0%} of requests failed over the last minute "
                 f"({window.failed} of {window.stored + window.failed}; alert at {threshold:.0%})"
                 + (f"; so far {top}" if top else "")),
    }
    rt.state.update_mark(crawl_id, ALERT, post(url, payload))
    return True


def finish_event(rt: Runtime, crawl_id: str) -> str | None:
    """The marker name of this finish (a crawl continued and finished again finishes anew)."""
    finished_at = rt.state.crawl_meta(crawl_id).get("finished_at")
    return f"{FINISHED}:{finished_at}" if finished_at else None


def finish_payload(rt: Runtime, crawl_id: str) -> dict[str, Any]:
    """What a finished crawl's webhook receives: its counters, failures by reason and a line of text."""
    from ..crawl import Crawl
    from .progress import average_rate, human_seconds

    stats = Crawl(crawl_id, rt).stats()
    reasons = _failure_counts(rt, crawl_id)
    rate = average_rate(stats)
    text = (f"crawl {crawl_id} {stats['state']} in {human_seconds(stats.get('elapsed'))}: "
            f"{stats['stored']} stored, {stats['failed']} failed, {stats['skipped']} skipped ({rate:.1f} pages/s)"
            + (" - " + ", ".join(f"{r} {n}" for r, n in list(reasons.items())[:5]) if reasons else ""))
    return {"event": "crawl.finished", "crawl_id": crawl_id, "state": stats["state"], "stats": stats,
            "failures": reasons, "pages_per_s": round(rate, 3), "text": text}


def _failure_counts(rt: Runtime, crawl_id: str) -> dict[str, int]:
    from .watch import failure_counts

    return failure_counts(rt, crawl_id)


def post(url: str, payload: dict[str, Any], timeout: float = TIMEOUT) -> str:
    """POST the JSON once, redirects not followed; returns how it went ("sent 200", "failed: ...").
    The URL is never logged whole (a webhook URL is often its own secret): only its host."""
    import requests

    host = urlsplit(url).hostname or "?"
    try:
        resp = requests.post(url, json=payload, timeout=timeout, allow_redirects=False,
                             headers={"User-Agent": "crawltasks-notify/0.1"})
        resp.close()
    except requests.RequestException as exc:
        outcome = f"failed: {type(exc).__name__}"
    else:
        outcome = f"sent {resp.status_code}" if resp.status_code < 300 else f"failed: HTTP {resp.status_code}"
    ok = outcome.startswith("sent")
    logs.event("notify.sent" if ok else "notify.failed", logging.INFO if ok else logging.WARNING,
               crawl_id=payload.get("crawl_id"), event=payload.get("event"), host=host, outcome=outcome)
    return outcome


def settle(rt: Runtime, crawl_id: str, timeout: float = TIMEOUT + 2) -> None:
    """For a command about to stop its workers once the crawl finished: wait until the finish
    notification has gone out (sent here if no worker took it up within a second), so that the
    thread sending it is not stopped half-way."""
    if not rt.options(crawl_id).notify:
        return
    event = finish_event(rt, crawl_id)
    deadline = time.monotonic() + timeout
    grace = time.monotonic() + 1.0
    while event and time.monotonic() < deadline:
        mark = rt.state.mark_of(crawl_id, event)
        if mark is not None and not mark.startswith("sending"):
            return
        if mark is None and time.monotonic() >= grace:
            run(rt, crawl_id, finished=True)
            return
        time.sleep(0.05)


# --- the background thread of a process ------------------------------------------------------------
_next_check: dict[str, float] = {}
_lock = threading.Lock()
_current: Notifier | None = None


class Notifier:
    """One daemon thread that runs queued looks and sends; a full queue drops (it is only monitoring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.Queue[tuple[Runtime, str, bool]] = queue.Queue(maxsize=256)
        self.thread = threading.Thread(target=self._work, name="crawltasks-notify", daemon=True)
        self.thread.start()

    def submit(self, rt: Runtime, crawl_id: str, finished: bool) -> None:
        with contextlib.suppress(queue.Full):
            self.jobs.put_nowait((rt, crawl_id, finished))

    def _work(self) -> None:
        while True:
            rt, crawl_id, finished = self.jobs.get()
            try:
                run(rt, crawl_id, finished)
            except Exception as exc:  # noqa: BLE001 - Redis or Mongo away: the next look tries again
                log.warning("notify: %s: %r", crawl_id, exc)


def _notifier() -> Notifier:
    """This process's notifier (a new one after a fork: threads are not copied)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = Notifier()
        return _current
