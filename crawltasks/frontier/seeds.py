"""Seeds that keep coming: a ``start_requests()`` of any length, endless included, and seeds pushed
to a running crawl (``Crawl.add``, ``crawltasks add``).

A crawl whose seeds may still come is *held open*: its meta has an ``open`` field, and the FINISH
script does not finish it while that is there, even at ``pending`` 0 between two chunks. A long
generator is consumed in the calling process by a ``Feeder`` thread, a chunk at a time, only when
the crawl's frontier runs low (backpressure): it lets go when the generator ends, the crawl reaches
``max_pages``, or the crawl ends or is cancelled. A crawl started with ``feed=True`` stays open
until ``Crawl.close()`` (``crawltasks close``); a cancelled crawl finishes whatever holds it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Iterator

from .. import logs
from ..backends.redis.registry import HOLD
from ..models import Request
from ..runtime import Runtime
from ..states import ENDED, STOPPING
from .schedule import schedule

CHUNK = 256  # seeds taken from a generator at a time
LOW = 64  # the frontier's queued requests under which the feeder takes the next chunk
LOOK_EVERY = 0.05  # seconds between looks at the frontier
OPEN = HOLD  # the meta field that holds a crawl open: "seeds" (a feeder) or "feed" (pushed seeds)


def first_chunk(seeds: Iterable[Request]) -> tuple[list[Request], Iterator[Request] | None]:
    """The first CHUNK seeds, and the rest to feed later (None when there is no more)."""
    it = iter(seeds)
    first = list(itertools.islice(it, CHUNK))
    return first, (it if len(first) == CHUNK else None)


def hold(rt: Runtime, crawl_id: str, why: str) -> None:
    """Keep the crawl from finishing while its seeds may still come."""
    rt.state.hold_open(crawl_id, why)


def release(rt: Runtime, crawl_id: str) -> bool:
    """No more seeds: the crawl finishes once nothing is pending. True if it was held open."""
    was_open = rt.state.drop_hold(crawl_id)
    rt.state.check_finished(crawl_id)
    return was_open


def held_open(rt: Runtime, crawl_id: str) -> str | None:
    return rt.state.held_open(crawl_id)


def add(rt: Runtime, crawl_id: str, seeds: Iterable[str | Request]) -> int:
    """Schedule more seeds in a crawl (a finished one runs again); returns how many were new."""
    requests = [s if isinstance(s, Request) else Request(url=s) for s in seeds]
    if rt.state.is_finished(crawl_id) and requests:
        rt.state.reopen(crawl_id)
    new = schedule(rt.state, rt.frontier, crawl_id, requests, rt.options(crawl_id), rt.caches.known)
    rt.state.check_finished(crawl_id)
    return new


class Feeder:
    """A daemon thread of the calling process that schedules a generator's seeds as the crawl needs them."""

    def __init__(self, rt: Runtime, crawl_id: str, rest: Iterator[Request], release_at_end: bool = True) -> None:
        self.rt, self.crawl_id, self.rest, self.release_at_end = rt, crawl_id, rest, release_at_end
        self.fed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"seeds-{crawl_id}", daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self._wanted():
                if self.rt.frontier.sizes(self.crawl_id).queued >= LOW:
                    self._stop.wait(LOOK_EVERY)
                    continue
                chunk = list(itertools.islice(self.rest, CHUNK))
                if chunk:
                    schedule(self.rt.state, self.rt.frontier, self.crawl_id, chunk, self.rt.options(self.crawl_id),
                             self.rt.caches.known)
                    self.fed += len(chunk)
                if len(chunk) < CHUNK:
                    break
        except Exception as exc:  # noqa: BLE001 - the spider's generator: the crawl goes on with what it has
            logs.event("seeds.error", logging.ERROR, crawl_id=self.crawl_id, message=f"{type(exc).__name__}: {exc}")
        finally:
            if self.release_at_end and not self._stop.is_set():
                release(self.rt, self.crawl_id)

    def _wanted(self) -> bool:
        """False once the crawl ended, is being cancelled, or has scheduled max_pages requests."""
        state = self.rt.state.state_of(self.crawl_id)
        if state in STOPPING | ENDED:
            return False
        cap = self.rt.options(self.crawl_id).max_pages
        return not cap or self.rt.state.stats(self.crawl_id)["scheduled"] < cap
