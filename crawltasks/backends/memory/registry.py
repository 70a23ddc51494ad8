"""The crawl registry in memory: the twin of ``RedisState`` (the ``CrawlRegistry`` port), the Lua of
``crawltasks.backends.redis.lua`` (FINISH, CONTROL, REDRIVE, RETIRE, REOPEN) step by step in Python under one lock,
which stands for a script's atomicity. Contract: ``tests/test_registry_contract.py``.

Where it differs, on purpose: the Bloom filter is an exact set (no false positives; its size is
only checked for agreement, as the bitmap's is); what expires (a retired crawl's state, the visit
index, notification marks) is gone when next touched after its time on ``clock`` (wall time by
default: start and finish times and visits are epoch seconds, as Redis gives them); FINISH's time
series and per-host counts are not kept (those reads stay Redis-only). Given a ``MemoryFrontier``,
it shares that frontier's counters and exact seen-sets, as both write the crawl's stats hash and
seen-set in Redis, and ``finish`` ends the tickets' claims there; the frontier itself takes no
lock, so only the registry's own steps are atomic then.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...ports import SeenFilter
from ...settings import retention_option
from ...states import CrawlState
from ..redis.bloom import BloomParams
from ..redis.registry import COUNTERS, GENERATION, HOLD, OUTCOMES, PRUNE_BATCH, SUMMARY_FACTOR
from .frontier import MemoryFrontier
from .raw import MemoryRedis


@dataclass
class _Crawl:
    """A crawl's keys: meta, outcomes, the seen-set and the Bloom filter (its counters are apart)."""

    meta: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    bloom: set[str] = field(default_factory=set)
    bloom_params: tuple[int, int] | None = None
    working_until: float | None = None  # retired: the working state (not meta, stats) expires then
    summary_until: float | None = None  # retired: meta and stats expire then


class MemoryBloom:
    """A crawl's Bloom filter, as an exact set: the ``SeenFilter`` twin of ``bloom.BloomFilter``."""

    def __init__(self, registry: MemoryRegistry, crawl_id: str, params: BloomParams) -> None:
        self.registry, self.crawl_id, self.params = registry, crawl_id, params

    def check_and_add(self, fingerprints: Sequence[str], dont_filter: Sequence[bool] | None = None,
                      stats_key: str | None = None) -> list[bool]:
        """As ``BloomFilter.check_and_add``; any ``stats_key`` counts into the crawl's counters."""
        if not fingerprints:
            return []
        force = dont_filter or [False] * len(fingerprints)
        reg = self.registry
        with reg._lock:
            c = reg._crawl(self.crawl_id)
            size = (self.params.bits, self.params.hashes)
            if c.bloom_params is None:
                c.bloom_params = size
            elif c.bloom_params != size:
                raise ValueError(f"bloom filter of {self.crawl_id} has m, k = {c.bloom_params}, asked for {size}")
            flags = []
            for fp, forced in zip(fingerprints, force, strict=True):
                new = fp not in c.bloom
                c.bloom.add(fp)
                flags.append(new or forced)
            if stats_key:
                new = sum(flags)
                reg._count(self.crawl_id, scheduled=new, pending=new, duplicates=len(flags) - new)
            return flags

    def contains(self, fingerprints: Sequence[str]) -> list[bool]:
        with self.registry._lock:
            bloom = self.registry._crawl(self.crawl_id).bloom
            return [fp in bloom for fp in fingerprints]

    def add(self, fingerprint: str) -> bool:
        return self.check_and_add([fingerprint])[0]


