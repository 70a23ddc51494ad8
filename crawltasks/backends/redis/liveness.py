"""Heartbeats in Redis (the ``Heartbeat`` and ``Fleet`` ports of ``crawltasks.ports``; twins:
``backends.memory.liveness``; contract: ``tests/test_liveness_contract.py``). The workers' table is one
sorted set (``Keys.workers``: id -> last beat, Redis' clock) and a hash of the capacity each offers.
"""

from __future__ import annotations

import logging
import socket
import threading

import redis

from ...worker.liveness import BEAT_EVERY, dead_after, new_worker_id
from .fleet import RELEASE_LOCK
from .keys import Keys

log = logging.getLogger("crawltasks")

FORGET_AFTER_MS = 3_600_000  # a worker silent this long leaves the table

# KEYS: workers, capacity. ARGV: worker id, capacity (-1: leave it), forget_ms.
_BEAT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
if tonumber(ARGV[2]) >= 0 then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
for _, w in ipairs(gone) do
  redis.call('ZREM', KEYS[1], w)
  redis.call('HDEL', KEYS[2], w)
end
return now
"""

# KEYS: workers, capacity. ARGV: dead_after_ms. Returns {live ids..., total capacity of live ones}.
_LIVE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')
local total = 0
for _, w in ipairs(live) do total = total + tonumber(redis.call('HGET', KEYS[2], w) or '0') end
return {live, total}
"""


class RedisHeartbeat:
    """This process's heartbeat: its id, and the fetch capacity it offers (0: it fetches nothing)."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self.id = new_worker_id()
        self.capacity = 0
        self._beat = client.register_script(_BEAT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> RedisHeartbeat:
        """Beat now and then every BEAT_EVERY seconds (once per process: later calls do nothing)."""
        with self._lock:
            if self._thread is None:
                self.beat()
                self._thread = threading.Thread(target=self._run, name="crawltasks-heartbeat", daemon=True)
                self._thread.start()
        return self

    def offer(self, capacity: int) -> None:
        """Announce how many requests this process's fetch engine takes at once."""
        self.capacity = capacity
        self.start()
        self.beat()

    def beat(self) -> None:
        self._beat(keys=[Keys.workers, Keys.capacity], args=[self.id, self.capacity, FORGET_AFTER_MS])

    def stop(self) -> None:
        """Leave the table at once (a clean shutdown): nothing of ours is held any more."""
        with self._lock:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(BEAT_EVERY + 1)
            self._thread, self._stop = None, threading.Event()
        try:
            self.r.zrem(Keys.workers, self.id)
            self.r.hdel(Keys.capacity, self.id)
        except redis.RedisError:
            pass

    def _run(self) -> None:
        while not self._stop.wait(BEAT_EVERY):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - Redis away for a while: beat again next time
                log.warning("heartbeat: %r", exc)


class RedisFleet:
    """What the heartbeats say: the live workers and the fetch capacity they offer together."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._live = client.register_script(_LIVE)

    def read(self) -> tuple[set[str], int]:
        ids, total = self._live(keys=[Keys.workers, Keys.capacity], args=[int(dead_after() * 1000)])
        return {i.decode() for i in ids}, int(total)

    def forget_process(self, pid: int) -> list[str]:
        """The worker process ``pid`` of this machine is known to be dead (its supervisor reaped it):
        it leaves the table, so that its claims and host slots are free at the reclaimer's next round
        and the dispatcher's lock, if it held it, at once. Returns the ids it had."""
        prefix = f"{socket.gethostname()}:{pid}:"
        gone = [w for w in (m.decode() for m in self.r.zrange(Keys.workers, 0, -1)) if w.startswith(prefix)]
        if gone:
            self.r.zrem(Keys.workers, *gone)
            self.r.hdel(Keys.capacity, *gone)
            for worker in gone:
                self.r.eval(RELEASE_LOCK, 1, Keys.dispatcher, worker)
        return gone

    def forget_all(self) -> None:
        """Every worker in the table is known to be dead (a private Redis whose command died): their
        host slots, claims and the dispatcher's lock are free at once, not after ``dead_after()``."""
        self.r.delete(Keys.workers, Keys.capacity, Keys.dispatcher)
