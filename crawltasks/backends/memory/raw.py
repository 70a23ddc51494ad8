"""The few raw Redis commands still called outside the ports, in memory: the twin's ``r`` (as
``RedisState.r``), so that robots.txt caching, cookie jars, revisit validators, the ``Dedupe`` item
processor and the outage table run on the twins too.

Only the commands those callers use, with redis-py's answers (bytes back, ints for counts); keys
given an expiry are gone once past it on ``clock``. Anything else raises ``AttributeError``: a new
caller of the raw client should get a port method, not a wider stand-in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any


def _b(value: Any) -> bytes:
    """A value as Redis keeps it: bytes (numbers as their decimal text)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode()


class MemoryRedis:
    """Strings and hashes with expiries; thread-safe (the fetch engine's threads share it)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._data: dict[str, Any] = {}
        self._until: dict[str, float] = {}
        self._lock = threading.RLock()

    def _get(self, key: str) -> Any:
        if key in self._until and self.clock() >= self._until[key]:
            self._data.pop(key, None)
            del self._until[key]
        return self._data.get(key)

    def _hash(self, key: str) -> dict[bytes, bytes]:
        found = self._get(key)
        if found is None:
            found = self._data[key] = {}
        return found

    # --- strings ---
    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._get(key)

    def set(self, key: str, value: Any, ex: float | None = None, nx: bool = False) -> bool | None:
        with self._lock:
            if nx and self._get(key) is not None:
                return None
            self._data[key] = _b(value)
            self._until.pop(key, None)
            if ex:
                self._until[key] = self.clock() + ex
            return True

    def delete(self, *keys: str) -> int:
        with self._lock:
            gone = [k for k in keys if self._get(k) is not None]
            for key in gone:
                self._data.pop(key)
                self._until.pop(key, None)
            return len(gone)

    def expire(self, key: str, seconds: float) -> bool:
        with self._lock:
            if self._get(key) is None:
                return False
            self._until[key] = self.clock() + seconds
            return True

    # --- hashes ---
    def hget(self, key: str, field: str) -> bytes | None:
        with self._lock:
            return (self._get(key) or {}).get(_b(field))

    def hmget(self, key: str, *fields: Any) -> list[bytes | None]:
        names = fields[0] if len(fields) == 1 and isinstance(fields[0], list) else fields
        with self._lock:
            found = self._get(key) or {}
            return [found.get(_b(f)) for f in names]

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        with self._lock:
            return dict(self._get(key) or {})

    def hlen(self, key: str) -> int:
        with self._lock:
            return len(self._get(key) or {})

    def hset(self, key: str, field: str | None = None, value: Any = None,
             mapping: Mapping[str, Any] | None = None) -> int:
        pairs = dict(mapping or {})
        if field is not None:
            pairs[field] = value
        with self._lock:
            found = self._hash(key)
            new = sum(_b(f) not in found for f in pairs)
            found.update({_b(f): _b(v) for f, v in pairs.items()})
            return new

    def hsetnx(self, key: str, field: str, value: Any) -> bool:
        with self._lock:
            found = self._hash(key)
            if _b(field) in found:
                return False
            found[_b(field)] = _b(value)
            return True

    def hdel(self, key: str, *fields: str) -> int:
        with self._lock:
            found = self._get(key) or {}
            return sum(found.pop(_b(f), None) is not None for f in fields)

    def hincrby(self, key: str, field: str, amount: int = 1) -> int:
        with self._lock:
            found = self._hash(key)
            found[_b(field)] = _b(int(found.get(_b(field), b"0")) + amount)
            return int(found[_b(field)])

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        return _Pipeline(self)

    def close(self) -> None:
        """Nothing to let go of (``Runtime.close`` closes its state's client)."""


class _Pipeline:
    """Commands queued, then run in one go under the client's lock (as MULTI/EXEC would)."""

    def __init__(self, client: MemoryRedis) -> None:
        self._client, self._calls = client, []

    def __getattr__(self, name: str) -> Callable[..., _Pipeline]:
        command = getattr(self._client, name)

        def queue(*args: Any, **kwargs: Any) -> _Pipeline:
            self._calls.append((command, args, kwargs))
            return self
        return queue

    def execute(self) -> list[Any]:
        with self._client._lock:
            calls, self._calls = self._calls, []
            return [command(*args, **kwargs) for command, args, kwargs in calls]
