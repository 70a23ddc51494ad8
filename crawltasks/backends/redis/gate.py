"""The shared per-host gate in Redis (the ``HostGate`` port of ``crawltasks.ports``; its twin:
``backends.memory.gate``). Each step is one Lua script of ``crawltasks.backends.redis.lua`` (ACQUIRE_HOST,
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
from .scripts import pipelined, register

_tokens = itertools.count()
_TOKEN_PREFIX = uuid.uuid4().hex[:12]


def _token() -> str:
    """A slot token unique across processes and machines, without a system call per token."""
    return f"{_TOKEN_PREFIX}:{os.getpid()}:{next(_tokens)}"


class RedisGate(HostGate):
    """The gate of every host, in one Redis; each call is one round trip."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._acquire, self._feedback, self._started, self._late_start = register(
            client, lua.ACQUIRE_HOST, lua.HOST_FEEDBACK, lua.HOST_STARTED, lua.LATE_START)

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest],
                 owner: str = "", dead_after: float = 10.0,
                 started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        """See ``HostGate.exchange``: a HOST_STARTED per late start, the ZREMs and an ACQUIRE_HOST
        per request in one pipeline."""
        started = [(host, delay) for host, delay in started if delay > 0]
        if not release and not requests and not started:
            return []
        prefix = f"{owner}|" if owner else ""
        asks = [(req, [prefix + _token() for _ in range(max(1, req.want))]) for req in requests]

        def build(pipe: redis.client.Pipeline) -> None:
            for host, delay in started:
                pipe.evalsha(self._started.sha, 1, Keys.host_next(host), int(delay * 1000))
            for host, token in release:
                pipe.zrem(Keys.host_slots(host), token)
            for req, tokens in asks:
                pipe.evalsha(self._acquire.sha, 4, Keys.host_slots(req.host), Keys.host_next(req.host),
                             Keys.host_backoff(req.host), Keys.workers, req.limit, int(req.delay * 1000),
                             int(req.lease * 1000), int(dead_after * 1000), *tokens)

        replies = pipelined(self.r, build, self._acquire, self._started)
        answers = zip(asks, replies[len(started) + len(release):], strict=True)
        return [Grant(tokens[:int(granted)], int(wait_ms) / 1000.0, int(extra_ms) / 1000.0, int(next_ms) / 1000.0)
                for (_, tokens), (granted, wait_ms, extra_ms, next_ms) in answers]

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
