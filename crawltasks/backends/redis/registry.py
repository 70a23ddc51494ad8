"""The crawl state crawltasks keeps in Redis: the crawl registry, the dedupe set, the counters,
retention, visits, monitoring and control (key names: ``crawltasks.backends.redis.keys``). Each state transition is
one Lua script (in ``crawltasks.backends.redis.lua``), so it is atomic across workers. ``RedisState`` is the
``ports.CrawlRegistry`` and ``ports.CrawlActivity``, the monitor's reads (twin of both:
``backends.memory.registry``). Parked bodies
and the shared per-host gate are ports of their own (``backends.redis.bodies``, ``backends.redis.gate``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from ...monitor import series
from ...ports import SeenFilter
from ...settings import retention_option
from ...states import CrawlState
from . import lua
from .bloom import BloomFilter
from .keys import PREFIX, Keys
from .scripts import register

MAX_CONNECTIONS = 2048  # Redis connections one process's client may open (they are made only as needed)
SUMMARY_FACTOR = 10  # a finished crawl's meta and stats outlive the rest of its state this many times
PRUNE_BATCH = 100  # oldest entries of the crawl registry checked for an expired summary at each finish

# Counters of one crawl. Invariant: scheduled == stored + failed + skipped + pending.
COUNTERS = (
    "scheduled", "pending", "fetched", "parsed", "stored", "failed", "skipped",
    "duplicates", "filtered", "retried", "items", "reclaimed", "redriven",
)
OUTCOMES = ("stored", "failed", "skipped")
GENERATION = "generation"  # meta field: when the crawl was rebuilt after its Redis state was lost (recovery)
HOLD = "open"  # the meta field that holds a crawl open while its seeds may come (FINISH reads it)


class RedisState:
    """The crawl state of one Redis server."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._finish, self._control, self._redrive, self._retire, self._reopen = register(
            client, lua.FINISH, lua.CONTROL, lua.REDRIVE, lua.RETIRE, lua.REOPEN)

    @classmethod
    def from_url(cls, url: str) -> RedisState:
        """A client whose pool has room for every thread of a fetch engine (hundreds of them):
        redis-py's default pool raises past 100 connections."""
        return cls(redis.Redis.from_url(url, health_check_interval=30, max_connections=MAX_CONNECTIONS))

    # --- crawl registry -----------------------------------------------------------------------
    def create_crawl(self, crawl_id: str, options: dict[str, Any], seeds: Sequence[str]) -> bool:
        """Register a crawl; False if the id is taken (the crawl continues instead)."""
        now = time.time()
        created = self.r.hsetnx(Keys.meta(crawl_id), "started_at", now)
        if created:
            self.r.hset(Keys.meta(crawl_id), mapping={
                "options": json.dumps(options), "state": CrawlState.RUNNING, "seeds": json.dumps(list(seeds)),
            })
            self.r.zadd(Keys.crawls, {crawl_id: now})
            self.r.sadd(Keys.active, crawl_id)
        return bool(created)

    def crawl_options(self, crawl_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(Keys.meta(crawl_id), "options")
        return json.loads(raw) if raw else None

    def crawl_meta(self, crawl_id: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.r.hgetall(Keys.meta(crawl_id)).items()}

    def crawl_ids(self) -> list[str]:
        """Every crawl whose summary is still in Redis, oldest first (the others leave the registry)."""
        ids = [c.decode() for c in self.r.zrange(Keys.crawls, 0, -1)]
        gone = self._expired_crawls(ids)
        return [c for c in ids if c not in gone]

    def reopen(self, crawl_id: str) -> None:
        """Let a finished crawl run again (more seeds, retried failures); finished fires again later.
        Its keys lose the expiry its finish gave them, so its state does not vanish mid-run."""
        self._reopen(keys=[*Keys.summary(crawl_id), *self._working_keys(crawl_id)])
        self.r.sadd(Keys.active, crawl_id)

    def is_finished(self, crawl_id: str) -> bool:
        return self.r.hexists(Keys.meta(crawl_id), "finished_at")

    def hold_open(self, crawl_id: str, why: str) -> None:
        """Keep the crawl from finishing at pending 0: its seeds may still come (``crawltasks.frontier.seeds``)."""
        self.r.hset(Keys.meta(crawl_id), HOLD, why)

    def drop_hold(self, crawl_id: str) -> bool:
        """No more seeds; True if the crawl was held open (the caller checks completion)."""
        return bool(self.r.hdel(Keys.meta(crawl_id), HOLD))

    def held_open(self, crawl_id: str) -> str | None:
        value = self.r.hget(Keys.meta(crawl_id), HOLD)
        return value.decode() if value is not None else None

    # --- dedupe and counters --------------------------------------------------------------------
    def bloom_filter(self, crawl_id: str, capacity: int, error_rate: float) -> BloomFilter:
        return BloomFilter(self.r, Keys.bloom(crawl_id), capacity, error_rate)

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str, str]]) -> tuple[int, bool]:
        """Record final outcomes (ticket, outcome, lease) and end the requests' claims in the frontier;
        returns (newly counted, crawl finished now)."""
        args: list[str | int] = [series.WIDTH, series.RING, series.LIFE]
        for ticket, outcome, lease in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}")
            args += [ticket, outcome, lease]
        keys = [Keys.outcome(crawl_id), Keys.stats(crawl_id), Keys.meta(crawl_id), Keys.claims(crawl_id),
                Keys.series(crawl_id), Keys.host_done(crawl_id)]
        done, finished = self._finish(keys=keys, args=args)
        if finished:
            self.retire(crawl_id)
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

    def seen_already(self, crawl_id: str, fps: Sequence[str]) -> list[bool]:
        """Which fingerprints are already in the seen-set (one round trip; it only ever grows)."""
        if not fps:
            return []
        return [bool(x) for x in self.r.smismember(Keys.seen(crawl_id), list(fps))]

    def claim_seen(self, crawl_id: str, fp: str, bloom: SeenFilter | None = None) -> bool:
        """Mark a fingerprint seen (e.g. a redirect target); True if it was new."""
        if bloom is not None:
            return bloom.add(fp)
        return bool(self.r.sadd(Keys.seen(crawl_id), fp))

    # --- crawls not finished ---------------------------------------------------------------------
    def active_crawls(self) -> list[str]:
        return sorted(c.decode() for c in self.r.smembers(Keys.active))

    def forget_active(self, crawl_id: str) -> None:
        self.r.srem(Keys.active, crawl_id)

    def redrive(self, crawl_id: str, tickets: Sequence[str]) -> list[bool]:
        """Make failed tickets pending again; True for each that was failed."""
        if not tickets:
            return []
        self.r.sadd(Keys.active, crawl_id)
        flags = [bool(f) for f in self._redrive(keys=[Keys.outcome(crawl_id), Keys.stats(crawl_id),
                                                       Keys.meta(crawl_id)], args=list(tickets))]
        if any(flags):  # running again: its keys must not expire under it (nothing finishes it before this)
            self.reopen(crawl_id)
        return flags

    # --- retention: a finished crawl's state expires ---------------------------------------------
    def retention_of(self, crawl_id: str) -> float:
        """The crawl's ``retention`` option (the process default for crawls saved without one)."""
        return retention_option(self.crawl_options(crawl_id))

    def retire(self, crawl_id: str) -> bool:
        """A finished (or cancelled) crawl leaves the active set and its keys start to expire: the working
        state after its retention, meta and stats SUMMARY_FACTOR times later, so a Redis serving many
        crawls stays bounded while `list` and `stats` still show recent ones. Runs again harmlessly (the
        reclaimer retires a crawl whose finisher died before this); False if it was reopened meanwhile."""
        retention = self.retention_of(crawl_id)
        if retention > 0:
            ms = max(1, int(retention * 1000))
            if not self._retire(keys=[*Keys.summary(crawl_id), *self._working_keys(crawl_id)],
                                args=[ms, ms * SUMMARY_FACTOR]):
                return False
            self.prune_crawls()
        self.r.srem(Keys.active, crawl_id)
        if not self.is_finished(crawl_id):  # reopened between the two steps: it is active again
            self.r.sadd(Keys.active, crawl_id)
            return False
        return True

    def _working_keys(self, crawl_id: str) -> list[str]:
        """The crawl's keys but its summary and bodies: ``Keys.working`` plus the queues of the hosts that
        have requests queued (those are in the ready heap; a finished crawl has none left)."""
        hosts = [h.decode() for h in self.r.zrange(Keys.ready(crawl_id), 0, -1)]
        return [*Keys.working(crawl_id), *(q for h in hosts for q in Keys.queues(crawl_id, h))]

    def prune_crawls(self, limit: int = PRUNE_BATCH) -> int:
        """Drop from the registry the oldest crawls whose summary has expired; returns how many."""
        return len(self._expired_crawls([c.decode() for c in self.r.zrange(Keys.crawls, 0, limit - 1)]))

    def _expired_crawls(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose meta is gone, removed from the registry (one round trip to look)."""
        if not ids:
            return set()
        pipe = self.r.pipeline(transaction=False)
        for crawl_id in ids:
            pipe.exists(Keys.meta(crawl_id))
        gone = {c for c, there in zip(ids, pipe.execute(), strict=True) if not there}
        if gone:
            self.r.zrem(Keys.crawls, *gone)
        return gone

    # --- visits across crawls (re-crawling after visit_ttl) --------------------------------------
    def mark_visited(self, spider: str, fps: Sequence[str], ttl: float) -> None:
        """These pages were stored now. An entry older than ``ttl`` (the crawl's visit_ttl) skips nothing
        any more: those are trimmed here and the index expires ``ttl`` after its last write, so it holds
        at most the pages stored within ttl (one round trip, O(log n) per page)."""
        if not fps:
            return
        now, key = time.time(), Keys.visited(spider)
        for attempt in (1, 2):
            pipe = self.r.pipeline(transaction=False)
            pipe.zadd(key, dict.fromkeys(fps, now))
            if ttl > 0:
                pipe.zremrangebyscore(key, "-inf", f"({now - ttl}")
                pipe.pexpire(key, max(1, int(ttl * 1000)))
            try:
                pipe.execute()
                return
            except redis.ResponseError as exc:  # the unbounded hash of earlier versions: start over
                if attempt == 2 or "WRONGTYPE" not in str(exc):
                    raise
                self.r.unlink(key)

    def crawl_hosts(self, crawl_id: str, limit: int = 500) -> list[str]:
        """Hosts ("name:port") of the crawl's requests; a sample of ``limit`` when there are more."""
        key = Keys.hosts(crawl_id)
        raw = self.r.smembers(key) if self.r.scard(key) <= limit else self.r.srandmember(key, limit)
        return sorted(h.decode() for h in raw)

    def visited_at(self, spider: str, fps: Sequence[str]) -> list[float | None]:
        """When each page was last stored by a crawl of the spider (None: not within the index)."""
        if not fps:
            return []
        try:
            stamps = self.r.zmscore(Keys.visited(spider), list(fps))
        except redis.ResponseError as exc:  # a hash written by an earlier version, until the next write
            if "WRONGTYPE" not in str(exc):
                raise
            stamps = self.r.hmget(Keys.visited(spider), list(fps))
        return [float(v) if v is not None else None for v in stamps]

    # --- monitoring: the time series, per-host outcomes, notification markers --------------------
    def series(self, crawl_id: str) -> dict[str, str]:
        """The crawl's whole time-series hash (``crawltasks.monitor.series`` reads it)."""
        return {k.decode(): v.decode() for k, v in self.r.hgetall(Keys.series(crawl_id)).items()}

    def recent(self, crawl_ids: Sequence[str], seconds: float,
               starts: Sequence[float | None] | None = None) -> tuple[float, list[series.Window]]:
        """Redis' clock now and each crawl's outcomes over the last ``seconds`` (at most the ring's
        15 minutes), read from a few ring slots of each: cheap enough for every poll."""
        now = self.now()
        fields = series.ring_fields(now, -(-int(seconds) // series.WIDTH))
        pipe = self.r.pipeline(transaction=False)
        for crawl_id in crawl_ids:
            pipe.hmget(Keys.series(crawl_id), [name for _, name in fields])
        rings = pipe.execute() if crawl_ids else []
        starts = list(starts) if starts is not None else [None] * len(crawl_ids)
        return now, [series.window(ring, fields, now, start) for ring, start in zip(rings, starts, strict=True)]

    def now(self) -> float:
        """Redis' clock (epoch seconds): the one every worker's timestamps in Redis come from."""
        secs, micros = self.r.time()
        return secs + micros / 1e6

    def host_done(self, crawl_id: str, hosts: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
        """Host -> (requests stored, requests failed) there, as FINISH counts them: of ``hosts``, or of
        every host (a broad crawl has many: name the ones to show)."""
        if hosts is not None:
            names = [f"{kind}:{host}" for host in hosts for kind in "sf"]
            values = self.r.hmget(Keys.host_done(crawl_id), names) if names else []
            return {host: (int(values[2 * i] or 0), int(values[2 * i + 1] or 0)) for i, host in enumerate(hosts)}
        out: dict[str, list[int]] = {}
        for field, value in self.r.hgetall(Keys.host_done(crawl_id)).items():
            kind, _, host = field.decode().partition(":")
            out.setdefault(host, [0, 0])[0 if kind == "s" else 1] += int(value)
        return {host: (s, f) for host, (s, f) in out.items()}

    def mark_once(self, crawl_id: str, event: str, value: str, ttl: float) -> bool:
        """Claim ``event`` of the crawl for this process (SET NX with a TTL); False if claimed before."""
        return bool(self.r.set(Keys.notified(crawl_id, event), value, nx=True, px=max(1, int(ttl * 1000))))

    def update_mark(self, crawl_id: str, event: str, value: str) -> None:
        """Say how a claimed event went (its TTL stays)."""
        self.r.set(Keys.notified(crawl_id, event), value, xx=True, keepttl=True)

    def mark_of(self, crawl_id: str, event: str) -> str | None:
        value = self.r.get(Keys.notified(crawl_id, event))
        return value.decode() if value is not None else None

    # --- crawl control --------------------------------------------------------------------------
    def control(self, crawl_id: str, from_states: Sequence[str], to_state: str) -> bool:
        """Change a crawl's state if it is in from_states; True if it did."""
        return bool(self._control(keys=[Keys.meta(crawl_id)], args=[",".join(from_states), to_state]))

    def states_of(self, crawl_ids: Sequence[str]) -> list[str]:
        """The states of several crawls, in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for crawl_id in crawl_ids:
            pipe.hget(Keys.meta(crawl_id), "state")
        return [v.decode() if v else "" for v in pipe.execute()] if crawl_ids else []

    def finished_times(self, crawl_ids: Sequence[str]) -> list[float | None]:
        """When each crawl finished (None: not finished), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for crawl_id in crawl_ids:
            pipe.hget(Keys.meta(crawl_id), "finished_at")
        return [float(v) if v else None for v in pipe.execute()] if crawl_ids else []

    def state_of(self, crawl_id: str) -> str:
        value = self.r.hget(Keys.meta(crawl_id), "state")
        return value.decode() if value else ""

    def state_and_generation(self, crawl_id: str) -> tuple[str, str]:
        """Its state and generation in one round trip (scheduling reads both for every batch of links)."""
        status, generation = self.r.hmget(Keys.meta(crawl_id), "state", GENERATION)
        return (status.decode() if status else "", generation.decode() if generation else "")

    # --- the rebuild of a lost crawl (storage.recovery) -----------------------------------------
    def mark_rebuilt(self, crawl_id: str, started_at: float | None) -> None:
        self.r.hset(Keys.meta(crawl_id), mapping={
            GENERATION: time.time(), **({"started_at": started_at} if started_at is not None else {})})

    def restore_outcomes(self, crawl_id: str, outcomes: Sequence[tuple[str, str]], seen: Sequence[str]) -> None:
        """One round trip per call (the caller sends chunks)."""
        pipe = self.r.pipeline(transaction=False)
        if seen:
            pipe.sadd(Keys.seen(crawl_id), *seen)
        if outcomes:
            pipe.hset(Keys.outcome(crawl_id), mapping=dict(outcomes))
        pipe.execute()

    def restore_counts(self, crawl_id: str, counts: dict[str, int]) -> None:
        if counts:
            self.r.hset(Keys.stats(crawl_id), mapping=counts)

    # --- housekeeping ---------------------------------------------------------------------------
    def delete_crawl(self, crawl_id: str) -> None:
        """Remove every key of a crawl (tests; crawl ids are not reused for another crawl)."""
        keys = list(self.r.scan_iter(match=f"{PREFIX}:{{{crawl_id}}}:*", count=1000))
        if keys:
            self.r.delete(*keys)
        self.r.zrem(Keys.crawls, crawl_id)
        self.r.srem(Keys.active, crawl_id)


RedisRegistry = RedisState  # the CrawlRegistry port's name for it
