"""What every worker shares about the sites, in memory: the twins of ``backends.redis.sites``
(``RobotsCache``, ``CookieJars``; contracts: ``tests/test_robots_contract.py``,
``tests/test_cookies_contract.py``). Time comes from ``clock`` (seconds): a test lets a TTL run out by
moving it. Thread-safe: the fetch engine's threads share them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence


class MemoryRobots:
    """Texts and locks of origins, each with its expiry; one expired is gone once past its time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.texts: dict[str, tuple[str, float]] = {}  # origin -> (text, expiry)
        self.locks: dict[str, float] = {}  # origin -> expiry
        self._lock = threading.Lock()

    def text(self, origin: str) -> str | None:
        with self._lock:
            text, until = self.texts.get(origin, (None, 0.0))
            return text if text is not None and self.clock() < until else None

    def put(self, origin: str, text: str, ttl: int) -> None:
        if ttl <= 0:  # Redis refuses such an expiry too
            raise ValueError(f"invalid ttl {ttl!r}")
        with self._lock:
            self.texts[origin] = (text, self.clock() + ttl)

    def lock(self, origin: str, ttl: int) -> bool:
        if ttl <= 0:
            raise ValueError(f"invalid ttl {ttl!r}")
        with self._lock:
            now = self.clock()
            if self.locks.get(origin, now) > now:
                return False
            self.locks[origin] = now + ttl
            return True

    def unlock(self, origin: str) -> None:
        with self._lock:
            self.locks.pop(origin, None)


class MemoryCookieJars:
    """Each crawl's jar: (version, cookies); the version counts saves, as HINCRBY does (from "1")."""

    def __init__(self) -> None:
        self.jars: dict[str, tuple[int, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def version(self, crawl_id: str) -> str | None:
        with self._lock:
            found = self.jars.get(crawl_id)
            return None if found is None else str(found[0])

    def load(self, crawl_id: str) -> tuple[str | None, dict[str, str]]:
        with self._lock:
            found = self.jars.get(crawl_id)
            return (None, {}) if found is None else (str(found[0]), dict(found[1]))

    def save(self, crawl_id: str, cookies: dict[str, str], deleted: Sequence[str]) -> None:
        with self._lock:
            version, jar = self.jars.get(crawl_id, (0, {}))
            jar = {**jar, **cookies}
            for name in deleted:
                jar.pop(name, None)
            self.jars[crawl_id] = (version + 1, jar)
