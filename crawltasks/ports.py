"""The ports: what the stages need from the world, as small Protocols.

Each has its shared implementation (Redis, MongoDB, requests) and an in-memory twin in
``crawltasks.backends.memory``; one contract suite per port runs against both, so a test of a
policy on the twin says what the real thing does.

- ``Frontier`` (``hostqueues.py``): scheduled requests per host, readiness, claims.
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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import requests

from .hostqueues import Frontier


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
                 owner: str = "", dead_after: float = 10.0) -> list[Grant]:
        """Give back (host, token) slots, then answer each request in turn, all in one call."""
        ...

    def feedback(self, host: str, slow: bool, wait: float = 0.0) -> float:
        """How the host answered (slow: 429/503, ``wait`` its Retry-After); returns its back-off in s."""
        ...

    def started(self, host: str, delay: float) -> None:
        """A request of the host started only now: its next start waits ``delay`` from now, at least."""
        ...

    def view(self, hosts: Sequence[str]) -> list[HostLoad]:
        """How each of ``hosts`` looks now, in order."""
        ...

    def acquire(self, host: str, want: int, limit: int, delay: float,
                lease: float = 120.0) -> tuple[list[str], float]:
        """Up to ``want`` of host's slots: (tokens granted, seconds to wait if none)."""
        [(tokens, wait, _)] = self.exchange([], [SlotRequest(host, want, limit, delay, lease)])
        return tokens, wait

    def acquire_one(self, host: str, limit: int, delay: float, lease: float = 120.0) -> tuple[str | None, float]:
        """One of host's slots: (token, 0), else (None, seconds to wait)."""
        tokens, wait = self.acquire(host, 1, limit, delay, lease)
        return (tokens[0], 0.0) if tokens else (None, wait)

    def release(self, slots: Iterable[tuple[str, str]]) -> None:
        """Give back (host, token) slots in one call."""
        self.exchange(list(slots), [])


__all__ = ["BodyStore", "Frontier", "Grant", "HostGate", "HostLoad", "SlotRequest", "Storage", "Transport"]
