"""The crawl registry in memory: the twin of ``RedisState`` (the ``CrawlRegistry`` port), the Lua of
``crawltasks.backends.redis.lua`` (FINISH, CONTROL, REDRIVE, RETIRE, REOPEN) step by step in Python under one lock,
which stands for a script's atomicity. Contract: ``tests/test_registry_contract.py``. Its parts, by
concern: ``crawls.py`` (records, state, control), ``completion.py`` (counters, FINISH, REDRIVE,
RETIRE), ``seen.py`` (seen-set, Bloom filter, visits, notification marks) and ``activity.py`` (the
``CrawlActivity`` reads: time series, per-host outcomes, hosts).

Where it differs, on purpose: the Bloom filter is an exact set (no false positives; its size is
only checked for agreement, as the bitmap's is); what expires (a retired crawl's state, the visit
index, notification marks) is gone when next touched after its time on ``clock`` (wall time by
default: start and finish times and visits are epoch seconds, as Redis gives them); per-host
outcomes and the hosts of a crawl are known only with a ``MemoryFrontier`` (its claims name the
host, as Redis' claims do for FINISH). Given a ``MemoryFrontier``,
it shares that frontier's counters and exact seen-sets, as both write the crawl's stats hash and
seen-set in Redis, and ``finish`` ends the tickets' claims there; the frontier itself takes no
lock, so only the registry's own steps are atomic then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..redis.registry import GENERATION
from .activity import ActivityReads
from .completion import CrawlCompletion
from .frontier import MemoryFrontier
from .seen import MemoryBloom, SeenMarks

__all__ = ["MemoryBloom", "MemoryRegistry"]


class MemoryRegistry(CrawlCompletion, SeenMarks, ActivityReads):
    """Every crawl's record, state and counters in one process; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.time, frontier: MemoryFrontier | None = None) -> None:
        super().__init__(clock, frontier)

    # --- the rebuild of a lost crawl (storage.recovery) ---------------------------------------------
    def mark_rebuilt(self, crawl_id: str, started_at: float | None) -> None:
        with self._lock:
            meta = self._crawl(crawl_id).meta
            meta[GENERATION] = repr(self.clock())
            if started_at is not None:
                meta["started_at"] = repr(float(started_at))

    def restore_outcomes(self, crawl_id: str, outcomes: Sequence[tuple[str, str]], seen: Sequence[str]) -> None:
        with self._lock:
            self._crawl(crawl_id).outcomes.update(outcomes)
            self._seen(crawl_id).update(seen)

    def restore_counts(self, crawl_id: str, counts: dict[str, int]) -> None:
        with self._lock:
            self._crawl(crawl_id)
            self._counters.setdefault(crawl_id, {}).update(counts)
