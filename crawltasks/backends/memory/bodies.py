"""Parked bodies in memory: the twin of ``RedisBodies`` (contract: ``tests/test_bodies_contract.py``).
Time comes from ``clock`` (seconds), so a test lets a body expire by moving it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..redis.keys import Keys


class MemoryBodies:
    """The parked bodies of one process: key -> (bytes, expiry). Bodies are kept as given (Redis
    keeps them LZ4-compressed); an expired one is forgotten when next looked at."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.kept: dict[str, tuple[bytes, float]] = {}

    def key(self, crawl_id: str, ticket: str) -> str:
        return Keys.body(crawl_id, ticket)

    def park(self, crawl_id: str, bodies: dict[str, bytes], ttl: int) -> dict[str, str]:
        if bodies and ttl <= 0:  # Redis refuses such an expiry too
            raise ValueError(f"invalid ttl {ttl!r}")
        until = self.clock() + ttl
        keys = {ticket: Keys.body(crawl_id, ticket) for ticket in bodies}
        for ticket, body in bodies.items():
            self.kept[keys[ticket]] = (bytes(body), until)
        return keys

    def load(self, keys: Sequence[str]) -> list[bytes | None]:
        now, out = self.clock(), []
        for key in keys:
            body, until = self.kept.get(key, (None, 0.0))
            if body is not None and now > until:  # expired (as Redis: gone once past its time)
                del self.kept[key]
                body = None
            out.append(body)
        return out

    def drop(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.kept.pop(key, None)
