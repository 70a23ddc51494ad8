"""The store side's ports: ``Storage``, where a crawl's documents go; ``BodyStore``, where a fetched
body waits for its parse and store tasks; ``ValidatorStore``, what a re-crawl asks conditionally with;
``ItemKeys``, the item keys a crawl's ``Dedupe`` claimed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol


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


class Validators(NamedTuple):
    """What the last crawl that stored a page knew of it, for the next crawl of its spider to ask
    conditionally (``frontier.revisit``)."""

    crawl_id: str  # the crawl whose page document it is (a 304 touches that one)
    etag: str | None
    last_modified: str | None
    content_hash: str | None


class ValidatorStore(Protocol):
    """Every spider's page validators by fingerprint, across its crawls: the store has no index on a
    fingerprint across crawls. A spider's validators expire ``keep`` seconds after their last write."""

    def get(self, spider: str, fps: Sequence[str]) -> list[Validators | None]:
        """Each page's validators, in order, in one call; None where none are kept."""
        ...

    def put(self, spider: str, pages: Mapping[str, Validators], keep: int) -> None:
        """Keep the validators of pages (fp -> validators), replacing older ones, and keep all the
        spider's for ``keep`` seconds (> 0) from now."""
        ...


class ItemKeys(Protocol):
    """Which item claimed each key of a crawl first, across every worker (``items.Dedupe``): the key
    is a digest of an item's key fields, its owner the claiming item's own fingerprint."""

    def claim(self, crawl_id: str, key: str, owner: str) -> str | None:
        """Claim ``key`` for ``owner``, atomically: None if it was free (it is ``owner``'s now), else
        the owner that claimed it first ("" if that one had none)."""
        ...

    def count(self, crawl_id: str) -> int:
        """How many keys of the crawl are claimed."""
        ...
