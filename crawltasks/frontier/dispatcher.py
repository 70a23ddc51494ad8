"""The dispatcher: requests of ready hosts leave the frontier as fetch chains, as fast as the fetch
workers absorb them.

One worker process at a time dispatches (it holds the leader lock "dispatcher", ``rt.leader``, whose
short TTL lets another take over within seconds if it dies). Each round it reads the live fetch
capacity from the heartbeats, takes no more than that minus what is already out (taken and not yet
fetched), and sends the requests in batches to the fetch queue of their priority, through the
process's sender (``rt.sender``). The broker thus holds only work that can start at once; nothing
waits in it for a busy host.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

from ..models import PRIORITIES
from ..runtime import Runtime
from ..states import CrawlState
from .politeness import crawl_policy
from .queues import Entry

log = logging.getLogger("crawltasks")

LOCK = "dispatcher"  # the leader lock's name
LOCK_TTL = 5.0  # seconds: a dead dispatcher is replaced within this
TAKE_AT_MOST = 1024  # requests one take hands out
IDLE_WAIT = 0.1  # seconds between looks when no crawl is running
FULL_WAIT = 0.01  # seconds between looks when the fetch workers are full
EARLY = 0.1  # a host's next request leaves this long before its delay ends (the gate starts it on time)
TICK = 0.02  # between rounds: hosts ready meanwhile leave in one batch, and a host whose fetch just
# ended (it waited for a slot) is looked at again within this


def batches(entries: Sequence[Entry], size: int) -> list[tuple[str, list[Entry]]]:
    """(priority, batch) pairs: each priority's taken requests cut into batches of ``size``."""
    by_priority: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_priority[entry[1]].append(entry)
    return [(p, by_priority[p][i:i + size]) for p in PRIORITIES for i in range(0, len(by_priority[p]), size)]


# send(crawl_id, priority, batch): one fetch task for taken requests, on its priority's queue
# (``Sender.send_batch``; a plain function in the policy's tests)
SendBatch = Callable[[str, str, list[Entry]], None]


def dispatch_round(rt: Runtime, send: SendBatch, crawl_ids: Sequence[str], room: int,
                   high_only: bool = False) -> tuple[int, float]:
    """Take up to ``room`` ready requests over the crawls and send them, high-priority batches of
    every crawl first; returns (sent, seconds until a host becomes ready when nothing more is, at
    most TICK). ``high_only``: a round for the high-priority requests alone."""
    taken: list[tuple[str, int, list[tuple[str, list[Entry]]]]] = []
    total, wait = 0, TICK
    for crawl_id in crawl_ids:
        if room - total <= 0:
            break
        options = rt.options(crawl_id)
        got = rt.frontier.take(crawl_id, min(room - total, TAKE_AT_MOST), crawl_policy(options), high_only, EARLY)
        taken.append((crawl_id, options.batch_size, batches(got.entries, options.batch_size)))
        total += len(got.entries)
        if got.next_ready is not None:
            wait = min(wait, got.next_ready)
    for priority in PRIORITIES:
        for crawl_id, _, parts in taken:
            for p, batch in parts:
                if p == priority:
                    send(crawl_id, p, batch)
    return total, wait


class Dispatcher:
    """A daemon thread that dispatches while this process holds the dispatcher lock."""

    def __init__(self, rt: Runtime) -> None:
        self.rt, self.send = rt, rt.sender.send_batch
        self._stop = threading.Event()
        self._turn = 0
        self._thread = threading.Thread(target=self._run, name="crawltasks-dispatcher", daemon=True)

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(Exception):  # let another worker take over at once (Redis away: it expires)
            self.rt.leader.release(LOCK, self.rt.heartbeat.id)

    def leading(self) -> bool:
        """Take or keep the dispatcher's lock for LOCK_TTL; True while this process holds it."""
        return self.rt.leader.hold(LOCK, self.rt.heartbeat.id, LOCK_TTL)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.step() if self.leading() else 1.0
            except Exception as exc:  # noqa: BLE001 - Redis or the broker away: look again soon
                log.warning("dispatcher: %r", exc)
                wait = 1.0
            if wait:
                self._stop.wait(wait)

    def step(self) -> float:
        """One round over the running crawls; returns how long to wait before the next."""
        crawls = self.running_crawls()
        if not crawls:
            return IDLE_WAIT
        _, capacity = self.rt.fleet().read()
        outstanding, with_high = self.rt.frontier.outstanding(crawls)
        room = capacity - outstanding
        if room <= 0:
            return FULL_WAIT
        if with_high:  # high-priority requests of every crawl leave first, the rest next round
            sent, _ = dispatch_round(self.rt, self.send, with_high, room, high_only=True)
            if sent:
                return TICK
        self._turn = (self._turn + 1) % len(crawls)  # crawls side by side take turns at going first
        sent, wait = dispatch_round(self.rt, self.send, crawls[self._turn:] + crawls[:self._turn], room)
        if sent >= min(room, TAKE_AT_MOST):
            return 0.0  # more may be ready at once
        return max(TICK, wait) if sent else wait

    def running_crawls(self) -> list[str]:
        """Crawls that may be dispatched now; cancelled ones have their queues dropped here."""
        ids = self.rt.state.active_crawls()
        out = []
        for crawl_id, state in zip(ids, self.rt.state.states_of(ids), strict=True):
            if state == CrawlState.RUNNING:
                out.append(crawl_id)
            elif state == CrawlState.CANCELLING and self.rt.frontier.sizes(crawl_id).queued:
                self.rt.frontier.drop_queued(crawl_id)
                self.rt.state.check_finished(crawl_id)
        return out
