"""The ports: what the stages need from the world, as small Protocols.

Each has its shared implementation (Redis, MongoDB, requests) and an in-memory twin in
``crawltasks.backends.memory``; one contract suite per port runs against both, so a test of a
policy on the twin says what the real thing does.

- ``Frontier`` (``frontier/queues.py``): scheduled requests per host, readiness, claims.
- ``Transport`` (below): one prepared request sent, its response back. Real: ``transport.PooledTransport``;
  twin: ``backends.memory.transport.MockTransport``; contract: ``tests/test_transport_contract.py``.
- ``Storage`` (below): pages, items and failure records, one document per (crawl_id, fp), and one
  record per crawl. Real: ``store.MongoStorage``; twin: ``backends.memory.storage.MemoryStorage``;
  contract: ``tests/test_storage_contract.py``.
- ``BodyStore`` (below): fetched bodies parked for their parse and store tasks, with a TTL. Real:
  ``backends.redis.bodies.RedisBodies``; twin: ``backends.memory.bodies.MemoryBodies``; contract:
  ``tests/test_bodies_contract.py``.
- ``HostGate`` (below): every worker's slots of a host, its delay and back-off. Real:
  ``backends.redis.gate.RedisGate``; twin: ``backends.memory.gate.MemoryGate``; contract:
  ``tests/test_gate_contract.py``. (``politeness.CrawlGate`` is one crawl's use of it.)
- ``CrawlRegistry`` (below): every crawl's record, state, counters, completion, dedupe reads,
  retention, visits and notification marks. Real: ``backends.redis.registry.RedisState``; twin:
  ``backends.memory.registry.MemoryRegistry``; contract: ``tests/test_registry_contract.py``.
- ``Sender`` (below): work handed to the stage workers: fetch batches, parse -> store chains. Real:
  ``sending.CelerySender``; twin: ``backends.memory.sender.MemorySender``; contract:
  ``tests/test_sender_contract.py``. A process has one (``Runtime.sender``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import requests

from .frontier.queues import Entry, Frontier
from .models import Fetched


class Transport(Protocol):
    """What the fetch stage needs of HTTP: one hop, nothing more. Redirects, the SSRF guard, the size
    and total-time caps and the classification of failures are the fetch's (``fetch.fetch_one``), so
    that they are the same whatever carries the bytes."""

    def send(self, request: requests.PreparedRequest, proxies: dict[str, str],
             timeout: tuple[float, float]) -> requests.Response:
        """Send ``request`` as it is (through ``proxies``; ``timeout`` is (connect, read) seconds)
        and return its response unread: the body streams from ``response.raw`` (``iter_content``
        decodes its Content-Encoding), no redirect is followed. A failure to get an answer raises
        what requests raises (``requests.ConnectionError``, ``requests.Timeout``, ...)."""
        ...


class Storage(Protocol):
    """Where a crawl's documents go. Writes are buffered: ``add`` queues them by ``doc_id``, and only
    ``flush`` (or a full or old buffer) makes them visible; a key written again is upserted (its new
    fields replace, the others stay), the last write of a key in one flush wins. Reads give
    documents without ``_id`` and the internal fields (``store.INTERNAL``), in no promised order (a
    MongoDB reads a crawl by ``_id``, the embedded store in the order first written), but for
    ``latest``: newest first, a key written again keeping its place."""

    def add(self, collection: str, docs: list[dict[str, Any]]) -> None:
        """Queue documents (each with ``crawl_id`` and ``fp``) for ``pages``, ``items`` or ``failures``."""

    def flush(self) -> int:
        """Write everything queued; returns how many documents that was."""

    def ensure_indexes(self) -> None:
        """Create what the queries need; safe to call again."""

    def close(self) -> None:
        """Let go of connections."""

    def pages(self, crawl_id: str) -> Iterator[dict[str, Any]]:
        """The crawl's pages."""

    def items(self, crawl_id: str) -> Iterator[dict[str, Any]]:
        """The crawl's items."""

    def failures(self, crawl_id: str, reason: str | None = None) -> Iterator[dict[str, Any]]:
        """The crawl's failure records, of one reason if given."""

    def count(self, collection: str, crawl_id: str) -> int:
        """How many documents of the crawl a collection holds."""

    def latest(self, collection: str, crawl_id: str, limit: int = 20,
               fields: list[str] | None = None) -> list[dict[str, Any]]:
        """The crawl's last-written documents, newest first (only ``fields`` if given)."""

    def failure_samples(self, crawl_id: str, reasons: list[str], per_reason: int = 3) -> dict[str, list[str]]:
        """A few failed URLs of each reason."""

    def failures_page(self, crawl_id: str, reason: str | None, skip: int, limit: int) -> list[dict[str, Any]]:
        """One page of the crawl's failure records (``limit`` 0: all the rest)."""

    def failure_counts(self, crawl_id: str) -> dict[str, int]:
        """Failure records by reason (no reason counts as "None")."""

    def scan(self, collection: str, crawl_id: str, fields: list[str],
             having: str | None = None) -> Iterator[dict[str, Any]]:
        """Only ``fields`` (internal ones too) of the crawl's documents that have ``having``."""

    def touch_pages(self, keys: list[tuple[str, str]], checked_at: str) -> None:
        """Set ``checked_at`` on the stored pages named by (crawl_id, fp)."""

    def delete_failures(self, crawl_id: str, fps: list[str]) -> None:
        """Forget failure records (they are being retried)."""

    def delete_crawl(self, crawl_id: str) -> None:
        """Every document and the record of a crawl."""

    def save_crawl(self, crawl_id: str, record: dict[str, Any], started_at: float) -> None:
        """Write or refresh a crawl's record; it is unfinished again, its first start time stays."""

    def crawl_record(self, crawl_id: str) -> dict[str, Any] | None:
        """The crawl's record (with ``_id``), or None."""

    def crawl_ended(self, crawl_id: str, state: str) -> None:
        """Mark a recorded crawl finished with ``state``, once."""

    def unfinished_crawls(self) -> list[dict[str, Any]]:
        """``_id`` and ``started_at`` of the records never marked finished."""


