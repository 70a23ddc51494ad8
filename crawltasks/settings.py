"""Where the services are (process settings) and how one crawl behaves (crawl options).

Process settings come from the environment. Crawl options are chosen when a crawl starts and are
saved in Redis with the crawl, so every worker on every machine applies the same ones.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

ENV_BROKER = "CRAWLTASKS_BROKER_URL"
ENV_REDIS = "CRAWLTASKS_REDIS_URL"
ENV_MONGO = "CRAWLTASKS_MONGO_URL"
ENV_MONGO_DB = "CRAWLTASKS_MONGO_DB"
ENV_SPIDER_MODULES = "CRAWLTASKS_SPIDER_MODULES"
ENV_DATA_DIR = "CRAWLTASKS_DATA_DIR"
ENV_FETCH_CONCURRENCY = "CRAWLTASKS_FETCH_CONCURRENCY"
ENV_RETENTION = "CRAWLTASKS_RETENTION"  # the default of the crawl option ``retention``
DEFAULT_RETENTION = 7 * 24 * 3600.0


@dataclass
class Settings:
    """Service locations for this process."""

    broker_url: str | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"
    mongo_url: str = "mongodb://127.0.0.1:27017/"
    mongo_db: str = "crawltasks"
    spider_modules: list[str] = field(default_factory=list)
    fetch_concurrency: int = 512  # requests a worker process's fetch engine has in flight at most

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        broker = env.get(ENV_BROKER) or None
        redis_url = env.get(ENV_REDIS) or (broker if broker and broker.startswith("redis") else None)
        modules = [m.strip() for m in env.get(ENV_SPIDER_MODULES, "").split(",") if m.strip()]
        return cls(
            broker_url=broker,
            redis_url=redis_url or cls.redis_url,
            mongo_url=env.get(ENV_MONGO) or cls.mongo_url,
            mongo_db=env.get(ENV_MONGO_DB) or cls.mongo_db,
            spider_modules=modules,
            fetch_concurrency=int(env.get(ENV_FETCH_CONCURRENCY) or cls.fetch_concurrency),
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that ``from_env`` reads back as these settings (for workers)."""
        return {ENV_BROKER: self.broker_url or "", ENV_REDIS: self.redis_url, ENV_MONGO: self.mongo_url,
                ENV_MONGO_DB: self.mongo_db, ENV_SPIDER_MODULES: ",".join(self.spider_modules),
                ENV_FETCH_CONCURRENCY: str(self.fetch_concurrency)}


RETIRED = frozenset({"fetch_threads"})  # options of earlier versions, ignored in saved crawls


def default_retention() -> float:
    """Seconds a finished crawl's state stays in Redis unless the crawl says otherwise: one operator
    setting (CRAWLTASKS_RETENTION) for every crawl started from this environment."""
    return float(os.environ.get(ENV_RETENTION) or DEFAULT_RETENTION)


def retention_option(options: dict | None) -> float:
    """A saved crawl's ``retention`` option; the process default for crawls saved without one."""
    value = (options or {}).get("retention")
    return default_retention() if value is None else float(value)


