"""Deciding what gets fetched: scope filters, fingerprints, atomic dedupe into the per-host frontier
(``crawltasks.frontier.queues``), and the back-off of retries.

The links this process knows to be seen (``KnownSeen``) are its runtime's (``rt.caches.known``):
given as ``known``, or those of ``runtime.current()``."""

from __future__ import annotations

import random
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..models import Request
from ..ports import CrawlRegistry, Frontier, SeenFilter
from ..settings import CrawlOptions
from ..states import STOPPING
from ..urls import (
    FOLLOWED_SCHEMES,
    InvalidURL,
    canonicalize,
    domain_set,
    fingerprint,
    host_key,
    host_of,
    in_domains,
    raw_fingerprint,
)
from .known import KnownSeen
from .politeness import host_policy
from .queues import DUPLICATE, NEW, Caps


@dataclass
class Plan:
    accepted: list[Request] = field(default_factory=list)
    filtered: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def plan_requests(requests: Iterable[Request], options: CrawlOptions) -> Plan:
    """Fingerprint the requests that are in scope; count the others by reason. Pure."""
    plan = Plan()
    in_scope: dict[str, bool] = {}  # host -> in allowed_domains: a batch's links share few hosts
    domains = domain_set(tuple(options.allowed_domains)) if options.allowed_domains is not None else frozenset()
    for req in requests:
        if req.depth is None:  # a seed, or a request made outside a callback
            req.depth = 0
        try:
            url = canonicalize(req.url)
        except InvalidURL:
            scheme = req.url.strip().split(":", 1)[0].lower() if ":" in req.url else ""
            if scheme and scheme.isalpha() and scheme not in FOLLOWED_SCHEMES:
                plan.filtered["scheme"] += 1
                continue
            # Kept so that it fails once at fetch with its reason on record.
            req.fp = req.fp or raw_fingerprint(req.url, req.method)
            plan.accepted.append(req)
            continue
        if options.max_depth is not None and req.depth > options.max_depth:
            plan.filtered["depth"] += 1
            continue
        if options.allowed_domains is not None:
            host = host_of(url)
            ok = in_scope.get(host)
            if ok is None:
                ok = in_scope[host] = in_domains(host, domains)
            if not ok:
                plan.filtered["offsite"] += 1
                continue
        if options.deny_patterns and any(re.search(p, url) for p in options.deny_patterns):
            plan.filtered["denied"] += 1
            continue
        if options.allow_patterns and not any(re.search(p, url) for p in options.allow_patterns):
            plan.filtered["not_allowed"] += 1
            continue
        req.url = url
        req.fp = fingerprint(url, req.method, req.meta, options.fingerprint_meta, req.body, req.headers,
                             options.fingerprint_headers)
        plan.accepted.append(req)
    return plan


def schedule(state: CrawlRegistry, frontier: Frontier, crawl_id: str, requests: Iterable[Request],
             options: CrawlOptions, known: KnownSeen | None = None) -> int:
    """Filter, dedupe atomically and queue new requests in the frontier; returns how many were new."""
    return len(schedule_new(state, frontier, crawl_id, requests, options, known))


def _known(known: KnownSeen | None) -> KnownSeen:
    """The links known seen given, or this process's: its callers hold its runtime, not the cache."""
    if known is not None:
        return known
    from .. import runtime  # which imports this module (KnownSeen)

    return runtime.current().caches.known


def schedule_new(state: CrawlRegistry, frontier: Frontier, crawl_id: str, requests: Iterable[Request],
                 options: CrawlOptions, known: KnownSeen | None = None) -> list[Request]:
    """``schedule``, returning the requests that were new (the parse stage keeps them with their page)."""
    status, generation = state.state_and_generation(crawl_id)
    if status in STOPPING:
        return []
    key = f"{crawl_id}@{generation}"  # a crawl rebuilt after its Redis state was lost has a new seen-set
    known = _known(known)
    plan = plan_requests(requests, options)
    reqs = plan.accepted
    if options.visit_ttl and reqs:
        reqs = drop_recently_visited(state, options, reqs, plan)
    if plan.filtered:
        state.incr(crawl_id, filtered=sum(plan.filtered.values()),
                   **{f"filtered_{k}": v for k, v in plan.filtered.items()})
    if options.dedupe == "set" and reqs:  # most links are known: drop them before serialising
        reqs = drop_known(state, crawl_id, reqs, key, known)
    for r in reqs:  # the ticket names this scheduling of the URL in the counters
        r.ticket = f"{r.fp}:{random.getrandbits(48):012x}" if r.dont_filter else r.fp
    return enqueue(state, frontier, crawl_id, reqs, options, key, known)


