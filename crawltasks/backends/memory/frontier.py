"""The frontier of one process, in memory: the twin of ``RedisFrontier`` for tests of the dispatch
policy in milliseconds. Both pass the same contract tests (``tests/test_hostqueues.py``)."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ...frontier.queues import (
    DUPLICATE,
    NEW,
    OVER_HOST_CAP,
    OVER_MAX_PAGES,
    PARKED_MS,
    Caps,
    HostPolicy,
    HostQueue,
    Sizes,
    Taken,
    encode,
)
from ...models import PRIORITIES, Request
from ...ports import SeenFilter
from ...urls import host_key

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class _Claim:
    owner: str
    fetching: bool
    since: float
    request: Request
    hot: bool = False


def _atomic(method: F) -> F:
    """One call at a time, as each Redis script runs alone (the fetch engine's thread calls in too)."""
    @functools.wraps(method)
    def locked(self: MemoryFrontier, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return locked  # type: ignore[return-value]


class MemoryFrontier:
    """The frontier of one process, in memory: the twin of ``RedisFrontier`` for tests. Time comes
    from ``clock`` (seconds), so a test moves it by hand. Each public call is atomic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seen: dict[str, set[str]] = {}
        self.counters: dict[str, dict[str, int]] = {}
        self.host_counts: dict[str, dict[str, int]] = {}
        self.hosts: dict[str, set[str]] = {}  # crawl -> hosts of its requests ("name:port"), as Keys.hosts
        self.queues: dict[tuple[str, str], dict[str, deque[Request]]] = {}
        self.ready: dict[str, dict[str, float]] = {}  # crawl -> host -> time it may be fetched
        self.next_at: dict[tuple[str, str], float] = {}
        self.busy: dict[tuple[str, str], int] = {}
        self.limits: dict[tuple[str, str], HostPolicy] = {}
        self.claims: dict[str, dict[str, _Claim]] = {}
        self._seq = 0
        self._lock = threading.RLock()

    def count(self, crawl_id: str, name: str, n: int) -> None:
        stats = self.counters.setdefault(crawl_id, {})
        stats[name] = stats.get(name, 0) + n

    def _queue(self, crawl_id: str, host: str) -> dict[str, deque[Request]]:
        return self.queues.setdefault((crawl_id, host), {p: deque() for p in PRIORITIES})

    @_atomic
    def add(self, crawl_id: str, requests: Sequence[Request], caps: Caps | None = None,
            bloom: SeenFilter | None = None, counted: bool = False) -> list[int]:
        """As ``RedisFrontier.add``: with ``bloom`` (a registry's ``SeenFilter``) the filter is the
        seen-set; ``counted`` queues requests that are pending already."""
        caps = caps or Caps()
        seen = self.seen.setdefault(crawl_id, set())
        per_host = self.host_counts.setdefault(crawl_id, {})
        verdicts = []
        for req in requests:
            verdict = NEW if counted else self._verdict(crawl_id, req, caps, seen, bloom)
            if verdict == NEW:
                host = host_key(req.url)
                self.hosts.setdefault(crawl_id, set()).add(host)
                if not counted:
                    self._mark_seen(req.fp, seen, bloom)
                    per_host[host] = per_host.get(host, 0) + 1
                    self.count(crawl_id, "scheduled", 1)
                    self.count(crawl_id, "pending", 1)
                self._push(crawl_id, host, req, front=False)
            elif verdict == DUPLICATE:
                self.count(crawl_id, "duplicates", 1)
            else:
                self.count(crawl_id, "filtered", 1)
                self.count(crawl_id, "filtered_max_pages" if verdict == OVER_MAX_PAGES
                           else "filtered_max_pages_per_host", 1)
            verdicts.append(verdict)
        return verdicts

    def _verdict(self, crawl_id: str, req: Request, caps: Caps, seen: set[str], bloom: SeenFilter | None) -> int:
        if not req.dont_filter and (bloom.contains([req.fp])[0] if bloom is not None else req.fp in seen):
            return DUPLICATE
        if caps.max_pages and self.counters.get(crawl_id, {}).get("scheduled", 0) >= caps.max_pages:
            return OVER_MAX_PAGES
        if caps.max_per_host and self.host_counts[crawl_id].get(host_key(req.url), 0) >= caps.max_per_host:
            return OVER_HOST_CAP
        return NEW

    @staticmethod
    def _mark_seen(fp: str, seen: set[str], bloom: SeenFilter | None) -> None:
        if bloom is not None:
            bloom.add(fp)
        else:
            seen.add(fp)

    def _push(self, crawl_id: str, host: str, req: Request, front: bool) -> None:
        queue = self._queue(crawl_id, host)[req.priority]
        req = Request.from_dict({**req.to_dict(), "lease": ""})  # a copy, as Redis keeps one
        queue.appendleft(req) if front else queue.append(req)
        ready = self.ready.setdefault(crawl_id, {})
        ready.setdefault(host, max(self.next_at.get((crawl_id, host), 0.0), self.clock()))

    @_atomic
    def take(self, crawl_id: str, limit: int, policy: HostPolicy, high_only: bool = False,
             lead: float = 0.0) -> Taken:
        now, out = self.clock(), Taken()
        ready = self.ready.get(crawl_id, {})
        for host in sorted((h for h, at in ready.items() if at <= now), key=lambda h: (ready[h], h)):
            if len(out.entries) >= limit:
                break
            rules = self.limits.get((crawl_id, host), policy)
            busy = self.busy.get((crawl_id, host), 0)
            room = rules.concurrency - busy
            if rules.delay + rules.random_delay > 0:
                room = min(room, 1)
            got = self._pop(crawl_id, host, min(room, limit - len(out.entries)), now, high_only)
            out.entries += [(r.lease, r.priority, encode(r)) for r in got]
            busy += len(got)
            self.busy[(crawl_id, host)] = busy
            if got:
                early = min(lead, rules.delay / 2)
                self.next_at[(crawl_id, host)] = now + rules.delay - early + random.uniform(0, rules.random_delay)
            if not any(self._queue(crawl_id, host).values()):
                del ready[host]
            else:
                ready[host] = now + PARKED_MS / 1000 if busy >= rules.concurrency else \
                    max(self.next_at.get((crawl_id, host), 0.0), now)
        if ready:
            out.next_ready = max(0.0, min(ready.values()) - now)
        return out

    def _pop(self, crawl_id: str, host: str, n: int, now: float, high_only: bool = False) -> list[Request]:
        got: list[Request] = []
        for priority in PRIORITIES[:1] if high_only else PRIORITIES:
            queue = self._queue(crawl_id, host)[priority]
            while queue and len(got) < n:
                self._seq += 1
                req = queue.popleft()
                req.lease = f"m{self._seq}"
                self.claims.setdefault(crawl_id, {})[req.lease] = _Claim("", True, now, req)
                got.append(req)
        return got

    @_atomic
    def claim(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[bool]:
        claims, out = self.claims.get(crawl_id, {}), []
        for lease in leases:
            c = claims.get(lease)
            if c is not None:
                c.owner, c.since = owner, self.clock()
            out.append(c is not None)
        return out

    @_atomic
    def take_up(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[int | None]:
        claims, out = self.claims.get(crawl_id, {}), []
        for lease in leases:
            c = claims.get(lease)
            if c is None:
                out.append(None)
                continue
            c.request.lost += int(c.hot and c.owner != owner)
            c.owner, c.since, c.hot = owner, self.clock(), c.request.lost == 0
            out.append(c.request.lost)
        return out

    @_atomic
    def mark(self, crawl_id: str, leases: Sequence[str], owner: str, hot: bool) -> None:
        for lease in leases:
            c = self.claims.get(crawl_id, {}).get(lease)
            if c is not None and c.owner == owner:
                c.hot = hot
                if not hot:
                    c.since = self.clock()  # handed on to the next stage now

    @_atomic
    def fetched(self, crawl_id: str, leases: Sequence[str]) -> None:
        for lease in leases:
            c = self.claims.get(crawl_id, {}).get(lease)
            if c is not None and c.fetching:
                c.fetching, c.since = False, self.clock()
                self._slot_free(crawl_id, host_key(c.request.url))

    def _slot_free(self, crawl_id: str, host: str) -> None:
        self.busy[(crawl_id, host)] = max(0, self.busy.get((crawl_id, host), 0) - 1)
        ready = self.ready.get(crawl_id, {})
        if host in ready:
            ready[host] = max(self.next_at.get((crawl_id, host), 0.0), self.clock())

    @_atomic
    def give_back(self, crawl_id: str, requests: Sequence[Request], hold: float = 0.0) -> None:
        for req in requests:
            c = self.claims.get(crawl_id, {}).pop(req.lease, None)
            if c is None:
                continue
            host = host_key(req.url)
            if c.fetching:
                self._slot_free(crawl_id, host)
            self._hold_next(crawl_id, host, hold)
            self._push(crawl_id, host, req, front=True)
            self.ready[crawl_id][host] = max(self.next_at.get((crawl_id, host), 0.0), self.clock())

    def _hold_next(self, crawl_id: str, host: str, seconds: float) -> None:
        until = self.clock() + seconds
        self.next_at[(crawl_id, host)] = max(self.next_at.get((crawl_id, host), 0.0), until)

    @_atomic
    def hold(self, crawl_id: str, host: str, seconds: float) -> None:
        self._hold_next(crawl_id, host, seconds)
        ready = self.ready.get(crawl_id, {})
        if host in ready:
            ready[host] = max(ready[host], self.next_at[(crawl_id, host)])

    @_atomic
    def set_limits(self, crawl_id: str, host: str, policy: HostPolicy) -> None:
        self.limits[(crawl_id, host)] = policy

    def host_of(self, crawl_id: str, lease: str) -> str | None:
        """The host of a claimed request (FINISH reads it from the claim), None when not claimed."""
        c = self.claims.get(crawl_id, {}).get(lease)
        return host_key(c.request.url) if c is not None else None

    @_atomic
    def release(self, crawl_id: str, leases: Sequence[str]) -> None:
        for lease in leases:
            self.claims.get(crawl_id, {}).pop(lease, None)

    @_atomic
    def reclaim(self, crawl_id: str, live: set[str], dispatch_lease: float, lease_time: float,
                renew_within: float = 0.0, handoff_within: float = 0.0) -> int:
        now, back = self.clock(), []
        for c in list(self.claims.get(crawl_id, {}).values()):
            lost = bool(c.owner) and c.owner not in live  # costs a loss only if it was at stake there
            forgotten = bool(c.owner) and c.fetching and renew_within > 0 and now - c.since > renew_within
            dropped = bool(c.owner) and not (c.fetching or c.hot) and 0 < handoff_within < now - c.since
            if lost or forgotten or dropped or (not c.owner and now - c.since > dispatch_lease) \
                    or now - c.since > lease_time:
                c.request.lost += int(lost and (c.fetching or c.hot))
                back.append(c.request)
        self.give_back(crawl_id, back)
        return len(back)

    @_atomic
    def drop_queued(self, crawl_id: str) -> int:
        n = 0
        for host in list(self.ready.get(crawl_id, {})):
            n += sum(len(q) for q in self.queues.pop((crawl_id, host), {}).values())
        self.ready.pop(crawl_id, None)
        self.count(crawl_id, "skipped", n)
        self.count(crawl_id, "pending", -n)
        return n

    @_atomic
    def outstanding(self, crawl_ids: Sequence[str]) -> tuple[int, list[str]]:
        """As ``RedisFrontier.outstanding``."""
        high = [c for c in crawl_ids if any(qs["high"] for (cid, _), qs in self.queues.items() if cid == c)]
        return sum(self.sizes(c).outstanding for c in crawl_ids), high

    @_atomic
    def sizes(self, crawl_id: str) -> Sizes:
        claims = self.claims.get(crawl_id, {}).values()
        queued = sum(len(q) for (c, _), qs in self.queues.items() if c == crawl_id for q in qs.values())
        return Sizes(queued=queued, outstanding=sum(c.fetching for c in claims), claimed=len(claims),
                     hosts=len(self.ready.get(crawl_id, {})))

    @_atomic
    def host_queues(self, crawl_id: str, hosts: Sequence[str]) -> dict[str, HostQueue]:
        now = self.clock()
        return {host: HostQueue(queued=sum(len(q) for q in self.queues.get((crawl_id, host), {}).values()),
                                in_flight=self.busy.get((crawl_id, host), 0),
                                wait=max(0.0, self.next_at.get((crawl_id, host), now) - now),
                                limits=self.limits.get((crawl_id, host))) for host in hosts}
