"""robots.txt, obeyed by default: fetched once per host by one worker, cached in Redis with a TTL,
parsed with protego (and kept parsed per process). Crawl-delay feeds the host's shared delay."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from protego import Protego

from . import logs
from .fetch import fetch_one
from .models import Request
from .redisstate import Keys, RedisState
from .settings import CrawlOptions
from .urls import host_key

ALLOW, DENY, WAIT = "allow", "deny", "wait"
ERROR_TTL = 600  # seconds an unreachable robots.txt counts as "allow all" before it is asked again
MAX_ROBOTS_SIZE = 512 * 1024


_PARSED: dict[str, tuple[float, Protego]] = {}  # origin -> (expires, rules): parsed once per process


def origin_of(url: str) -> str:
    """scheme://host:port: the unit a robots.txt applies to."""
    scheme = url.split(":", 1)[0].lower()
    return f"{scheme}://{host_key(url)}"


class Robots:
    """robots.txt rules for one crawl's requests, shared through Redis."""

    def __init__(self, state: RedisState, options: CrawlOptions, agent: str = "crawltasks") -> None:
        self.state = state
        self.options = options
        self.agent = agent
        self._parsed = _PARSED

    def verdict(self, url: str) -> str:
        """ALLOW, DENY, or WAIT while another worker is fetching the host's robots.txt."""
        rules = self.rules(origin_of(url))
        if rules is None:
            return WAIT
        return ALLOW if rules.can_fetch(url, self.agent) else DENY

    def crawl_delay(self, host: str) -> float | None:
        """Crawl-delay for a host ("name:port") if its robots.txt is known here."""
        for scheme in ("http", "https"):
            cached = self._parsed.get(f"{scheme}://{host}")
            if cached:
                delay = cached[1].crawl_delay(self.agent)
                return float(delay) if delay else None
        return None

    def sitemaps(self, url: str) -> list[str]:
        rules = self.rules(origin_of(url), wait=5.0)
        return list(rules.sitemaps) if rules is not None else []

    def rules(self, origin: str, wait: float = 0.0) -> Protego | None:
        cached = self._parsed.get(origin)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        deadline = time.monotonic() + wait
        while True:
            text = self.state.r.get(Keys.robots(origin))
            if text is None and self.state.r.set(Keys.robots_lock(origin), "1", nx=True, ex=60):
                try:
                    text = self._download(origin)
                finally:
                    self.state.r.delete(Keys.robots_lock(origin))
            if text is not None:
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)
        rules = Protego.parse(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)
        if len(self._parsed) > 1024:
            self._parsed.clear()
        self._parsed[origin] = (time.monotonic() + 300, rules)
        return rules

    def _download(self, origin: str) -> str:
        """Fetch and cache robots.txt; a missing one allows everything, an unreachable one too for a while."""
        options = replace(self.options, timeout=min(self.options.timeout, 10.0), max_size=MAX_ROBOTS_SIZE)
        fetched, body = fetch_one(Request(url=origin + "/robots.txt"), options)
        if fetched.ok and body is not None:
            text, ttl = body.decode("utf-8", "replace"), self.options.robots_ttl
        elif fetched.status is not None and 400 <= fetched.status < 500:
            text, ttl = "", self.options.robots_ttl
        else:
            logs.event("robots.unreachable", logging.WARNING, url=f"{origin}/robots.txt", reason=fetched.error,
                       allow_all_for=ERROR_TTL)
            text, ttl = "", ERROR_TTL
        self.state.r.set(Keys.robots(origin), text, ex=ttl)
        return text