class BodyStore(Protocol):
    """Where a fetched body waits for its parse and store tasks: a broker message carries only its key.
    A body expires ``ttl`` seconds after it was parked (its request then fails ``body_expired``)."""

    def key(self, crawl_id: str, ticket: str) -> str:
        """The key ``park`` gives the body of ``ticket`` (a stale delivery recognises the refetch's)."""

    def park(self, crawl_id: str, bodies: dict[str, bytes], ttl: int) -> dict[str, str]:
        """Keep bodies (ticket -> bytes) for ``ttl`` seconds (> 0), replacing any under the same
        keys, in one call; returns ticket -> key."""

    def load(self, keys: Sequence[str]) -> list[bytes | None]:
        """The bodies under ``keys``, in order, in one call; None for one dropped or expired."""

    def drop(self, keys: Sequence[str]) -> None:
        """Forget bodies (their page is stored); unknown keys are ignored."""


@dataclass(frozen=True)
class SlotRequest:
    """Up to ``want`` slots of ``host`` under its limits: at most ``limit`` in flight, ``delay``
    seconds between starts; a slot not given back is freed after ``lease`` seconds."""

    host: str
    want: int
    limit: int
    delay: float
    lease: float = 120.0


class Grant(NamedTuple):
    """The answer to one ``SlotRequest``."""

    tokens: list[str]  # the slots granted: give each back with its host
    wait: float  # seconds to wait before asking again, when none was granted
    backoff: float  # the host's extra delay in seconds (only a backed-off host is told of good answers)
    next_start: float = 0.0  # with a delay: the host's next start this grant set (gate's clock, seconds)


class HostLoad(NamedTuple):
    """How a host's gate looks now (the monitor's hosts table)."""

    in_flight: int  # slots held and not expired
    wait: float  # seconds until the next start may be granted (0: now)
    backoff: float  # extra seconds between starts after 429/503 answers


class HostGate(Protocol):
    """The politeness gate of every host, shared by every worker and crawl: a start needs a slot.

    A host has at most ``limit`` slots held; with a delay (the request's, plus the back-off) one slot
    at a time is granted and the next not before ``delay`` later. A slot ends when given back, when
    its lease runs out, or, taken for an ``owner`` (tokens "<owner>|..."), when the host is full and
    that owner has not beaten its heartbeat for ``dead_after`` seconds. A slow answer (429/503)
    doubles the host's back-off (1 s to 5 min) and holds the host for it (or the Retry-After); good
    answers halve it, it is gone under 0.1 s and ten times its length (10 s at least) after the last
    slow answer. Times are the gate's own clock. The convenience methods below are built on
    ``exchange``; implementations inherit them."""

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest],
                 owner: str = "", dead_after: float = 10.0,
                 started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        """Tell of (host, delay) starts that happened only now (each as ``started``), give back (host,
        token) slots, then answer each request in turn, all in one call: a start told here holds back
        every grant of its host from this call on."""
        ...

    def feedback(self, host: str, slow: bool, wait: float = 0.0) -> float:
        """How the host answered (slow: 429/503, ``wait`` its Retry-After); returns its back-off in s."""
        ...

    def started(self, host: str, delay: float) -> None:
        """A request of the host started only now: its next start waits ``delay`` from now, at least."""
        ...

    def late_start(self, host: str, delay: float, mine: float) -> tuple[float, float]:
        """A request reaches the wire late, its grant having set the host's next start to ``mine``: it
        starts now if no start was granted after its own, else when that one's delay ends; the next
        start waits ``delay`` after it. Returns (seconds to wait before starting, the host's next
        start now set: the ``mine`` of a later call for the same request)."""
        ...

    def view(self, hosts: Sequence[str]) -> list[HostLoad]:
        """How each of ``hosts`` looks now, in order."""
        ...

    def acquire(self, host: str, want: int, limit: int, delay: float,
                lease: float = 120.0) -> tuple[list[str], float]:
        """Up to ``want`` of host's slots: (tokens granted, seconds to wait if none)."""
        [(tokens, wait, _, _)] = self.exchange([], [SlotRequest(host, want, limit, delay, lease)])
        return tokens, wait

    def acquire_one(self, host: str, limit: int, delay: float, lease: float = 120.0) -> tuple[str | None, float]:
        """One of host's slots: (token, 0), else (None, seconds to wait)."""
        tokens, wait = self.acquire(host, 1, limit, delay, lease)
        return (tokens[0], 0.0) if tokens else (None, wait)

    def release(self, slots: Iterable[tuple[str, str]]) -> None:
        """Give back (host, token) slots in one call."""
        self.exchange(list(slots), [])


