"""Per-host politeness shared by every worker: parallel slots, delays, random delays, per-host rules,
robots.txt Crawl-delay, and back-off on 429/503. The state is in Redis (``RedisState``); this module
decides the limits and drives a batch of fetches under them without holding a worker asleep."""

from __future__ import annotations

import fnmatch
import os
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import Empty, SimpleQueue

from . import logs
from .fetch import fetch_one
from .models import Fetched, Request
from .redisstate import RedisState, SlotRequest
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
        self.backed_off: dict[str, bool] = {}  # as of the last answer from Redis about the host
        self.options = options
        self.crawl_delay = crawl_delay  # callable(host) -> robots.txt Crawl-delay seconds or None

    def slot_request(self, host: str, want: int) -> SlotRequest:
        """What to ask for: up to ``want`` slots of host under its limits, robots.txt Crawl-delay included."""
        limits = limits_for(host, self.options)
        delay = limits.delay + (random.uniform(0, limits.random_delay) if limits.random_delay else 0.0)
        robots_delay = self.crawl_delay(host) if self.crawl_delay else None
        if robots_delay:
            delay = max(delay, robots_delay)
        return SlotRequest(host, want, limits.concurrency, delay, lease=self.options.timeout + 30)

    def exchange(self, release: list[tuple[str, str]], wants: dict[str, int]) -> dict[str, tuple[list[str], float]]:
        """Give back (host, token) slots and take up to ``wants[host]`` new ones, in one round trip:
        host -> (tokens granted, seconds to wait when none was)."""
        asks = [self.slot_request(host, n) for host, n in wants.items()]
        out = {}
        for ask, (tokens, wait_s, extra) in zip(asks, self.state.exchange_slots(release, asks), strict=True):
            self.backed_off[ask.host] = extra > 0
            out[ask.host] = (tokens, wait_s)
        return out

    def release(self, slots: list[tuple[str, str]]) -> None:
        """Give back (host, token) slots."""
        if slots:
            self.state.release_slots(slots)

    def feedback(self, host: str, result: Fetched) -> None:
        """429 and 503 slow the host down for every worker, honouring Retry-After; good answers
        shorten a back-off (only hosts that have one are told, sampled: one call per few pages)."""
        if result.status in SLOW_STATUSES:
            # a hostile Retry-After (an hour, a date years ahead) holds the host no longer than this
            hold = min(result.retry_after or 0.0, self.options.max_retry_after)
            extra = self.state.host_feedback(host, slow=True, wait=hold)
            self.backed_off[host] = True
            logs.host_backoff(self.crawl_id, host, max(extra, hold), f"http_{result.status}",
                              result.request.url)
        elif result.ok and self.backed_off.get(host, True) and random.random() < 0.2:
            self.backed_off[host] = self.state.host_feedback(host, slow=False) > 0


def _fetch_into(answers: SimpleQueue, req: Request, host: str, token: str, options: CrawlOptions) -> None:
    """On a pool thread: fetch, and hand the answer to the batch's queue (one wake-up per answer)."""
    try:
        answers.put((host, token, fetch_one(req, options)))
    except BaseException as exc:  # noqa: BLE001 - fetch_one never raises; if it does, the batch re-raises
        answers.put((host, token, exc))


@dataclass
class BatchResult:
    fetched: list[tuple[Fetched, bytes | None]]
    deferred: list[Request]  # hosts were busy: to be fetched later
    wait: float  # seconds until the soonest deferred host may be asked again


_pool: tuple[int, ThreadPoolExecutor] | None = None


def http_pool() -> ThreadPoolExecutor:
    """One thread pool per process for all fetch tasks (a new pool per batch costs thread starts)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=256, thread_name_prefix="fetch"))
    return _pool[1]


def fetch_batch(gate: HostGate, requests_: list[Request], options: CrawlOptions,
                max_gate_wait: float = MAX_GATE_WAIT) -> BatchResult:
    """Fetch a batch concurrently (up to ``fetch_threads`` at once), each request under a shared slot
    of its host.

    Slots are asked for the whole batch at once, as many as each host grants, and given back when
    slots are asked for again or the batch is done: one Redis round trip per round, not per request.
    Holding a slot a little longer than its request only ever lowers a host's concurrency. Requests
    whose host stays busy past ``max_gate_wait`` are returned as deferred, so the worker slot is not
    held asleep waiting for a slow or throttled host.
    """
    pool = http_pool()
    waiting = list(requests_)  # no slot yet
    ready: list[tuple[Request, str, str]] = []  # (request, host, token): a slot, waiting for a thread
    running: set[tuple[str, str]] = set()  # (host, token) of the requests on a thread
    answers: SimpleQueue = SimpleQueue()  # (host, token, (Fetched, body) or the error), as they finish
    results: list[tuple[Fetched, bytes | None]] = []
    gate_deadline = time.monotonic() + max_gate_wait
    done_slots: list[tuple[str, str]] = []  # given back with the next request for slots
    min_wait = 0.0
    try:
        while waiting or ready or running:
            asking = bool(waiting) and not ready and time.monotonic() < gate_deadline
            if asking:
                by_host: dict[str, list[Request]] = {}
                for req in waiting:
                    by_host.setdefault(host_key(req.url), []).append(req)
                granted = gate.exchange(done_slots, {host: len(reqs) for host, reqs in by_host.items()})
                done_slots = []
                waiting, waits = [], []
                for host, reqs in by_host.items():
                    tokens, wait_s = granted[host]
                    ready.extend((req, host, token) for req, token in zip(reqs, tokens, strict=False))
                    waiting.extend(reqs[len(tokens):])
                    if not tokens and wait_s:
                        waits.append(wait_s)
                min_wait = min(waits) if waits else min_wait
            elif done_slots and not ready:  # nothing to ask for (or too late to): give them back now
                gate.release(done_slots)
                done_slots = []
            while ready and len(running) < options.fetch_threads:
                req, host, token = ready.pop(0)
                running.add((host, token))
                pool.submit(_fetch_into, answers, req, host, token, options)
            if not running:
                if not waiting or time.monotonic() >= gate_deadline:
                    break
                time.sleep(min(max(min_wait, 0.01), 0.25, max(0.0, gate_deadline - time.monotonic()) + 0.01))
                continue
            arrived = []
            try:  # the first answer (waiting at most until busy hosts may be asked again), then all in
                arrived.append(answers.get(timeout=min(max(min_wait, 0.01), 0.25) if waiting and not ready else None))
                while True:
                    arrived.append(answers.get_nowait())
            except Empty:
                pass
            for host, token, outcome in arrived:
                running.discard((host, token))
                done_slots.append((host, token))
                if isinstance(outcome, BaseException):
                    raise outcome
                gate.feedback(host, outcome[0])
                results.append(outcome)
    finally:  # slots still held (on an error, also the running and ready ones): not held until leases expire
        gate.release(done_slots + list(running) + [(host, token) for _, host, token in ready])
    return BatchResult(fetched=results, deferred=waiting, wait=min_wait)
