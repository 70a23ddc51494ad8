"""The monitor's reads in the memory registry (the ``CrawlActivity`` twin of ``RedisState``'s): the
time series and per-host outcomes its ``finish`` records, as FINISH does, and the hosts of the
crawl's requests, which the ``MemoryFrontier`` it shares keeps (as ``Frontier.add`` keeps them in Redis)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ...monitor import series
from .crawls import CrawlRecords


class ActivityReads(CrawlRecords):
    """``series``, ``recent``, ``now``, ``host_done`` and ``crawl_hosts`` on the registry's own state."""

    def series(self, crawl_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._crawl(crawl_id).series)

    def recent(self, crawl_ids: Sequence[str], seconds: float,
               starts: Sequence[float | None] | None = None) -> tuple[float, list[series.Window]]:
        now = self.now()
        fields = series.ring_fields(now, -(-int(seconds) // series.WIDTH))
        starts = list(starts) if starts is not None else [None] * len(crawl_ids)
        with self._lock:
            rings = [[self._crawl(c).series.get(name) for _, name in fields] for c in crawl_ids]
        return now, [series.window(ring, fields, now, start) for ring, start in zip(rings, starts, strict=True)]

    def now(self) -> float:
        return self.clock()

    def host_done(self, crawl_id: str, hosts: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
        with self._lock:
            counts = dict(self._crawl(crawl_id).host_done)
        if hosts is None:
            hosts = sorted({name.partition(":")[2] for name in counts})
        return {host: (counts.get(f"s:{host}", 0), counts.get(f"f:{host}", 0)) for host in hosts}

    def crawl_hosts(self, crawl_id: str, limit: int = 500) -> list[str]:
        with self._lock:
            self._crawl(crawl_id)  # forgets them when the crawl's working state expired
            hosts = list(self.frontier.hosts.get(crawl_id, ())) if self.frontier is not None else []
        return sorted(hosts if len(hosts) <= limit else random.sample(hosts, limit))