class SeenFilter(Protocol):
    """A crawl's seen-set when it dedupes with a Bloom filter (``dedupe="bloom"``): no false
    negatives, so nothing is fetched twice. Real: ``bloom.BloomFilter``."""

    def check_and_add(self, fingerprints: Sequence[str], dont_filter: Sequence[bool] | None = None,
                      stats_key: str | None = None) -> list[bool]:
        """Add fingerprints atomically: True for each that was new (or dont_filter). With
        ``stats_key`` it counts scheduled, pending and duplicates as ``Frontier.add`` does."""
        ...

    def contains(self, fingerprints: Sequence[str]) -> list[bool]:
        """True for each fingerprint probably added (never False for an added one)."""
        ...

    def add(self, fingerprint: str) -> bool:
        """Add one fingerprint; True if it was new."""
        ...


class Sender(Protocol):
    """How work leaves a process for the stage workers: one broker message a call, on the queue the
    routes of ``celeryconfig`` give its task. JSON only: what Celery's JSON cannot carry raises
    ``kombu.exceptions.EncodeError`` and nothing is sent; what arrives is what JSON makes of it."""

    def send_batch(self, crawl_id: str, priority: str, batch: Sequence[Entry]) -> None:
        """One fetch task for requests taken from the frontier, on the fetch queue of ``priority``;
        the entries travel as the frontier keeps them (lease and encoded request)."""
        ...

    def send_results(self, crawl_id: str, results: Sequence[Fetched]) -> None:
        """One parse -> store chain for fetched requests of a crawl (their bodies stay parked)."""
        ...


