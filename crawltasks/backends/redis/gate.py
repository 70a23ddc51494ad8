"""The shared per-host gate in Redis (the ``HostGate`` port of ``crawltasks.ports``; its twin:
``backends.memory.gate``). Each step is one Lua script of ``crawltasks.backends.redis.lua`` (GATE_EXCHANGE,
HOST_FEEDBACK, HOST_STARTED, LATE_START), so every worker of every machine sees one gate; times are Redis' clock.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Sequence

import redis

from ...ports import Grant, HostGate, HostLoad, SlotRequest
from . import lua
from .keys import Keys
from .scripts import register

_exchanges = itertools.count()
_TOKEN_PREFIX = uuid.uuid4().hex[:12]


def _token_prefix(owner: str) -> str:
    """The tokens of one exchange are this and 1, 2, 3, ...: unique across exchanges, processes and
    machines, without a system call or an argument per token."""
    mine = f"{_TOKEN_PREFIX}:{os.getpid()}:{next(_exchanges)}."
    return f"{owner}|{mine}" if owner else mine


def _grants(reply: bytes, prefix: str) -> list[Grant]:
    """GATE_EXCHANGE's three numbers per ask; its tokens are the prefix and 1, 2, 3, ... in order."""
    numbers = iter(map(int, reply.split()))
    grants, taken = [], 0
    for n, wait_or_next, extra in zip(numbers, numbers, numbers, strict=True):
        if not n:
            grants.append(Grant([], wait_or_next / 1000, extra / 1000))
            continue
        grants.append(Grant([f"{prefix}{k}" for k in range(taken + 1, taken + n + 1)], 0.0, extra / 1000,
                            wait_or_next / 1000))
        taken += n
    return grants


class RedisGate(HostGate):
    """The gate of every host, in one Redis; each call is one round trip."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._exchange, self._feedback, self._started, self._late_start = register(
            client, lua.GATE_EXCHANGE, lua.HOST_FEEDBACK, lua.HOST_STARTED, lua.LATE_START)
        self._names = [Keys.host_head, *Keys.host_tails]

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest],
                 owner: str = "", dead_after: float = 10.0,
                 started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        """See ``HostGate.exchange``: one GATE_EXCHANGE call, its late starts, releases and asks one
        string each (with an argument per item, packing them cost the client more than the rest)."""
        if not release and not requests and not any(delay > 0 for _, delay in started):
            return []
        prefix = _token_prefix(owner)
        grants = _grants(self._exchange(keys=[Keys.workers], args=[
            *self._names, int(dead_after * 1000), prefix,
            "\n".join([f"{int(delay * 1000)} {host}" for host, delay in started if delay > 0]),
            "\n".join([f"{token} {host}" for host, token in release]),
            "\n".join([f"{max(1, r.want)} {r.limit} {int(r.delay * 1000)} {int(r.lease * 1000)} {r.host}"
                       for r in requests])]), prefix)
        if len(grants) != len(requests):
            raise ValueError(f"{len(requests)} asks, {len(grants)} answers: an ask the gate could not read")
        return grants

    def feedback(self, host: str, slow: bool, wait: float = 0.0) -> float:
        args = ["slow", int(wait * 1000)] if slow else ["ok", 0]
        return int(self._feedback(keys=[Keys.host_next(host), Keys.host_backoff(host)], args=args)) / 1000

    def started(self, host: str, delay: float) -> None:
        if delay > 0:
            self._started(keys=[Keys.host_next(host)], args=[int(delay * 1000)])

    def late_start(self, host: str, delay: float, mine: float) -> tuple[float, float]:
        wait_ms, next_ms = self._late_start(keys=[Keys.host_next(host)], args=[int(delay * 1000), round(mine * 1000)])
        return int(wait_ms) / 1000.0, int(next_ms) / 1000.0

    def view(self, hosts: Sequence[str]) -> list[HostLoad]:
        """Read with Redis' own clock (two round trips: the clock, then every host's keys)."""
        if not hosts:
            return []
        secs, micros = self.r.time()
        now_ms = secs * 1000 + micros // 1000
        pipe = self.r.pipeline(transaction=False)
        for host in hosts:
            pipe.zcount(Keys.host_slots(host), f"({now_ms}", "+inf")
            pipe.get(Keys.host_next(host))
            pipe.get(Keys.host_backoff(host))
        replies = pipe.execute()
        out = []
        for i in range(len(hosts)):
            in_flight, nxt, backoff = int(replies[3 * i]), replies[3 * i + 1], replies[3 * i + 2]
            wait = max(0.0, (int(nxt) - now_ms) / 1000.0) if nxt else 0.0
            out.append(HostLoad(in_flight, wait, int(float(backoff or 0)) / 1000.0))
        return out
