"""A crawl's record in the memory registry: the keys Redis would hold for it (expiring on ``clock``),
its state and control steps, and the registry of crawls. The state every part of ``MemoryRegistry``
shares lives here, under one lock that stands for a Lua script's atomicity."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...states import CrawlState
from ..redis.registry import GENERATION, HOLD
from .frontier import MemoryFrontier


@dataclass
class CrawlKeys:
    """A crawl's keys: meta, outcomes, the seen-set and the Bloom filter (its counters are apart)."""

    meta: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    bloom: set[str] = field(default_factory=set)
    bloom_params: tuple[int, int] | None = None
    series: dict[str, str] = field(default_factory=dict)  # FINISH's time series (``monitor.series``)
    host_done: dict[str, int] = field(default_factory=dict)  # "s:<host>" / "f:<host>" -> outcomes there
    working_until: float | None = None  # retired: the working state (not meta, stats) expires then
    summary_until: float | None = None  # retired: meta and stats expire then


class CrawlRecords:
    """Every crawl's record and state, and the helpers the other steps share; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.time, frontier: MemoryFrontier | None = None) -> None:
        self.clock = clock
        self.frontier = frontier
        self._counters: dict[str, dict[str, int]] = frontier.counters if frontier is not None else {}
        self._crawls: dict[str, CrawlKeys] = {}
        self._started: dict[str, float] = {}  # the registry: crawl -> start time
        self._active: set[str] = set()
        self._visited: dict[str, dict[str, float]] = {}  # spider -> fp -> when stored
        self._visited_until: dict[str, float] = {}
        self._marks: dict[tuple[str, str], tuple[str, float]] = {}  # (crawl, event) -> (value, until)
        self._lock = threading.RLock()

    def _crawl(self, crawl_id: str) -> CrawlKeys:
        """The crawl's keys as Redis would show them now: those past their expiry are gone."""
        c = self._crawls.setdefault(crawl_id, CrawlKeys())
        now = self.clock()
        if c.summary_until is not None and now >= c.summary_until:
            c = self._crawls[crawl_id] = CrawlKeys()
            self._counters.pop(crawl_id, None)
        elif c.working_until is not None and now >= c.working_until:
            c.outcomes, c.seen, c.bloom, c.bloom_params, c.working_until = {}, set(), set(), None, None
            c.series, c.host_done = {}, {}
            if self.frontier is not None:
                self.frontier.seen.pop(crawl_id, None)
                self.frontier.hosts.pop(crawl_id, None)
        return c

    def _count(self, crawl_id: str, **counts: int) -> None:
        stats = self._counters.setdefault(crawl_id, {})
        for name, n in counts.items():
            if n:
                stats[name] = stats.get(name, 0) + n

    # --- the registry -------------------------------------------------------------------------
    def create_crawl(self, crawl_id: str, options: dict[str, Any], seeds: Sequence[str]) -> bool:
        with self._lock:
            c = self._crawl(crawl_id)
            if "started_at" in c.meta:
                return False
            now = self.clock()
            c.meta.update(started_at=repr(now), options=json.dumps(options), state=CrawlState.RUNNING,
                          seeds=json.dumps(list(seeds)))
            self._started[crawl_id] = now
            self._active.add(crawl_id)
            return True

    def crawl_options(self, crawl_id: str) -> dict[str, Any] | None:
        raw = self.crawl_meta(crawl_id).get("options")
        return json.loads(raw) if raw else None

    def crawl_meta(self, crawl_id: str) -> dict[str, str]:
        with self._lock:
            return {k: str(v) for k, v in self._crawl(crawl_id).meta.items()}

    def crawl_ids(self) -> list[str]:
        with self._lock:
            ids = self._oldest(len(self._started))
            gone = self._expired(ids)
            return [c for c in ids if c not in gone]

    def _oldest(self, n: int) -> list[str]:
        return sorted(self._started, key=lambda c: (self._started[c], c))[:n]

    def _expired(self, ids: Sequence[str]) -> set[str]:
        gone = {c for c in ids if not self._crawl(c).meta}
        for crawl_id in gone:
            self._started.pop(crawl_id, None)
        return gone

    def reopen(self, crawl_id: str) -> None:
        with self._lock:
            c = self._crawl(crawl_id)
            c.meta.pop("finished_at", None)
            c.meta["state"] = CrawlState.RUNNING
            c.working_until = c.summary_until = None
            self._active.add(crawl_id)

    def is_finished(self, crawl_id: str) -> bool:
        with self._lock:
            return "finished_at" in self._crawl(crawl_id).meta

    def hold_open(self, crawl_id: str, why: str) -> None:
        with self._lock:
            self._crawl(crawl_id).meta[HOLD] = why

    def drop_hold(self, crawl_id: str) -> bool:
        with self._lock:
            return self._crawl(crawl_id).meta.pop(HOLD, None) is not None

    def held_open(self, crawl_id: str) -> str | None:
        with self._lock:
            return self._crawl(crawl_id).meta.get(HOLD)

    def active_crawls(self) -> list[str]:
        with self._lock:
            return sorted(self._active)

    def forget_active(self, crawl_id: str) -> None:
        with self._lock:
            self._active.discard(crawl_id)

    # --- control --------------------------------------------------------------------------------------------
    def control(self, crawl_id: str, from_states: Sequence[str], to_state: str) -> bool:
        """CONTROL (its from-states travel comma-joined: the same split here)."""
        allowed = ",".join(from_states).split(",")
        with self._lock:
            meta = self._crawl(crawl_id).meta
            if meta.get("state", "") not in allowed:
                return False
            meta["state"] = to_state
            return True

    def state_of(self, crawl_id: str) -> str:
        with self._lock:
            return str(self._crawl(crawl_id).meta.get("state", ""))

    def states_of(self, crawl_ids: Sequence[str]) -> list[str]:
        return [self.state_of(c) for c in crawl_ids]

    def state_and_generation(self, crawl_id: str) -> tuple[str, str]:
        with self._lock:
            meta = self._crawl(crawl_id).meta
            return str(meta.get("state", "")), str(meta.get(GENERATION, ""))

    def finished_times(self, crawl_ids: Sequence[str]) -> list[float | None]:
        with self._lock:
            stamps = [self._crawl(c).meta.get("finished_at") for c in crawl_ids]
            return [float(s) if s else None for s in stamps]

    def delete_crawl(self, crawl_id: str) -> None:
        """Its keys, counters and marks, registry and active entries (the frontier's queues stay)."""
        with self._lock:
            self._crawls.pop(crawl_id, None)
            self._counters.pop(crawl_id, None)
            if self.frontier is not None:
                self.frontier.seen.pop(crawl_id, None)
                self.frontier.hosts.pop(crawl_id, None)
            self._started.pop(crawl_id, None)
            self._active.discard(crawl_id)
            for key in [k for k in self._marks if k[0] == crawl_id]:
                del self._marks[key]