class CrawlRegistry(Protocol):
    """Every crawl's record (options, seeds, state, start and finish times) and counters, and the
    transitions between its states, each atomic across workers (Redis: one Lua script each).

    Completion: ``finish`` counts each ticket's outcome once, whatever the replays, and takes
    ``pending`` down; the crawl is finished, once, when ``pending`` reaches 0 and nothing holds it
    open (``hold_open``: its seeds may still come) or it is being cancelled (then it ends
    ``cancelled``). A crawl whose record is gone or whose ``pending`` went below 0 is never called
    finished: its state becomes ``lost``. A finished crawl is retired (it leaves ``active_crawls``
    and its state expires after its ``retention``); ``reopen`` and ``redrive`` make it run again.

    The counters are also written outside this port, in the same place (Redis: ``Keys.stats``):
    ``Frontier.add`` counts scheduled, pending, duplicates and the max_pages filters in the script
    that marks requests seen (``frontier_lua.SCHEDULE``), ``Frontier.drop_queued`` counts what a
    cancel drops as skipped (``DROP_QUEUED``); with ``dedupe="bloom"`` the same script sets and reads
    the filter's bits instead of the exact set. Whatever writes them,
    ``scheduled == stored + failed + skipped + pending``.

    Left out, Redis-only (monitoring reads): ``series``, ``recent``, ``now``, ``host_done``,
    ``crawl_hosts``; also ``retention_of``, and the raw client ``r`` (robots, sessions, revisits,
    and recovery still use it; the twin's is ``backends.memory.raw.MemoryRedis``).
    """

    # the registry
    def create_crawl(self, crawl_id: str, options: dict[str, Any], seeds: Sequence[str]) -> bool:
        """Register a running crawl; False if the id is taken (the crawl continues instead)."""
        ...

    def crawl_options(self, crawl_id: str) -> dict[str, Any] | None:
        """The options it was created with, or None."""
        ...

    def crawl_meta(self, crawl_id: str) -> dict[str, str]:
        """Its record as strings (options and seeds as JSON; empty: no such crawl)."""
        ...

    def crawl_ids(self) -> list[str]:
        """Every crawl whose record is still kept, oldest first."""
        ...

    def reopen(self, crawl_id: str) -> None:
        """A finished crawl runs again (more seeds, continued by id); its state no longer expires."""
        ...

    def is_finished(self, crawl_id: str) -> bool:
        ...

    # counters and completion
    def incr(self, crawl_id: str, **counts: int) -> None:
        """Add to counters (any name; zeros are no call)."""
        ...

    def stats(self, crawl_id: str) -> dict[str, int]:
        """Every counter (those never written: 0), with the extra ones written (filtered_*, ...)."""
        ...

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str, str]]) -> tuple[int, bool]:
        """Record final outcomes (ticket, stored|failed|skipped, lease) and end their claims; returns
        (newly counted, the crawl finished now). An unknown outcome raises ValueError, before anything."""
        ...

    def check_finished(self, crawl_id: str) -> bool:
        """Fire completion if nothing is pending (``finish`` of nothing)."""
        ...

    def outcome_of(self, crawl_id: str, ticket: str) -> str | None:
        ...

    def hold_open(self, crawl_id: str, why: str) -> None:
        """The crawl does not finish at pending 0 while its seeds may still come ("seeds", "feed")."""
        ...

    def drop_hold(self, crawl_id: str) -> bool:
        """No more seeds; True if it was held. Completion is the caller's ``check_finished``."""
        ...

    def held_open(self, crawl_id: str) -> str | None:
        ...

    # dedupe (the writes are ``Frontier.add``'s)
    def seen_already(self, crawl_id: str, fps: Sequence[str]) -> list[bool]:
        """Which fingerprints the exact seen-set has (it only grows)."""
        ...

    def claim_seen(self, crawl_id: str, fp: str, bloom: SeenFilter | None = None) -> bool:
        """Mark a fingerprint seen (a redirect target), in ``bloom`` when the crawl has one; True if new."""
        ...

    def bloom_filter(self, crawl_id: str, capacity: int, error_rate: float) -> SeenFilter:
        """The crawl's Bloom filter, sized for ``capacity`` at ``error_rate`` (a size other than the
        first one's is an error when used)."""
        ...

    # crawls not finished, retries, retention
    def active_crawls(self) -> list[str]:
        """The crawls not finished (what the reclaimer and dispatcher look at), sorted."""
        ...

    def forget_active(self, crawl_id: str) -> None:
        ...

    def redrive(self, crawl_id: str, tickets: Sequence[str]) -> list[bool]:
        """Failed tickets become pending again and the crawl runs; True for each that was failed."""
        ...

    def retire(self, crawl_id: str) -> bool:
        """A finished crawl leaves the active crawls and its state starts to expire; False if it is
        not finished (reopened meanwhile). Harmless to repeat."""
        ...

    def prune_crawls(self, limit: int = 100) -> int:
        """Forget the oldest ``limit`` crawls' registry entries whose record expired; how many."""
        ...

    # pages stored across crawls of a spider (visit_ttl)
    def mark_visited(self, spider: str, fps: Sequence[str], ttl: float) -> None:
        ...

    def visited_at(self, spider: str, fps: Sequence[str]) -> list[float | None]:
        """When each page was last stored (epoch seconds; None: not within the last ttl)."""
        ...

    # notification marks (crawltasks.monitor.notify)
    def mark_once(self, crawl_id: str, event: str, value: str, ttl: float) -> bool:
        """Claim ``event`` for ``ttl`` seconds; False if claimed before."""
        ...

    def update_mark(self, crawl_id: str, event: str, value: str) -> None:
        ...

    def mark_of(self, crawl_id: str, event: str) -> str | None:
        ...

    # control
    def control(self, crawl_id: str, from_states: Sequence[str], to_state: str) -> bool:
        """Move the crawl's state to ``to_state`` if it is one of ``from_states``; True if it did."""
        ...

    def state_of(self, crawl_id: str) -> str:
        """Its state ("" when there is no such crawl)."""
        ...

    def states_of(self, crawl_ids: Sequence[str]) -> list[str]:
        ...

    def state_and_generation(self, crawl_id: str) -> tuple[str, str]:
        """Its state and generation ("" each when unset; a crawl rebuilt after its state was lost has
        a new generation, and with it a new seen-set in each process's ``KnownSeen``)."""
        ...

    def finished_times(self, crawl_ids: Sequence[str]) -> list[float | None]:
        ...

    def delete_crawl(self, crawl_id: str) -> None:
        """Forget every piece of the crawl (its ids are never reused)."""
        ...


__all__ = ["BodyStore", "CrawlRegistry", "Frontier", "Grant", "HostGate", "HostLoad", "SeenFilter", "Sender",
           "SlotRequest", "Storage", "Transport"]
