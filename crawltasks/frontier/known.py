"""The links a process knows to be seen, per crawl: a cache in front of the shared seen-set.

Its own module so that the runtime, which holds one (``rt.caches.known``), need not import the
scheduling that uses it.
"""

from __future__ import annotations

from collections.abc import Iterable


class KnownSeen:
    """Fingerprints this process knows to be in a crawl's seen-set. The set only grows (a crawl id
    is never reused for another crawl), so a link to one of them is a duplicate without asking
    Redis: most links of a page are known, and most of those this process met before. Bounded:
    all is forgotten when full."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._by_crawl: dict[str, set[str]] = {}
        self._size = 0

    def of(self, crawl_id: str) -> set[str]:
        return self._by_crawl.get(crawl_id, set())

    def add(self, crawl_id: str, fps: Iterable[str]) -> None:
        known = self._by_crawl.setdefault(crawl_id, set())
        before = len(known)
        known.update(fps)
        self._size += len(known) - before
        if self._size > self.limit:
            self._by_crawl.clear()
            self._size = 0