class MemoryRegistry:
    """Every crawl's record, state and counters in one process; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.time, frontier: MemoryFrontier | None = None) -> None:
        self.clock = clock
        self.frontier = frontier
        self._counters: dict[str, dict[str, int]] = frontier.counters if frontier is not None else {}
        self._crawls: dict[str, _Crawl] = {}
        self._started: dict[str, float] = {}  # the registry: crawl -> start time
        self._active: set[str] = set()
        self._visited: dict[str, dict[str, float]] = {}  # spider -> fp -> when stored
        self._visited_until: dict[str, float] = {}
        self._marks: dict[tuple[str, str], tuple[str, float]] = {}  # (crawl, event) -> (value, until)
        self._lock = threading.RLock()
        self.r = MemoryRedis(clock)  # the raw client's leftovers (robots, sessions, revisits), as ``RedisState.r``

    def _crawl(self, crawl_id: str) -> _Crawl:
        """The crawl's keys as Redis would show them now: those past their expiry are gone."""
        c = self._crawls.setdefault(crawl_id, _Crawl())
        now = self.clock()
        if c.summary_until is not None and now >= c.summary_until:
            c = self._crawls[crawl_id] = _Crawl()
            self._counters.pop(crawl_id, None)
        elif c.working_until is not None and now >= c.working_until:
            c.outcomes, c.seen, c.bloom, c.bloom_params, c.working_until = {}, set(), set(), None, None
            if self.frontier is not None:
                self.frontier.seen.pop(crawl_id, None)
        return c

    def _seen(self, crawl_id: str) -> set[str]:
        """The crawl's exact seen-set: the frontier's, when the registry shares one (one key in Redis)."""
        c = self._crawl(crawl_id)
        return c.seen if self.frontier is None else self.frontier.seen.setdefault(crawl_id, set())

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

    # --- counters and completion ----------------------------------------------------------------
    def incr(self, crawl_id: str, **counts: int) -> None:
        with self._lock:
            self._crawl(crawl_id)
            self._count(crawl_id, **counts)

    def stats(self, crawl_id: str) -> dict[str, int]:
        with self._lock:
            self._crawl(crawl_id)
            return {**dict.fromkeys(COUNTERS, 0), **self._counters.get(crawl_id, {})}

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str, str]]) -> tuple[int, bool]:
        """FINISH, then ``retire`` when the crawl finished now."""
        outcomes = list(outcomes)
        for _, outcome, _ in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            c, done = self._crawl(crawl_id), 0
            for ticket, outcome, lease in outcomes:
                if lease and self.frontier is not None:
                    self.frontier.release(crawl_id, [lease])
                if ticket not in c.outcomes:
                    c.outcomes[ticket] = outcome
                    self._count(crawl_id, **{outcome: 1})
                    done += 1
            self._count(crawl_id, pending=-done)
            finished = self._complete(c, self._counters.get(crawl_id, {}).get("pending", 0))
        if finished:
            self.retire(crawl_id)
        return done, finished

    def _complete(self, c: _Crawl, pending: int) -> bool:
        """FINISH's end: lost, finished (or cancelled) now, or not yet."""
        meta = c.meta
        if "started_at" not in meta or pending < 0:
            meta["state"] = CrawlState.LOST
            return False
        cancelling = meta.get("state") == CrawlState.CANCELLING
        if pending > 0 or (HOLD in meta and not cancelling) or "finished_at" in meta:
            return False
        meta["finished_at"] = format(self.clock(), ".14g")  # Lua's number to string
        meta["state"] = CrawlState.CANCELLED if cancelling else CrawlState.FINISHED
        return True

    def check_finished(self, crawl_id: str) -> bool:
        return self.finish(crawl_id, [])[1]

    def outcome_of(self, crawl_id: str, ticket: str) -> str | None:
        with self._lock:
            return self._crawl(crawl_id).outcomes.get(ticket)

    # --- dedupe -----------------------------------------------------------------------------------
    def seen_already(self, crawl_id: str, fps: Sequence[str]) -> list[bool]:
        with self._lock:
            seen = self._seen(crawl_id)
            return [fp in seen for fp in fps]

    def claim_seen(self, crawl_id: str, fp: str, bloom: SeenFilter | None = None) -> bool:
        if bloom is not None:
            return bloom.add(fp)
        with self._lock:
            seen = self._seen(crawl_id)
            new = fp not in seen
            seen.add(fp)
            return new

    def bloom_filter(self, crawl_id: str, capacity: int, error_rate: float) -> MemoryBloom:
        return MemoryBloom(self, crawl_id, BloomParams.for_capacity(capacity, error_rate))

    # --- crawls not finished, retries, retention ----------------------------------------------------
    def active_crawls(self) -> list[str]:
        with self._lock:
            return sorted(self._active)

    def forget_active(self, crawl_id: str) -> None:
        with self._lock:
            self._active.discard(crawl_id)

    def redrive(self, crawl_id: str, tickets: Sequence[str]) -> list[bool]:
        """REDRIVE; a crawl that runs again is reopened."""
        if not tickets:
            return []
        with self._lock:
            self._active.add(crawl_id)
            c = self._crawl(crawl_id)
            flags = []
            for ticket in tickets:
                flags.append(c.outcomes.get(ticket) == "failed")
                if flags[-1]:
                    del c.outcomes[ticket]
            n = sum(flags)
            if n:
                self._count(crawl_id, failed=-n, pending=n, redriven=n)
                c.meta.pop("finished_at", None)
                c.meta["state"] = CrawlState.RUNNING
        if n:
            self.reopen(crawl_id)
        return flags

    def retention_of(self, crawl_id: str) -> float:
        return retention_option(self.crawl_options(crawl_id))

    def retire(self, crawl_id: str) -> bool:
        """RETIRE: the working state expires after the retention, meta and stats SUMMARY_FACTOR times later."""
        with self._lock:
            retention = self.retention_of(crawl_id)
            c = self._crawl(crawl_id)
            finished = "finished_at" in c.meta
            if retention > 0:
                if not finished:
                    return False
                now = self.clock()
                c.working_until, c.summary_until = now + retention, now + retention * SUMMARY_FACTOR
                self.prune_crawls()
            if finished:
                self._active.discard(crawl_id)
            else:  # retention 0: Redis takes it out of the active set and puts it back
                self._active.add(crawl_id)
            return finished

    def prune_crawls(self, limit: int = PRUNE_BATCH) -> int:
        with self._lock:
            return len(self._expired(self._oldest(limit)))

    # --- visits across crawls ------------------------------------------------------------------------
    def _visits(self, spider: str, now: float) -> dict[str, float]:
        until = self._visited_until.get(spider)
        if until is not None and now >= until:
            self._visited.pop(spider, None)
            self._visited_until.pop(spider, None)
        return self._visited.setdefault(spider, {})

    def mark_visited(self, spider: str, fps: Sequence[str], ttl: float) -> None:
        if not fps:
            return
        with self._lock:
            now = self.clock()
            index = self._visits(spider, now)
            index.update(dict.fromkeys(fps, now))
            if ttl > 0:
                for fp in [fp for fp, at in index.items() if at < now - ttl]:
                    del index[fp]
                self._visited_until[spider] = now + max(1, int(ttl * 1000)) / 1000

    def visited_at(self, spider: str, fps: Sequence[str]) -> list[float | None]:
        with self._lock:
            index = self._visits(spider, self.clock())
            return [index.get(fp) for fp in fps]

    # --- notification marks ------------------------------------------------------------------------------
    def _mark(self, crawl_id: str, event: str) -> tuple[str, float] | None:
        mark = self._marks.get((crawl_id, event))
        if mark is not None and self.clock() >= mark[1]:
            del self._marks[(crawl_id, event)]
            return None
        return mark

    def mark_once(self, crawl_id: str, event: str, value: str, ttl: float) -> bool:
        with self._lock:
            if self._mark(crawl_id, event) is not None:
                return False
            self._marks[(crawl_id, event)] = (value, self.clock() + max(1, int(ttl * 1000)) / 1000)
            return True

    def update_mark(self, crawl_id: str, event: str, value: str) -> None:
        with self._lock:
            mark = self._mark(crawl_id, event)
            if mark is not None:
                self._marks[(crawl_id, event)] = (value, mark[1])

    def mark_of(self, crawl_id: str, event: str) -> str | None:
        with self._lock:
            mark = self._mark(crawl_id, event)
            return mark[0] if mark is not None else None

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
            self._started.pop(crawl_id, None)
            self._active.discard(crawl_id)
            for key in [k for k in self._marks if k[0] == crawl_id]:
                del self._marks[key]