@dataclass
class CrawlOptions:
    """Everything that shapes one crawl; JSON-safe, stored with the crawl."""

    spider: str = "site"  # a registered spider name, "module:Class" or "/abs/file.py:Class"
    spider_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the spider's __init__
    spider_path: str | None = None  # a directory workers import the spider's module from
    max_depth: int | None = None
    allowed_domains: list[str] | None = None  # None: the seeds' hosts
    max_retries: int = 3
    retry_base: float = 1.0  # seconds; countdown = retry_base * 2**attempt, capped by retry_cap
    retry_cap: float = 60.0  # kept far below the broker's visibility timeout
    batch_size: int = 64  # requests per fetch task, and results per parse -> store chain
    host_concurrency: int = 2  # requests in flight per host, across all workers
    host_delay: float = 0.5  # seconds between two request starts on one host, across all workers
    timeout: float = 20.0  # seconds for one whole response, connect to last byte
    max_size: int = 10 * 1024 * 1024  # bytes; larger bodies are cut and the page recorded as truncated
    max_redirects: int = 10
    user_agent: str = "crawltasks/0.1 (+https://github.com/crawltasks/crawltasks)"
    store_html: bool = False
    store_text: bool = False
    fingerprint_meta: list[str] = field(default_factory=list)
    fingerprint_headers: list[str] = field(default_factory=list)  # request headers that join the fingerprint
    handle_statuses: list[int] = field(default_factory=list)  # statuses >= 400 parsed as pages (the spider's)
    dedupe: str = "set"  # "set": exact (~90 B per URL); "bloom": ~1.2 B per URL at 1 % false positives
    bloom_capacity: int = 10_000_000  # URLs the Bloom filter is sized for
    bloom_error_rate: float = 0.01  # share of new URLs a full Bloom filter takes for seen
    allow_private: bool = False  # let links and redirects reach private/loopback/link-local addresses
    private_hosts: list[str] | None = None  # hosts allowed although private: the seeds' own (filled at start)
    body_ttl: int = 3600  # seconds a fetched body waits in Redis for its parse task
    lease_time: float = 600.0  # seconds a request may take from fetch to store, however alive its worker
    max_worker_lost: int = 3  # deliveries of a request that may die with their worker before it fails
    # politeness, shared by all workers through Redis
    host_random_delay: float = 0.0  # up to this many seconds added at random to host_delay
    max_retry_after: float = 300.0  # the longest a Retry-After (429/503) holds a host, whatever it asks
    host_rules: list[dict[str, Any]] = field(default_factory=list)  # per-host limits, first match wins:
    # {"match": "*.example.com" or "re:^api\\.", "concurrency": 1, "delay": 2.0, "random_delay": 1.0}
    obey_robots: bool = True
    robots_ttl: int = 24 * 3600  # seconds a host's robots.txt stays cached
    # scope: every cut is counted in the stats as filtered_<reason>
    allow_patterns: list[str] = field(default_factory=list)  # regexes; if any, a URL must match one
    deny_patterns: list[str] = field(default_factory=list)  # regexes; a URL matching one is not followed
    max_pages: int = 0  # requests scheduled per crawl (0: no cap)
    max_pages_per_host: int = 0  # requests scheduled per host (0: no cap)
    max_run_time: float = 0.0  # seconds; past it the crawl is cancelled (0: no limit)
    visit_ttl: float = 0.0  # seconds; a URL stored by an earlier crawl of the spider within it is skipped
    # seconds a finished or cancelled crawl's working state stays in Redis (its meta and stats: 10 times
    # longer); 0 keeps it forever
    retention: float = field(default_factory=default_retention)
    # identities: user_agent "random" rotates built-in browser agents; providers are "module:callable"
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    user_agent_provider: str | None = None  # callable(request) -> User-Agent
    proxy_provider: str | None = None  # callable(request) -> proxy URL or None
    cookie_provider: str | None = None  # callable(request) -> dict of cookies
    item_meta: bool = False  # merge each request's meta into the items found on its page
    # item processors (crawltasks.items) after the spider's own: "module.Class" or {"class": ..., **arguments}
    item_pipelines: list[Any] = field(default_factory=list)
    item_fail_fast: bool = True  # a processor that raises (not DropItem) ends its item's chain: not stored
    cookie_jar: bool = False  # sessions: Set-Cookie answers kept per crawl, sent back (spider `cookies = True`)
    feed: bool = False  # seeds may be pushed while it runs (Crawl.add); finished only once closed
    sitemap_from_robots: bool = False  # seed the crawl with the sitemaps robots.txt lists
    # notifications (crawltasks.monitor.notify): a webhook URL gets a JSON summary when the crawl finishes, and an
    # alert when the share of failed requests over the last minute reaches notify_failure_rate
    notify: str | None = None
    notify_failure_rate: float = 0.5

    def __post_init__(self) -> None:
        _check(self.max_depth is None or self.max_depth >= 0, "max_depth must be >= 0")
        _check(self.max_retries >= 0, "max_retries must be >= 0")
        _check(self.batch_size >= 1, "batch_size must be >= 1")
        _check(self.max_worker_lost >= 1, "max_worker_lost must be >= 1")
        _check(self.host_concurrency >= 1, "host_concurrency must be >= 1")
        _check(self.host_delay >= 0, "host_delay must be >= 0")
        _check(self.timeout > 0, "timeout must be > 0")
        _check(self.lease_time > self.timeout, "lease_time must be longer than timeout")
        _check(self.dedupe in ("set", "bloom"), "dedupe must be 'set' or 'bloom'")
        _check(0 < self.bloom_error_rate < 1 and self.bloom_capacity > 0, "bad Bloom filter size")
        _check(self.dedupe == "set" or not (self.max_pages or self.max_pages_per_host),
               "max_pages and max_pages_per_host need dedupe='set'")
        _check(self.max_size > 0, "max_size must be > 0")
        _check(min(self.max_pages, self.max_pages_per_host, self.max_run_time, self.visit_ttl) >= 0,
               "limits must be >= 0")
        _check(self.retention >= 0, "retention must be >= 0 (0: keep forever)")
        _check(not self.notify or self.notify.startswith(("http://", "https://")),
               "notify must be an http:// or https:// URL")
        _check(0 < self.notify_failure_rate <= 1, "notify_failure_rate must be in (0, 1]")
        _check(all(isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("class"), str))
                   for p in self.item_pipelines),
               'item_pipelines takes "module.Class" or {"class": "module.Class", ...} entries')
        for pattern in [*self.allow_patterns, *self.deny_patterns]:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad URL pattern {pattern!r}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CrawlOptions:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k not in RETIRED}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown crawl option(s): {', '.join(unknown)}")
        return cls(**data)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
