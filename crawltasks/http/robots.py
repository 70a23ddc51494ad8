"""robots.txt, obeyed by default: fetched once per host by one worker, shared by every worker with a
TTL (the runtime's ``RobotsCache``: Redis), parsed with protego (and kept parsed per process, in
``ProcessCaches.robots``). Crawl-delay feeds the host's shared delay.

A fetch engine asks without waiting (``known``); the one worker that wins ``lock`` fetches the file
under the host's politeness gate like any request and ``store``s it; the others look again later."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from protego import Protego

from .. import logs, runtime
from ..models import Request
from ..settings import CrawlOptions
from ..urls import host_key
from .fetch import fetch_one

ALLOW, DENY, WAIT = "allow", "deny", "wait"
ERROR_TTL = 600  # seconds an unreachable robots.txt counts as "allow all" before it is asked again
MAX_ROBOTS_SIZE = 512 * 1024
LOCK_TTL = 60  # seconds a worker may take to download a robots.txt before another may try


def origin_of(url: str) -> str:
    """scheme://host:port: the unit a robots.txt applies to."""
    scheme = url.split(":", 1)[0].lower()
    return f"{scheme}://{host_key(url)}"


class Robots:
    """robots.txt rules for one crawl's requests. ``rt`` is the process's runtime, whose shared texts
    (``rt.robots``), parsed rules and transport it uses (by default ``runtime.current()``)."""

    def __init__(self, options: CrawlOptions, agent: str = "crawltasks", rt: runtime.Runtime | None = None) -> None:
        self.options = options
        self.agent = agent
        self.rt = rt or runtime.current()
        self._parsed = self.rt.caches.robots

    def verdict(self, url: str, rules: Protego | None = None) -> str:
        """ALLOW or DENY by the origin's rules (given, or known here); WAIT while they are not known."""
        if rules is None:
            rules = self.known(origin_of(url))
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

    def known(self, origin: str) -> Protego | None:
        """The origin's rules if this process or the shared cache has them; never downloads."""
        cached = self._parsed.get(origin)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        text = self.rt.robots.text(origin)
        return None if text is None else self._remember(origin, text)

    def lock(self, origin: str) -> bool:
        """True if this caller is now the one to download the origin's robots.txt."""
        return self.rt.robots.lock(origin, LOCK_TTL)

    def unlock(self, origin: str) -> None:
        self.rt.robots.unlock(origin)

    def rules(self, origin: str, wait: float = 0.0) -> Protego | None:
        """The origin's rules, downloading them here if nobody else is (outside any gate: only for
        the sitemaps of a crawl's seeds); None if another worker is still at it after ``wait`` s."""
        deadline = time.monotonic() + wait
        while True:
            rules = self.known(origin)
            if rules is not None:
                return rules
            if self.lock(origin):
                try:
                    return self._remember(origin, self.download(origin))
                finally:
                    self.unlock(origin)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _remember(self, origin: str, text: str) -> Protego:
        rules = Protego.parse(text)
        if len(self._parsed) > 1024:
            self._parsed.clear()
        self._parsed[origin] = (time.monotonic() + 300, rules)
        return rules

    def download(self, origin: str, on_send: Callable[[bool], None] | None = None) -> str:
        """Fetch and cache robots.txt; a missing one allows everything, an unreachable one too for a while."""
        options = replace(self.options, timeout=min(self.options.timeout, 10.0), max_size=MAX_ROBOTS_SIZE)
        fetched, body = fetch_one(Request(url=origin + "/robots.txt"), options, on_send, rt=self.rt)
        if fetched.ok and body is not None:
            text, ttl = body.decode("utf-8", "replace"), self.options.robots_ttl
        elif fetched.status is not None and 400 <= fetched.status < 500:
            text, ttl = "", self.options.robots_ttl
        else:
            logs.event("robots.unreachable", logging.WARNING, url=f"{origin}/robots.txt", reason=fetched.error,
                       allow_all_for=ERROR_TTL)
            text, ttl = "", ERROR_TTL
        self.rt.robots.put(origin, text, ttl)
        return text
