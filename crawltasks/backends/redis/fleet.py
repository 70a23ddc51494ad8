"""What the workers share about themselves in Redis: the services some of them cannot reach (the
``Outages`` port) and the leader locks (``LeaderLock``: the dispatcher's). Twins:
``backends.memory.fleet``; contracts: ``tests/test_outages_contract.py``, ``tests/test_leader_contract.py``."""

from __future__ import annotations

import time

import redis

from .keys import Keys
from .scripts import register

# KEYS: a lock. ARGV: holder, ttl_ms. Take the lock, or keep it; 1 if it is the holder's.
HOLD_LOCK = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
return 0
"""

# KEYS: a lock. ARGV: its holder. Deleted only if that one still holds it.
RELEASE_LOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisOutages:
    """One hash (``Keys.outages``): service -> since when (epoch seconds, the noting worker's clock)."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def record(self, service: str) -> None:
        self.r.hsetnx(Keys.outages, service, time.time())

    def clear(self, service: str) -> None:
        self.r.hdel(Keys.outages, service)

    def current(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.r.hgetall(Keys.outages).items()}

    def ping(self) -> None:
        self.r.ping()


class RedisLeaderLock:
    """A lock is a string holding its holder's id (``Keys.leader``) with a TTL in milliseconds; taking,
    renewing and letting go are one script each, so a lock that changed hands is never lost."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._hold, self._release = register(client, HOLD_LOCK, RELEASE_LOCK)

    def hold(self, name: str, holder: str, ttl: float) -> bool:
        return bool(self._hold(keys=[Keys.leader(name)], args=[holder, max(1, round(ttl * 1000))]))

    def release(self, name: str, holder: str) -> bool:
        return bool(self._release(keys=[Keys.leader(name)], args=[holder]))

    def holder(self, name: str) -> str | None:
        found = self.r.get(Keys.leader(name))
        return None if found is None else found.decode()