def enqueue(state: CrawlRegistry, frontier: Frontier, crawl_id: str, reqs: list[Request], options: CrawlOptions,
            key: str = "", known: KnownSeen | None = None) -> list[Request]:
    """Dedupe atomically and queue requests already in scope, with their tickets; returns the new ones.
    Those seen are remembered in ``known`` under ``key`` (the crawl and its generation), if given."""
    verdicts = frontier.add(crawl_id, reqs, Caps(options.max_pages, options.max_pages_per_host),
                            bloom=bloom_of(state, crawl_id, options))
    fresh = [r for r, verdict in zip(reqs, verdicts, strict=True) if verdict == NEW]
    if options.dedupe == "set" and key:
        _known(known).add(key, [r.fp for r, verdict in zip(reqs, verdicts, strict=True) if verdict in (NEW, DUPLICATE)])
    if options.host_rules and fresh:
        for host in {host_key(r.url) for r in fresh}:
            policy = host_policy(host, options)
            if policy is not None:
                frontier.set_limits(crawl_id, host, policy)
    return fresh


def drop_known(state: CrawlRegistry, crawl_id: str, reqs: list[Request], key: str = "",
               known: KnownSeen | None = None) -> list[Request]:
    """Requests without the ones whose fingerprint is already seen (counted as duplicates):
    first against what this process knows (under ``key``: the crawl and its generation), then the
    rest in one SMISMEMBER."""
    key, process_known = key or crawl_id, _known(known)
    seen_here = process_known.of(key)
    unknown = [r for r in reqs if r.dont_filter or r.fp not in seen_here]
    dups = len(reqs) - len(unknown)
    if len(unknown) > 1:  # one new link alone is settled by the schedule script itself
        seen = state.seen_already(crawl_id, [r.fp for r in unknown])
        process_known.add(key, [r.fp for r, s in zip(unknown, seen, strict=True) if s])
        kept = [r for r, s in zip(unknown, seen, strict=True) if not s or r.dont_filter]
        dups += len(unknown) - len(kept)
        unknown = kept
    if dups:
        state.incr(crawl_id, duplicates=dups)
    return unknown


def bloom_of(state: CrawlRegistry, crawl_id: str, options: CrawlOptions) -> SeenFilter | None:
    """The crawl's Bloom filter when it dedupes with one."""
    if options.dedupe != "bloom":
        return None
    return state.bloom_filter(crawl_id, options.bloom_capacity, options.bloom_error_rate)


def drop_recently_visited(state: CrawlRegistry, options: CrawlOptions, reqs: list[Request],
                          plan: Plan) -> list[Request]:
    """Requests whose page an earlier crawl of the same spider stored less than visit_ttl ago are cut."""
    stamps = state.visited_at(options.spider, [r.fp for r in reqs])
    cutoff = time.time() - options.visit_ttl
    kept = [r for r, at in zip(reqs, stamps, strict=True) if r.dont_filter or at is None or at < cutoff]
    if len(kept) < len(reqs):
        plan.filtered["recently_visited"] += len(reqs) - len(kept)
    return kept


def backoff(attempt: int, options: CrawlOptions, retry_after: float | None = None) -> float:
    """Exponential countdown with jitter, at least Retry-After, never above retry_cap."""
    delay = options.retry_base * (2 ** attempt) * random.uniform(0.8, 1.2)
    if retry_after:
        delay = max(delay, retry_after)
    return round(min(delay, options.retry_cap), 3)
