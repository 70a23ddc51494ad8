"""What the memory registry remembers having seen: a crawl's exact seen-set and its Bloom filter
(an exact set too: no false positives), the visit index across crawls, and notification marks."""

from __future__ import annotations

from collections.abc import Sequence

from ...ports import SeenFilter
from ..redis.bloom import BloomParams
from .crawls import CrawlRecords


class MemoryBloom:
    """A crawl's Bloom filter, as an exact set: the ``SeenFilter`` twin of ``bloom.BloomFilter``."""

    def __init__(self, registry: CrawlRecords, crawl_id: str, params: BloomParams) -> None:
        self.registry, self.crawl_id, self.params = registry, crawl_id, params

    def check_and_add(self, fingerprints: Sequence[str], dont_filter: Sequence[bool] | None = None,
                      stats_key: str | None = None) -> list[bool]:
        """As ``BloomFilter.check_and_add``; any ``stats_key`` counts into the crawl's counters."""
        if not fingerprints:
            return []
        force = dont_filter or [False] * len(fingerprints)
        reg = self.registry
        with reg._lock:
            c = reg._crawl(self.crawl_id)
            size = (self.params.bits, self.params.hashes)
            if c.bloom_params is None:
                c.bloom_params = size
            elif c.bloom_params != size:
                raise ValueError(f"bloom filter of {self.crawl_id} has m, k = {c.bloom_params}, asked for {size}")
            flags = []
            for fp, forced in zip(fingerprints, force, strict=True):
                new = fp not in c.bloom
                c.bloom.add(fp)
                flags.append(new or forced)
            if stats_key:
                new = sum(flags)
                reg._count(self.crawl_id, scheduled=new, pending=new, duplicates=len(flags) - new)
            return flags

    def contains(self, fingerprints: Sequence[str]) -> list[bool]:
        with self.registry._lock:
            bloom = self.registry._crawl(self.crawl_id).bloom
            return [fp in bloom for fp in fingerprints]

    def add(self, fingerprint: str) -> bool:
        return self.check_and_add([fingerprint])[0]


class SeenMarks(CrawlRecords):
    """Dedupe within a crawl, visits across crawls, and once-only notification marks."""

    def _seen(self, crawl_id: str) -> set[str]:
        """The crawl's exact seen-set: the frontier's, when the registry shares one (one key in Redis)."""
        c = self._crawl(crawl_id)
        return c.seen if self.frontier is None else self.frontier.seen.setdefault(crawl_id, set())

    def seen_already(self, crawl_id: str, fps: Sequence[str]) -> list[bool]:
        with self._lock:
            seen = self._seen(crawl_id)
            return [fp in seen for fp in fps]

    def claim_seen(self, crawl_id: str, fp: str, bloom: SeenFilter | None = None) -> bool:
        if bloom is not None:
            return bloom.add(fp)
        with self._lock:
            seen = self._seen(crawl_id)
            new = fp not in seen
            seen.add(fp)
            return new

    def bloom_filter(self, crawl_id: str, capacity: int, error_rate: float) -> MemoryBloom:
        return MemoryBloom(self, crawl_id, BloomParams.for_capacity(capacity, error_rate))

    # --- visits across crawls ------------------------------------------------------------------------
    def _visits(self, spider: str, now: float) -> dict[str, float]:
        until = self._visited_until.get(spider)
        if until is not None and now >= until:
            self._visited.pop(spider, None)
            self._visited_until.pop(spider, None)
        return self._visited.setdefault(spider, {})

    def mark_visited(self, spider: str, fps: Sequence[str], ttl: float) -> None:
        if not fps:
            return
        with self._lock:
            now = self.clock()
            index = self._visits(spider, now)
            index.update(dict.fromkeys(fps, now))
            if ttl > 0:
                for fp in [fp for fp, at in index.items() if at < now - ttl]:
                    del index[fp]
                self._visited_until[spider] = now + max(1, int(ttl * 1000)) / 1000

    def visited_at(self, spider: str, fps: Sequence[str]) -> list[float | None]:
        with self._lock:
            index = self._visits(spider, self.clock())
            return [index.get(fp) for fp in fps]

    # --- notification marks ------------------------------------------------------------------------------
    def _mark(self, crawl_id: str, event: str) -> tuple[str, float] | None:
        mark = self._marks.get((crawl_id, event))
        if mark is not None and self.clock() >= mark[1]:
            del self._marks[(crawl_id, event)]
            return None
        return mark

    def mark_once(self, crawl_id: str, event: str, value: str, ttl: float) -> bool:
        with self._lock:
            if self._mark(crawl_id, event) is not None:
                return False
            self._marks[(crawl_id, event)] = (value, self.clock() + max(1, int(ttl * 1000)) / 1000)
            return True

    def update_mark(self, crawl_id: str, event: str, value: str) -> None:
        with self._lock:
            mark = self._mark(crawl_id, event)
            if mark is not None:
                self._marks[(crawl_id, event)] = (value, mark[1])

    def mark_of(self, crawl_id: str, event: str) -> str | None:
        with self._lock:
            mark = self._mark(crawl_id, event)
            return mark[0] if mark is not None else None
