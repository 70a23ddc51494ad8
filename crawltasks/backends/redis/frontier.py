"""The per-host frontier in Redis, shared by every worker: the ``Frontier`` of ``crawltasks.frontier.queues``.

Each step is one Lua script (``crawltasks.backends.redis.frontier_lua``), so many dispatchers, fetchers and
reclaimers can work on one crawl at once. A queued request is a compact entry in its host's list
(``frontier.queues.encode``); it has no lease and costs nothing in the broker until its host is ready.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import redis

from ...frontier.queues import (
    PRIORITY_CODES,
    PRIORITY_NAMES,
    Caps,
    HostPolicy,
    HostQueue,
    Sizes,
    Taken,
    encode,
)
from ...models import Request
from ...urls import host_key
from . import frontier_lua
from .bloom import BloomFilter, normalize
from .keys import Keys
from .scripts import register

HOSTS_PER_TAKE = 512  # ready hosts one take looks at
HOSTS_PER_DROP = 500  # hosts one drop_queued call empties (a cancelled crawl of many hosts takes several)


class RedisFrontier:
    """The frontier of every crawl in one Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        (self._schedule, self._take, self._claim, self._take_up, self._mark, self._fetched, self._give_back,
         self._hold, self._expired, self._drop) = register(
            client, frontier_lua.SCHEDULE, frontier_lua.TAKE, frontier_lua.CLAIM, frontier_lua.TAKE_UP,
            frontier_lua.MARK, frontier_lua.FETCHED, frontier_lua.GIVE_BACK, frontier_lua.HOLD,
            frontier_lua.EXPIRED, frontier_lua.DROP_QUEUED)
        self._token = secrets.token_hex(3)  # leases taken here: "<token>.<seq>.<n>", unique across takers

    def add(self, crawl_id: str, requests: Sequence[Request], caps: Caps | None = None,
            bloom: BloomFilter | None = None, counted: bool = False) -> list[int]:
        """See ``Frontier.add``. With a Bloom filter, the filter is the seen-set, checked and set by the
        same script that queues and counts (so the caps hold as with the exact set); ``counted``
        queues requests that are pending already (retry-failed)."""
        if not requests:
            return []
        caps = caps or Caps()
        args: list[str | int] = [Keys.queue_prefix(crawl_id), caps.max_pages, caps.max_per_host, int(counted)]
        keys = [Keys.seen(crawl_id), Keys.stats(crawl_id), Keys.host_counts(crawl_id), Keys.hosts(crawl_id),
                Keys.frontier(crawl_id), Keys.ready(crawl_id)]
        if bloom is not None:
            args += [bloom.params.bits, bloom.params.hashes]
            keys[0] = bloom.key
            keys.append(bloom.params_key)
        else:
            args += [0, 0]
        for r in requests:
            fp = normalize(r.fp) if bloom is not None else r.fp
            args += [("!" + fp) if r.dont_filter else fp, host_key(r.url), PRIORITY_CODES[r.priority], encode(r)]
        return [int(f) for f in self._schedule(keys=keys, args=args)]

    def take(self, crawl_id: str, limit: int, policy: HostPolicy, high_only: bool = False,
             lead: float = 0.0) -> Taken:
        keys = [Keys.ready(crawl_id), Keys.frontier(crawl_id), Keys.claims(crawl_id), Keys.busy(crawl_id),
                Keys.host_next_at(crawl_id), Keys.host_limits(crawl_id)]
        rows, next_ms = self._take(keys=keys, args=[
            Keys.queue_prefix(crawl_id), limit, policy.concurrency, int(policy.delay * 1000),
            int(policy.random_delay * 1000), f"{self._token}.", HOSTS_PER_TAKE, "h" if high_only else "hdl",
            int(lead * 1000)])
        taken = [(lease.decode(), PRIORITY_NAMES[code.decode()], entry.decode()) for lease, code, entry in rows]
        return Taken(taken, None if int(next_ms) < 0 else int(next_ms) / 1000)

    def claim(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[bool]:
        if not leases:
            return []
        return [bool(f) for f in self._claim(keys=[Keys.claims(crawl_id)], args=[owner, *leases])]

    def take_up(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[int | None]:
        if not leases:
            return []
        flags = self._take_up(keys=[Keys.claims(crawl_id)], args=[owner, *leases])
        return [int(f) - 1 if int(f) else None for f in flags]

    def mark(self, crawl_id: str, leases: Sequence[str], owner: str, hot: bool) -> None:
        if leases:
            self._mark(keys=[Keys.claims(crawl_id)], args=[owner, int(hot), *leases])

    def fetched(self, crawl_id: str, leases: Sequence[str]) -> None:
        if leases:
            self._fetched(keys=[Keys.claims(crawl_id), Keys.busy(crawl_id), Keys.frontier(crawl_id),
                                Keys.ready(crawl_id), Keys.host_next_at(crawl_id)], args=list(leases))

    def give_back(self, crawl_id: str, requests: Sequence[Request], hold: float = 0.0) -> None:
        """See ``Frontier.give_back``: each goes back as it is now (its attempt count included)."""
        self._give(crawl_id, [(r.lease, encode(r)) for r in requests], hold, lost=False)

    def _give(self, crawl_id: str, pairs: Sequence[tuple[str, str]], hold: float, lost: bool) -> int:
        if not pairs:
            return 0
        args: list[str | int] = [Keys.queue_prefix(crawl_id), int(hold * 1000), int(lost)]
        for lease, entry in pairs:
            args += [lease, entry]
        return int(self._give_back(keys=[Keys.claims(crawl_id), Keys.busy(crawl_id), Keys.frontier(crawl_id),
                                         Keys.ready(crawl_id), Keys.host_next_at(crawl_id)], args=args))

    def hold(self, crawl_id: str, host: str, seconds: float) -> None:
        self._hold(keys=[Keys.ready(crawl_id), Keys.host_next_at(crawl_id)], args=[host, int(seconds * 1000)])

    def set_limits(self, crawl_id: str, host: str, policy: HostPolicy) -> None:
        value = f"{policy.concurrency},{int(policy.delay * 1000)},{int(policy.random_delay * 1000)}"
        self.r.hset(Keys.host_limits(crawl_id), host, value)

    def release(self, crawl_id: str, leases: Sequence[str]) -> None:
        if leases:
            self.r.hdel(Keys.claims(crawl_id), *leases)

    def reclaim(self, crawl_id: str, live: set[str], dispatch_lease: float, lease_time: float,
                renew_within: float = 0.0, handoff_within: float = 0.0) -> int:
        rows = self._expired(keys=[Keys.claims(crawl_id)], args=[
            int(dispatch_lease * 1000), int(lease_time * 1000), int(renew_within * 1000),
            int(handoff_within * 1000), *sorted(live)])
        lost = [(lease.decode(), "") for lease, kind in rows if int(kind) == 1]
        late = [(lease.decode(), "") for lease, kind in rows if int(kind) == 0]
        return self._give(crawl_id, lost, 0.0, lost=True) + self._give(crawl_id, late, 0.0, lost=False)

    def drop_queued(self, crawl_id: str) -> int:
        total = 0
        while True:
            dropped, left = self._drop(keys=[Keys.ready(crawl_id), Keys.frontier(crawl_id), Keys.stats(crawl_id)],
                                       args=[Keys.queue_prefix(crawl_id), HOSTS_PER_DROP])
            total += int(dropped)
            if not int(left):
                return total

    def sizes(self, crawl_id: str) -> Sizes:
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(Keys.frontier(crawl_id), ["queued", "outstanding"])
        pipe.hlen(Keys.claims(crawl_id))
        pipe.zcard(Keys.ready(crawl_id))
        (queued, outstanding), claimed, hosts = pipe.execute()
        return Sizes(queued=int(queued or 0), outstanding=int(outstanding or 0), claimed=int(claimed),
                     hosts=int(hosts))

    def outstanding(self, crawl_ids: Sequence[str]) -> tuple[int, list[str]]:
        """Requests taken and not yet fetched over these crawls, and the crawls that have
        high-priority requests waiting (one round trip)."""
        if not crawl_ids:
            return 0, []
        pipe = self.r.pipeline(transaction=False)
        for crawl_id in crawl_ids:
            pipe.hmget(Keys.frontier(crawl_id), ["outstanding", "queued_h"])
        rows = pipe.execute()
        high = [c for c, (_, h) in zip(crawl_ids, rows, strict=True) if int(h or 0) > 0]
        return sum(int(out or 0) for out, _ in rows), high

    def host_queues(self, crawl_id: str, hosts: Sequence[str]) -> dict[str, HostQueue]:
        """Per host: its three queues' lengths, in-flight count, next start (ms of Redis' clock, read in
        the same round trip) and own limits ("concurrency,delay_ms,random_ms")."""
        if not hosts:
            return {}
        pipe = self.r.pipeline(transaction=False)
        for host in hosts:
            for key in Keys.queues(crawl_id, host):
                pipe.llen(key)
        pipe.hmget(Keys.busy(crawl_id), list(hosts))
        pipe.hmget(Keys.host_next_at(crawl_id), list(hosts))
        pipe.hmget(Keys.host_limits(crawl_id), list(hosts))
        pipe.time()
        replies = pipe.execute()
        busy, nxt, limits, (secs, micros) = replies[-4:]
        now_ms = secs * 1000 + micros // 1000
        return {host: HostQueue(queued=sum(replies[3 * i:3 * i + 3]), in_flight=int(busy[i] or 0),
                                wait=max(0, int(nxt[i] or 0) - now_ms) / 1000, limits=_limits(limits[i]))
                for i, host in enumerate(hosts)}


def _limits(value: bytes | None) -> HostPolicy | None:
    """A host's own limits as ``set_limits`` wrote them."""
    if not value:
        return None
    concurrency, delay_ms, random_ms = (int(v) for v in value.decode().split(","))
    return HostPolicy(concurrency, delay_ms / 1000, random_ms / 1000)
