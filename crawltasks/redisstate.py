"""Everything crawltasks keeps in Redis: every key name, the dedupe set, the counters, parked bodies,
and the shared per-host gate. Each state transition is one Lua script, so it is atomic across workers.

Keys of one crawl share the hash tag ``{crawl_id}`` so the scripts stay valid on Redis Cluster.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import redis

PREFIX = "ct"

# Counters of one crawl. Invariant: scheduled == stored + failed + skipped + pending.
COUNTERS = (
    "scheduled", "pending", "fetched", "parsed", "stored", "failed", "skipped",
    "duplicates", "filtered", "retried", "deferred", "items",
)
OUTCOMES = ("stored", "failed", "skipped")


class Keys:
    """Every Redis key name crawltasks uses, in one place."""

    crawls = f"{PREFIX}:crawls"  # zset crawl_id -> start time

    @staticmethod
    def meta(crawl_id: str) -> str:  # hash: options, spider, state, started_at, finished_at
        return f"{PREFIX}:{{{crawl_id}}}:meta"

    @staticmethod
    def stats(crawl_id: str) -> str:  # hash of COUNTERS and filtered:<reason>
        return f"{PREFIX}:{{{crawl_id}}}:stats"

    @staticmethod
    def seen(crawl_id: str) -> str:  # set of fingerprints ever scheduled
        return f"{PREFIX}:{{{crawl_id}}}:seen"

    @staticmethod
    def outcome(crawl_id: str) -> str:  # hash ticket -> stored | failed | skipped ("done" = stored)
        return f"{PREFIX}:{{{crawl_id}}}:outcome"

    @staticmethod
    def body(crawl_id: str, ticket: str) -> str:  # zlib-compressed response body, with a TTL
        return f"{PREFIX}:{{{crawl_id}}}:body:{ticket}"

    @staticmethod
    def host_slots(host: str) -> str:  # zset token -> lease expiry (ms): requests in flight on host
        return f"{PREFIX}:host:{{{host}}}:slots"

    @staticmethod
    def host_next(host: str) -> str:  # earliest time (ms) the next request may start on host
        return f"{PREFIX}:host:{{{host}}}:next"


# KEYS: seen, stats. ARGV: fingerprints; "!" marks dont_filter. Returns 1/0 per fingerprint.
_SCHEDULE = """
local flags, new = {}, 0
for i, fp in ipairs(ARGV) do
  if string.sub(fp, 1, 1) == '!' then
    redis.call('SADD', KEYS[1], string.sub(fp, 2)); flags[i] = 1; new = new + 1
  elseif redis.call('SADD', KEYS[1], fp) == 1 then flags[i] = 1; new = new + 1
  else flags[i] = 0 end
end
if new > 0 then
  redis.call('HINCRBY', KEYS[2], 'scheduled', new)
  redis.call('HINCRBY', KEYS[2], 'pending', new)
end
if #ARGV > new then redis.call('HINCRBY', KEYS[2], 'duplicates', #ARGV - new) end
return flags
"""

# KEYS: outcome, stats, meta. ARGV: ticket, outcome, ticket, outcome, ...
# A ticket is counted once, whatever the replays. Returns {newly finished, crawl finished now (0/1)}.
_FINISH = """
local done = 0
for i = 1, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('HINCRBY', KEYS[2], ARGV[i + 1], 1)
    done = done + 1
  end
end
local pending
if done > 0 then pending = redis.call('HINCRBY', KEYS[2], 'pending', 0 - done)
else pending = tonumber(redis.call('HGET', KEYS[2], 'pending') or '0') end
if pending <= 0 then
  local t = redis.call('TIME')
  if redis.call('HSETNX', KEYS[3], 'finished_at', t[1] + t[2] / 1e6) == 1 then
    redis.call('HSET', KEYS[3], 'state', 'finished')
    return {done, 1}
  end
end
return {done, 0}
"""

# KEYS: host slots, host next. ARGV: limit, delay_ms, token, lease_ms.
# Returns 0 when a slot is granted, else milliseconds to wait before asking again.
_ACQUIRE_HOST = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if nxt > now then return nxt - now end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 25 end
local lease = tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
local delay = tonumber(ARGV[2])
if delay > 0 then redis.call('SET', KEYS[2], now + delay, 'PX', delay) end
return 0
"""


