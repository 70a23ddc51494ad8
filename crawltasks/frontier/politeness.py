"""Per-host politeness shared by every worker: parallel slots, delays, random delays, per-host rules,
robots.txt Crawl-delay, and back-off on 429/503. The state is the shared gate (the ``HostGate`` port,
in Redis: ``backends.redis.gate``); this module decides the limits. The frontier paces what it hands
out by them, and a fetch engine takes a slot of the shared gate right before each request starts, so
the spacing holds where the site sees it."""

from __future__ import annotations

import fnmatch
import random
import re
from dataclasses import dataclass

from .. import logs
from ..models import Fetched
from ..ports import HostGate, SlotRequest
from ..settings import CrawlOptions
from .queues import HostPolicy

GATE_MARGIN = 0.01  # seconds the shared gate adds to a host's delay
SLOW_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class HostLimits:
    concurrency: int
    delay: float
    random_delay: float


def limits_for(host: str, options: CrawlOptions) -> HostLimits:
    """The crawl's limits for a host ("name:port"): the first matching host rule, else the defaults.

    A rule's ``match`` is a glob on the host name (``*.example.com``) or ``re:`` and a regex."""
    name = host.rsplit(":", 1)[0]
    for rule in options.host_rules:
        pattern = str(rule.get("match", "*"))
        hit = re.search(pattern[3:], name) if pattern.startswith("re:") else fnmatch.fnmatch(name, pattern)
        if hit:
            return HostLimits(int(rule.get("concurrency", options.host_concurrency)),
                              float(rule.get("delay", options.host_delay)),
                              float(rule.get("random_delay", options.host_random_delay)))
    return HostLimits(options.host_concurrency, options.host_delay, options.host_random_delay)


def crawl_policy(options: CrawlOptions) -> HostPolicy:
    """The frontier's pacing of a crawl's hosts that no host rule names."""
    return HostPolicy(options.host_concurrency, options.host_delay, options.host_random_delay)


def host_policy(host: str, options: CrawlOptions, robots_delay: float | None = None) -> HostPolicy | None:
    """A host's own pacing when a host rule or its robots.txt Crawl-delay sets one, else None."""
    limits = limits_for(host, options)
    delay = max(limits.delay, robots_delay or 0.0)
    if (limits.concurrency, delay, limits.random_delay) == (options.host_concurrency, options.host_delay,
                                                            options.host_random_delay):
        return None
    return HostPolicy(limits.concurrency, delay, limits.random_delay)


class CrawlGate:
    """One crawl's use of the shared gate: what to ask for under its limits, and how hosts answered."""

    def __init__(self, gate: HostGate, options: CrawlOptions, crawl_delay=None,
                 crawl_id: str | None = None) -> None:
        self.gate = gate
        self.crawl_id = crawl_id
        self.backed_off: dict[str, bool] = {}  # as of the gate's last answer about the host
        self.options = options
        self.crawl_delay = crawl_delay  # callable(host) -> robots.txt Crawl-delay seconds or None

    def slot_request(self, host: str, want: int) -> SlotRequest:
        """What to ask for: up to ``want`` slots of host under its limits, robots.txt Crawl-delay included."""
        limits = limits_for(host, self.options)
        delay = limits.delay + (random.uniform(0, limits.random_delay) if limits.random_delay else 0.0)
        robots_delay = self.crawl_delay(host) if self.crawl_delay else None
        if robots_delay:
            delay = max(delay, robots_delay)
        if delay > 0:  # what the site sees is judged on its clock, with its own jitter: never cut it fine
            delay += GATE_MARGIN
        return SlotRequest(host, want, limits.concurrency, delay, lease=self.options.timeout + 30)

    def feedback(self, host: str, result: Fetched) -> float:
        """429 and 503 slow the host down for every worker, honouring Retry-After; good answers
        shorten a back-off (only hosts that have one are told, sampled: one call per few pages).
        Returns the seconds the host is now held (0 for a good answer)."""
        if result.status in SLOW_STATUSES:
            # a hostile Retry-After (an hour, a date years ahead) holds the host no longer than this
            hold = min(result.retry_after or 0.0, self.options.max_retry_after)
            extra = self.gate.feedback(host, slow=True, wait=hold)
            self.backed_off[host] = True
            logs.host_backoff(self.crawl_id, host, max(extra, hold), f"http_{result.status}",
                              result.request.url)
            return max(extra, hold)
        if result.ok and self.backed_off.get(host, True) and random.random() < 0.2:
            self.backed_off[host] = self.gate.feedback(host, slow=False) > 0
        return 0.0
