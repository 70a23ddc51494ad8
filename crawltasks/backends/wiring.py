"""The one place a process's real ports are made: Redis, MongoDB, requests and Celery, as its settings
name them. ``Runtime`` asks here, on first use, for each port no twin stands in for; the rest of the
code knows the ports only."""

from __future__ import annotations

import threading

import redis

from ..http.transport import PooledTransport
from ..ports import Sender
from ..settings import Settings
from ..storage.mongo import MongoStorage
from .redis.bodies import RedisBodies
from .redis.fleet import RedisLeaderLock, RedisOutages
from .redis.frontier import RedisFrontier
from .redis.gate import RedisGate
from .redis.liveness import RedisFleet, RedisHeartbeat
from .redis.records import RedisItemKeys, RedisValidators
from .redis.registry import RedisState
from .redis.sites import RedisCookieJars, RedisRobots


class Wiring:
    """The real implementations for one process: every Redis port on the one client of its registry
    (a pool with room for every fetch thread), made when first asked for; what it made, it closes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._registry: RedisState | None = None
        self._transport: PooledTransport | None = None
        self._lock = threading.Lock()

    def registry(self) -> RedisState:
        with self._lock:
            if self._registry is None:
                self._registry = RedisState.from_url(self.settings.redis_url)
            return self._registry

    @property
    def redis(self) -> redis.Redis:
        """The process's Redis client (its connection pool), shared by every Redis port."""
        return self.registry().r

    def frontier(self) -> RedisFrontier:
        return RedisFrontier(self.redis)

    def bodies(self) -> RedisBodies:
        return RedisBodies(self.redis)

    def gate(self) -> RedisGate:
        return RedisGate(self.redis)

    def robots(self) -> RedisRobots:
        return RedisRobots(self.redis)

    def cookies(self) -> RedisCookieJars:
        return RedisCookieJars(self.redis)

    def validators(self) -> RedisValidators:
        return RedisValidators(self.redis)

    def item_keys(self) -> RedisItemKeys:
        return RedisItemKeys(self.redis)

    def outages(self) -> RedisOutages:
        return RedisOutages(self.redis)

    def leader(self) -> RedisLeaderLock:
        return RedisLeaderLock(self.redis)

    def heartbeat(self) -> RedisHeartbeat:
        return RedisHeartbeat(self.redis)

    def fleet(self) -> RedisFleet:
        return RedisFleet(self.redis)

    def storage(self) -> MongoStorage:
        return MongoStorage.from_url(self.settings.mongo_url, self.settings.mongo_db)

    def transport(self) -> PooledTransport:
        """One pooled session shared by the process's fetch threads."""
        self._transport = PooledTransport()
        return self._transport

    def sender(self) -> Sender:
        """Celery, on this process's broker connections (loaded by a process that sends)."""
        from ..worker.sending import CelerySender

        return CelerySender()

    def close(self) -> None:
        """Let go of the Redis connections and the HTTP pool made here (MongoDB: ``Storage.close``)."""
        if self._registry is not None:
            self._registry.r.close()
        if self._transport is not None:
            self._transport.close()
