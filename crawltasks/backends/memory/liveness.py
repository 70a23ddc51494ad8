"""Heartbeats in memory: the twins of ``backends.redis.liveness`` (the ``Heartbeat`` and ``Fleet`` ports)
for a process that is the whole fleet (tests, the twin driver). A beat is written to the gate's
``beats`` (the twin of ``Keys.workers``), so the gate takes this process's slots for a live owner's.
Contract: ``tests/test_liveness_contract.py``."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from ...worker.liveness import new_worker_id
from .fleet import MemoryLeaderLock


class MemoryHeartbeat:
    """This process's heartbeat: an id and the capacity it offers; ``beat`` is called by whoever
    drives the process (no thread: nothing beats behind a test's back)."""

    def __init__(self, beats: dict[str, float] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.id = new_worker_id()
        self.capacity = 0
        self.beats = {} if beats is None else beats
        self.clock = clock
        self.started = False

    def start(self) -> MemoryHeartbeat:
        if not self.started:
            self.started = True
            self.beat()
        return self

    def offer(self, capacity: int) -> None:
        self.capacity = capacity
        self.start()
        self.beat()

    def beat(self) -> None:
        self.beats[self.id] = self.clock()

    def stop(self) -> None:
        self.started = False
        self.beats.pop(self.id, None)


class MemoryFleet:
    """What the heartbeats say: the live workers (those started) and the capacity they offer; a
    worker forgotten lets go of the locks of ``leader`` it held (the dispatcher's)."""

    def __init__(self, *heartbeats: MemoryHeartbeat, leader: MemoryLeaderLock | None = None) -> None:
        self.heartbeats = list(heartbeats)
        self.leader = leader

    def read(self) -> tuple[set[str], int]:
        live = [h for h in self.heartbeats if h.started]
        return {h.id for h in live}, sum(h.capacity for h in live)

    def forget_process(self, pid: int) -> list[str]:
        prefix = f"{socket.gethostname()}:{pid}:"
        gone = [h for h in self.heartbeats if h.started and h.id.startswith(prefix)]
        self._forget(gone)
        return [h.id for h in gone]

    def forget_all(self) -> None:
        self._forget([h for h in self.heartbeats if h.started])

    def _forget(self, gone: list[MemoryHeartbeat]) -> None:
        for heartbeat in gone:
            heartbeat.stop()
            if self.leader is not None:
                for name, (holder, _) in list(self.leader.locks.items()):
                    if holder == heartbeat.id:
                        self.leader.release(name, holder)
