"""What the workers share about themselves, in memory: the twins of ``backends.redis.fleet``
(``Outages``, ``LeaderLock``; contracts: ``tests/test_outages_contract.py``,
``tests/test_leader_contract.py``). Thread-safe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class MemoryOutages:
    """Service -> since when; ``clock`` gives epoch seconds (the table is shown as times of day)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.down: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, service: str) -> None:
        with self._lock:
            self.down.setdefault(service, self.clock())

    def clear(self, service: str) -> None:
        with self._lock:
            self.down.pop(service, None)

    def current(self) -> dict[str, float]:
        with self._lock:
            return dict(self.down)

    def ping(self) -> None:
        """Memory always answers."""


class MemoryLeaderLock:
    """Name -> (holder, expiry on ``clock``, seconds); one past its expiry is free."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.locks: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _holder(self, name: str) -> str | None:
        holder, until = self.locks.get(name, (None, 0.0))
        return holder if holder is not None and self.clock() < until else None

    def hold(self, name: str, holder: str, ttl: float) -> bool:
        with self._lock:
            if self._holder(name) not in (None, holder):
                return False
            self.locks[name] = (holder, self.clock() + max(0.001, ttl))
            return True

    def release(self, name: str, holder: str) -> bool:
        with self._lock:
            if self._holder(name) != holder:
                return False
            del self.locks[name]
            return True

    def holder(self, name: str) -> str | None:
        with self._lock:
            return self._holder(name)
