"""Per-process connections and caches, created on first use (so after a prefork worker forks).

Tests and the embedded mode point a process at other services with ``configure(settings)``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from .redisstate import RedisState
from .settings import CrawlOptions, Settings
from .spiders import Spider, resolve_spider
from .store import MongoStorage


@dataclass
class Runtime:
    settings: Settings
    pid: int = field(default_factory=os.getpid)
    _state: RedisState | None = None
    _storage: MongoStorage | None = None
    _options: dict[str, CrawlOptions] = field(default_factory=dict)
    _spiders: dict[str, Spider] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def state(self) -> RedisState:
        if self._state is None:
            with self._lock:
                if self._state is None:
                    self._state = RedisState.from_url(self.settings.redis_url)
        return self._state

    @property
    def storage(self) -> MongoStorage:
        if self._storage is None:
            with self._lock:
                if self._storage is None:
                    self._storage = MongoStorage.from_url(self.settings.mongo_url, self.settings.mongo_db)
        return self._storage

    def options(self, crawl_id: str) -> CrawlOptions:
        """A crawl's options, read from Redis once per process (they do not change during a crawl)."""
        opts = self._options.get(crawl_id)
        if opts is None:
            raw = self.state.crawl_options(crawl_id)
            if raw is None:
                raise LookupError(f"unknown crawl {crawl_id!r}")
            opts = CrawlOptions.from_dict(raw)
            if len(self._options) > 256:
                self._options.clear()
            self._options[crawl_id] = opts
        return opts

    def spider(self, crawl_id: str) -> Spider:
        spider = self._spiders.get(crawl_id)
        if spider is None:
            cls = resolve_spider(self.options(crawl_id).spider, self.settings.spider_modules)
            spider = cls(crawl_id=crawl_id)
            if len(self._spiders) > 256:
                self._spiders.clear()
            self._spiders[crawl_id] = spider
        return spider

    def close(self) -> None:
        if self._storage is not None:
            self._storage.client.close()
        if self._state is not None:
            self._state.r.close()


_current: Runtime | None = None


def current() -> Runtime:
    """This process's runtime; rebuilt after a fork, since sockets cannot be shared."""
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = Runtime(Settings.from_env())
    return _current


def configure(settings: Settings) -> Runtime:
    """Point this process at other services (tests, embedded mode)."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = Runtime(settings)
    return _current