class RedisState:
    """The crawl state of one Redis server."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._schedule = client.register_script(_SCHEDULE)
        self._finish = client.register_script(_FINISH)
        self._acquire_host = client.register_script(_ACQUIRE_HOST)

    @classmethod
    def from_url(cls, url: str) -> RedisState:
        return cls(redis.Redis.from_url(url, health_check_interval=30))

    # --- crawl registry -----------------------------------------------------------------------
    def create_crawl(self, crawl_id: str, options: dict[str, Any], seeds: Sequence[str]) -> bool:
        """Register a crawl; False if the id is taken (the crawl continues instead)."""
        now = time.time()
        created = self.r.hsetnx(Keys.meta(crawl_id), "started_at", now)
        if created:
            self.r.hset(Keys.meta(crawl_id), mapping={
                "options": json.dumps(options), "state": "running", "seeds": json.dumps(list(seeds)),
            })
            self.r.zadd(Keys.crawls, {crawl_id: now})
        return bool(created)

    def crawl_options(self, crawl_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(Keys.meta(crawl_id), "options")
        return json.loads(raw) if raw else None

    def crawl_meta(self, crawl_id: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.r.hgetall(Keys.meta(crawl_id)).items()}

    def crawl_ids(self) -> list[str]:
        return [c.decode() for c in self.r.zrange(Keys.crawls, 0, -1)]

    def reopen(self, crawl_id: str) -> None:
        """Let a finished crawl run again (more seeds, retried failures); finished fires again later."""
        self.r.hdel(Keys.meta(crawl_id), "finished_at")
        self.r.hset(Keys.meta(crawl_id), "state", "running")

    def is_finished(self, crawl_id: str) -> bool:
        return self.r.hexists(Keys.meta(crawl_id), "finished_at")

    # --- dedupe and counters --------------------------------------------------------------------
    def schedule(self, crawl_id: str, fingerprints: Sequence[str], dont_filter: Sequence[bool]) -> list[bool]:
        """Atomically mark fingerprints seen; True for each that is new (or dont_filter)."""
        if not fingerprints:
            return []
        args = [("!" + fp) if force else fp for fp, force in zip(fingerprints, dont_filter, strict=True)]
        flags = self._schedule(keys=[Keys.seen(crawl_id), Keys.stats(crawl_id)], args=args)
        return [bool(f) for f in flags]

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str]]) -> tuple[int, bool]:
        """Record final outcomes (ticket, outcome); returns (newly counted, crawl finished now)."""
        args: list[str] = []
        for ticket, outcome in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}")
            args += [ticket, outcome]
        keys = [Keys.outcome(crawl_id), Keys.stats(crawl_id), Keys.meta(crawl_id)]
        done, finished = self._finish(keys=keys, args=args)
        return int(done), bool(finished)

    def check_finished(self, crawl_id: str) -> bool:
        """Fire completion if nothing is pending (e.g. every seed was filtered)."""
        return self.finish(crawl_id, [])[1]

    def incr(self, crawl_id: str, **counts: int) -> None:
        counts = {k: v for k, v in counts.items() if v}
        if not counts:
            return
        pipe = self.r.pipeline(transaction=False)
        for name, value in counts.items():
            pipe.hincrby(Keys.stats(crawl_id), name, value)
        pipe.execute()

    def stats(self, crawl_id: str) -> dict[str, int]:
        raw = {k.decode(): int(v) for k, v in self.r.hgetall(Keys.stats(crawl_id)).items()}
        return {**dict.fromkeys(COUNTERS, 0), **raw}

    def outcome_of(self, crawl_id: str, ticket: str) -> str | None:
        value = self.r.hget(Keys.outcome(crawl_id), ticket)
        return value.decode() if value else None

    def is_seen(self, crawl_id: str, fp: str) -> bool:
        return bool(self.r.sismember(Keys.seen(crawl_id), fp))

    def claim_seen(self, crawl_id: str, fp: str) -> bool:
        """Mark a fingerprint seen (e.g. a redirect target); True if it was new."""
        return bool(self.r.sadd(Keys.seen(crawl_id), fp))

    # --- parked bodies --------------------------------------------------------------------------
    def park_body(self, crawl_id: str, ticket: str, body: bytes, ttl: int) -> str:
        key = Keys.body(crawl_id, ticket)
        self.r.set(key, zlib.compress(body, 1), ex=ttl)
        return key

    def load_bodies(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        return [zlib.decompress(v) if v is not None else None for v in self.r.mget(keys)]

    def drop_bodies(self, keys: Sequence[str]) -> None:
        if keys:
            self.r.delete(*keys)

    # --- shared per-host gate -------------------------------------------------------------------
    def acquire_host(self, host: str, limit: int, delay: float, lease: float = 120.0) -> tuple[str | None, float]:
        """Try to take one of host's slots. Returns (token, 0) on success, else (None, seconds to wait)."""
        token = uuid.uuid4().hex
        wait_ms = self._acquire_host(
            keys=[Keys.host_slots(host), Keys.host_next(host)],
            args=[limit, int(delay * 1000), token, int(lease * 1000)],
        )
        if int(wait_ms) == 0:
            return token, 0.0
        return None, int(wait_ms) / 1000.0

    def release_host(self, host: str, token: str) -> None:
        self.r.zrem(Keys.host_slots(host), token)

    # --- housekeeping ---------------------------------------------------------------------------
    def delete_crawl(self, crawl_id: str) -> None:
        """Remove every key of a crawl (tests and `crawltasks forget`)."""
        keys = list(self.r.scan_iter(match=f"{PREFIX}:{{{crawl_id}}}:*", count=1000))
        if keys:
            self.r.delete(*keys)
        self.r.zrem(Keys.crawls, crawl_id)
