"""Per-host politeness shared by every worker: parallel slots, delays, random delays, per-host rules,
robots.txt Crawl-delay, and back-off on 429/503. The state is in Redis (``RedisState``); this module
decides the limits and drives a batch of fetches under them without holding a worker asleep."""

from __future__ import annotations

import fnmatch
import random
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from . import logs
from .fetch import fetch_one
from .models import Fetched, Request
from .redisstate import RedisState
from .settings import CrawlOptions
from .urls import host_key

MAX_GATE_WAIT = 2.0  # seconds a fetch task waits for busy hosts before it defers their requests
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


class HostGate:
    """Takes and gives back a host's shared slots, and reports how the host answered."""

    def __init__(self, state: RedisState, options: CrawlOptions, crawl_delay=None,
                 crawl_id: str | None = None) -> None:
        self.state = state
        self.crawl_id = crawl_id
        self.options = options
        self.crawl_delay = crawl_delay  # callable(host) -> robots.txt Crawl-delay seconds or None

    def acquire(self, host: str) -> tuple[str | None, float]:
        limits = limits_for(host, self.options)
        delay = limits.delay + (random.uniform(0, limits.random_delay) if limits.random_delay else 0.0)
        robots_delay = self.crawl_delay(host) if self.crawl_delay else None
        if robots_delay:
            delay = max(delay, robots_delay)
        return self.state.acquire_host(host, limits.concurrency, delay, lease=self.options.timeout + 30)

    def release(self, host: str, token: str) -> None:
        self.state.release_host(host, token)

    def feedback(self, host: str, result: Fetched) -> None:
        """429 and 503 slow the host down for every worker, honouring Retry-After."""
        if result.status in SLOW_STATUSES:
            extra = self.state.host_feedback(host, slow=True, wait=result.retry_after or 0.0)
            logs.host_backoff(self.crawl_id, host, max(extra, result.retry_after or 0.0), f"http_{result.status}",
                              result.request.url)
        elif result.ok and random.random() < 0.2:
            self.state.host_feedback(host, slow=False)  # sampled: recovery needs no call per page


@dataclass
class BatchResult:
    fetched: list[tuple[Fetched, bytes | None]]
    deferred: list[Request]  # hosts were busy: to be fetched later
    wait: float  # seconds until the soonest deferred host may be asked again


def fetch_batch(gate: HostGate, requests_: list[Request], options: CrawlOptions,
                max_gate_wait: float = MAX_GATE_WAIT) -> BatchResult:
    """Fetch a batch concurrently, each request under its host's shared slot and delay.

    Requests whose host stays busy past ``max_gate_wait`` are returned as deferred, so the
    worker slot is not held asleep waiting for a slow or throttled host.
    """
    waiting = list(requests_)
    results: list[tuple[Fetched, bytes | None]] = []
    gate_deadline = time.monotonic() + max_gate_wait
    running: set[Future] = set()
    min_wait = 0.0

    def run(req: Request, host: str, token: str) -> tuple[Fetched, bytes | None]:
        try:
            fetched, body = fetch_one(req, options)
        finally:
            gate.release(host, token)
        gate.feedback(host, fetched)
        return fetched, body

    with ThreadPoolExecutor(max_workers=min(options.fetch_threads, len(requests_) or 1)) as pool:
        while waiting or running:
            still_waiting, waits = [], []
            busy: dict[str, float] = {}  # hosts that said no in this round are not asked again in it
            gate_open = time.monotonic() < gate_deadline
            for req in waiting:
                host = host_key(req.url)
                if not gate_open or len(running) >= options.fetch_threads or host in busy:
                    still_waiting.append(req)
                    continue
                token, wait_s = gate.acquire(host)
                if token is None:
                    busy[host] = wait_s
                    still_waiting.append(req)
                    waits.append(wait_s)
                    continue
                running.add(pool.submit(run, req, host, token))
            waiting = still_waiting
            min_wait = min(waits) if waits else min_wait
            if waiting and not gate_open and not running:
                break
            if running:
                done, running = wait(running, timeout=min(max(min_wait, 0.01), 0.25) if waiting else None,
                                     return_when=FIRST_COMPLETED)
                results.extend(f.result() for f in done)
            elif waiting:
                time.sleep(min(max(min_wait, 0.01), 0.25, max(0.0, gate_deadline - time.monotonic()) + 0.01))
    return BatchResult(fetched=results, deferred=waiting, wait=min_wait)
