"""Crawls run to their end in this process on a twin runtime, with no Celery, Redis, MongoDB or socket.

The driver stands where the broker and the workers' services stand, and nothing else: the real
dispatcher's round (``Dispatcher.step``) sends fetch batches through the runtime's sender, which
records them (``MemorySender``); the driver then runs each recorded message as a worker runs its task
(``worker.tasks.fetch_batch``, ``parse_results``, ``store_parsed``), JSON in between as on the
broker. Fetches go through the real fetch engine (its thread, the gate, robots.txt, retries) over the
runtime's transport (a ``MockTransport``). Completion is the crawl's own counters'.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...crawl import Crawl
from ...frontier.dispatcher import Dispatcher
from ...runtime import Runtime
from ...worker import tasks
from .sender import FETCH, PARSE, MemorySender, json_round_trip


class TwinDriver:
    """Delivers a twin runtime's messages and dispatches its crawls, one step at a time."""

    def __init__(self, rt: Runtime) -> None:
        if not isinstance(rt.sender, MemorySender):
            raise TypeError("a TwinDriver needs a runtime whose sender records (twin_runtime)")
        self.rt, self.sender = rt, rt.sender
        self.dispatcher = Dispatcher(rt)  # its rounds only: one driver is the only dispatcher
        self.delivered = 0

    def run(self, crawl: Crawl, timeout: float = 30.0) -> bool:
        """Drive until the crawl is finished (True, as ``Crawl.wait``) or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while not self.rt.state.is_finished(crawl.id):
            if time.monotonic() >= deadline:
                return False
            self.step(min(1.0, deadline - time.monotonic()))
        self.deliver()  # what the last store left behind (nothing, unless a hook sent more)
        return crawl.wait(timeout=0)

    def run_until(self, done: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Drive until ``done()`` holds (True) or ``timeout`` seconds pass (False): what a test
        awaits of a running crawl (so many pages stored, a fetch that must not come)."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() >= deadline:
                return False
            self.step(min(0.05, max(deadline - time.monotonic(), 0.001)))
        return True

    def step(self, most: float = 1.0) -> None:
        """Deliver what was sent; if nothing was, dispatch a round, then wait (up to the round's
        answer, ``most`` at most) for the engine or the round to send something."""
        self.rt.heartbeat.beat()
        if self.deliver():
            return
        wait = self.dispatcher.step()
        if self.deliver():
            return
        self.sender.wait_for(lambda s: len(s.sent) > self.delivered, timeout=min(max(wait, 0.001), most))

    def deliver(self) -> int:
        """Run every message sent since the last call, in order, as the workers would; how many."""
        n = 0
        while self.delivered < len(self.sender.sent):
            message = self.sender.sent[self.delivered]
            self.delivered += 1
            n += 1
            if message.task == FETCH:
                tasks.fetch_batch(self.rt, *message.payload)
            elif message.task == PARSE:
                parsed = tasks.parse_results(self.rt, *message.payload)
                tasks.store_parsed(self.rt, *json_round_trip([parsed]))  # the chain's next step, as Celery passes it
        return n

    def close(self) -> None:
        """Stop the fetch engine (it gives back what it has not started)."""
        if self.rt.engine is not None:
            self.rt.engine.stop()
            self.rt.engine = None
        self.deliver()


def run_crawl(rt: Runtime, crawl: Crawl, timeout: float = 30.0) -> bool:
    """Run ``crawl`` (started on ``rt``, a twin runtime) to its end here; True if it finished."""
    driver = TwinDriver(rt)
    try:
        return driver.run(crawl, timeout)
    finally:
        driver.close()
