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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

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


__all__ = ["Frontier", "Storage", "Transport"]
