"""The shared per-host gate in memory: the twin of ``RedisGate``, the Lua of ``crawltasks.backends.redis.lua``
(GATE_EXCHANGE, HOST_FEEDBACK, HOST_STARTED, LATE_START) step by step in Python, in milliseconds as there.
Contract: ``tests/test_gate_contract.py``. Time comes from ``clock`` (seconds), heartbeats from
``beats`` (owner -> the clock's time of its last beat: the twin of ``Keys.workers``)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...ports import Grant, HostGate, HostLoad, SlotRequest

FULL_WAIT_MS = 25  # what GATE_EXCHANGE says to wait when every slot of a host is held
MIN_BACKOFF_MS, MAX_BACKOFF_MS = 1000, 300_000
FORGET_BACKOFF_MS = 100  # a back-off halved below this is gone


@dataclass
class _Host:
    """A host's three keys: slots (token -> lease end), the next start, the back-off (with expiries)."""

    slots: dict[str, int] = field(default_factory=dict)
    slots_until: int = 0  # the slots key's expiry (PEXPIRE on each grant)
    next_at: int = 0
    backoff: int = 0
    backoff_until: int = 0


class MemoryGate(HostGate):
    """The gate of every host in one process (the engine's pool threads call ``started``: a lock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.beats: dict[str, float] = {}
        self.hosts: dict[str, _Host] = {}
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def _now(self) -> int:
        return round(self.clock() * 1000)

    def _host(self, host: str, now: int) -> _Host:
        """The host's keys as Redis would show them now: those past their expiry are gone."""
        h = self.hosts.setdefault(host, _Host())
        if h.slots and now > h.slots_until:
            h.slots.clear()
        if h.backoff and now > h.backoff_until:
            h.backoff = 0
        return h

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest],
                 owner: str = "", dead_after: float = 10.0,
                 started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        prefix = f"{owner}|" if owner else ""
        with self._lock:
            now = self._now()  # read once, as the script reads Redis' clock
            for host, delay in started:
                self._started(host, delay, now)
            for host, token in release:
                self.hosts.get(host, _Host()).slots.pop(token, None)
            out = []
            for req in requests:
                tokens = [f"{prefix}m{next(self._seq)}" for _ in range(max(1, req.want))]
                out.append(self._acquire(req, tokens, int(dead_after * 1000), now))
            return out

    def _acquire(self, req: SlotRequest, tokens: list[str], dead_ms: int, now: int) -> Grant:
        """An ask of GATE_EXCHANGE."""
        h = self._host(req.host, now)
        extra = h.backoff
        for token in [t for t, end in h.slots.items() if end <= now]:
            del h.slots[token]
        if h.next_at > now:
            return Grant([], (h.next_at - now) / 1000.0, extra / 1000.0)
        if req.limit - len(h.slots) <= 0:
            self._free_dead(h, now - dead_ms)
        free = req.limit - len(h.slots)
        if free <= 0:
            return Grant([], FULL_WAIT_MS / 1000.0, extra / 1000.0)
        delay, lease = int(req.delay * 1000) + extra, int(req.lease * 1000)
        n = 1 if delay > 0 else min(free, len(tokens))
        for token in tokens[:n]:
            h.slots[token] = now + lease
        h.slots_until = now + lease
        if delay <= 0:
            return Grant(tokens[:n], 0.0, extra / 1000.0)
        h.next_at = now + delay
        return Grant(tokens[:n], 0.0, extra / 1000.0, h.next_at / 1000.0)

    def _free_dead(self, h: _Host, silent_since: int) -> None:
        """A full host frees the slots of owners whose last beat is older than ``silent_since``."""
        for token in list(h.slots):
            if "|" in token:
                beat = self.beats.get(token.rpartition("|")[0])
                if (round(beat * 1000) if beat is not None else 0) < silent_since:
                    del h.slots[token]

    def feedback(self, host: str, slow: bool, wait: float = 0.0) -> float:
        """HOST_FEEDBACK."""
        with self._lock:
            now = self._now()
            h = self._host(host, now)
            extra = h.backoff
            if slow:
                extra = min(max(extra * 2, MIN_BACKOFF_MS), MAX_BACKOFF_MS)
                h.backoff, h.backoff_until = extra, now + max(extra * 10, 10_000)
                h.next_at = max(h.next_at, now + max(int(wait * 1000), extra))
            elif extra > 0:
                extra //= 2
                h.backoff, h.backoff_until = (0, 0) if extra < FORGET_BACKOFF_MS else \
                    (extra, now + max(extra * 10, 10_000))
            return extra / 1000

    def started(self, host: str, delay: float) -> None:
        with self._lock:
            self._started(host, delay, self._now())

    def _started(self, host: str, delay: float, now: int) -> None:
        """HOST_STARTED."""
        if delay > 0:
            h = self._host(host, now)
            h.next_at = max(h.next_at, now + int(delay * 1000))

    def late_start(self, host: str, delay: float, mine: float) -> tuple[float, float]:
        """LATE_START."""
        with self._lock:
            now = self._now()
            h = self._host(host, now)
            at = h.next_at if h.next_at > now and h.next_at > round(mine * 1000) else now
            h.next_at = at + int(delay * 1000)
            return (at - now) / 1000.0, h.next_at / 1000.0

    def view(self, hosts: Sequence[str]) -> list[HostLoad]:
        with self._lock:
            now = self._now()
            out = []
            for host in hosts:
                h = self._host(host, now)
                in_flight = sum(end > now for end in h.slots.values())
                out.append(HostLoad(in_flight, max(0.0, (h.next_at - now) / 1000.0), h.backoff / 1000.0))
            return out
