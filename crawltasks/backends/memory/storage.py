"""The crawl's documents in this process's memory: the twin of ``MongoStorage`` for tests without a
store. Both pass the same contract tests (``tests/test_storage_contract.py``).

It copies what the server does that callers can see: keys from ``doc_id``, a write buffer flushed
when full or old, a key written again keeping its place and its other fields (an upsert ``$set``),
reads without ``_id`` and the internal fields, and values copied in and out (tuples come back as
lists), so a caller's later change never shows. Reads go in the order documents were first written,
as on the embedded store; a MongoDB reads a crawl by ``_id``, so no caller may count on either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...storage.mongo import FAILURES, ITEMS, PAGES, _public, doc_id

Doc = dict[str, Any]


class MemoryStorage:
    """The crawl's documents in dicts, one per collection, keyed and ordered as the server keeps them.
    One lock guards everything: the store stage calls it from threads."""

    def __init__(self, flush_size: int = 500, flush_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flush_size = flush_size
        self.flush_interval = flush_interval
        self.clock = clock
        self._buffer: dict[str, list[Doc]] = {PAGES: [], ITEMS: [], FAILURES: []}
        self._docs: dict[str, dict[str, Doc]] = {PAGES: {}, ITEMS: {}, FAILURES: {}}
        self._crawls: dict[str, Doc] = {}
        self._oldest: float | None = None
        self._lock = threading.RLock()

    def ensure_indexes(self) -> None:
        """Nothing to create: every query here is a scan."""

    def close(self) -> None:
        """Nothing to let go of."""

    # --- buffered writes -------------------------------------------------------------------------
    def add(self, collection: str, docs: list[Doc]) -> None:
        """Queue documents keyed by (crawl_id, fp); flushes when the buffer is full or old."""
        with self._lock:
            self._buffer[collection].extend({"_id": doc_id(doc["crawl_id"], doc["fp"]), **doc} for doc in docs)
            if self._oldest is None and docs:
                self._oldest = self.clock()
            if self.buffered() >= self.flush_size or self._too_old():
                self.flush()

    def buffered(self) -> int:
        return sum(len(docs) for docs in self._buffer.values())

    def _too_old(self) -> bool:
        return self._oldest is not None and self.clock() - self._oldest >= self.flush_interval

    def flush(self) -> int:
        """Write everything buffered, in order: a key already there is updated in place (the
        server's insert, then upsert of the duplicates). Returns the number of documents written."""
        with self._lock:
            written = 0
            for name, docs in self._buffer.items():
                stored = self._docs.setdefault(name, {})
                for doc in docs:
                    doc = _copy(doc)
                    if doc["_id"] in stored:
                        stored[doc["_id"]].update(doc)
                    else:
                        stored[doc["_id"]] = doc
                written += len(docs)
                self._buffer[name] = []
            self._oldest = None
            return written

    # --- reads -----------------------------------------------------------------------------------
    def _of_crawl(self, collection: str, crawl_id: str, **equal: Any) -> list[Doc]:
        """Copies of the crawl's documents (with ``_id``) whose fields equal ``equal``, in the order
        they were first written; copied under the lock, as a flush may be updating them."""
        with self._lock:
            return [_copy(d) for d in self._docs.get(collection, {}).values()
                    if d.get("crawl_id") == crawl_id and all(d.get(k) == v for k, v in equal.items())]

    def pages(self, crawl_id: str) -> Iterator[Doc]:
        return self._find(PAGES, crawl_id)

    def items(self, crawl_id: str) -> Iterator[Doc]:
        return self._find(ITEMS, crawl_id)

    def failures(self, crawl_id: str, reason: str | None = None) -> Iterator[Doc]:
        return self._find(FAILURES, crawl_id, **({"reason": reason} if reason else {}))

    def _find(self, collection: str, crawl_id: str, **equal: Any) -> Iterator[Doc]:
        """The documents as reads return them, chosen when first read (as a cursor's first batch)."""
        for doc in self._of_crawl(collection, crawl_id, **equal):
            yield _public(doc)

    def count(self, collection: str, crawl_id: str) -> int:
        return len(self._of_crawl(collection, crawl_id))

    def latest(self, collection: str, crawl_id: str, limit: int = 20, fields: list[str] | None = None) -> list[Doc]:
        """The crawl's last-written documents, newest first (a key written again keeps its place)."""
        docs = _limit(reversed(self._of_crawl(collection, crawl_id)), 0, limit)
        return [_public(_project(doc, fields) if fields else doc) for doc in docs]

    def failure_samples(self, crawl_id: str, reasons: list[str], per_reason: int = 3) -> dict[str, list[str]]:
        return {reason: [d["url"] for d in _limit(self._of_crawl(FAILURES, crawl_id, reason=reason), 0, per_reason)]
                for reason in reasons}

    def failures_page(self, crawl_id: str, reason: str | None, skip: int, limit: int) -> list[Doc]:
        docs = self._of_crawl(FAILURES, crawl_id, **({"reason": reason} if reason else {}))
        return [_public(doc) for doc in _limit(docs, skip, limit)]

    def failure_counts(self, crawl_id: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for doc in self._of_crawl(FAILURES, crawl_id):
            reason = str(doc.get("reason"))
            counts[reason] = counts.get(reason, 0) + 1
        return counts

    def scan(self, collection: str, crawl_id: str, fields: list[str], having: str | None = None) -> Iterator[Doc]:
        for doc in self._of_crawl(collection, crawl_id):
            if not having or having in doc:
                yield {k: v for k, v in _project(doc, fields).items() if k != "_id"}

    # --- changes -------------------------------------------------------------------------------
    def touch_pages(self, keys: list[tuple[str, str]], checked_at: str) -> None:
        with self._lock:
            for crawl_id, fp in keys:
                page = self._docs[PAGES].get(doc_id(crawl_id, fp))
                if page is not None:
                    page["checked_at"] = checked_at

    def delete_failures(self, crawl_id: str, fps: list[str]) -> None:
        with self._lock:
            for fp in fps:
                self._docs[FAILURES].pop(doc_id(crawl_id, fp), None)

    def delete_crawl(self, crawl_id: str) -> None:
        with self._lock:
            for name in (PAGES, ITEMS, FAILURES):
                for doc in self._of_crawl(name, crawl_id):
                    del self._docs[name][doc["_id"]]
            self._crawls.pop(crawl_id, None)

    # --- the crawls' records -------------------------------------------------------------------
    def save_crawl(self, crawl_id: str, record: Doc, started_at: float) -> None:
        """Write (or refresh) a crawl's record; a crawl started again is not finished any more."""
        with self._lock:
            kept = self._crawls.get(crawl_id)
            if kept is None:
                self._crawls[crawl_id] = {"_id": crawl_id, **_copy(record), "started_at": started_at}
                return
            kept.update(_copy(record))
            kept.pop("finished_at", None)

    def crawl_record(self, crawl_id: str) -> Doc | None:
        with self._lock:
            record = self._crawls.get(crawl_id)
            return None if record is None else _copy(record)

    def crawl_ended(self, crawl_id: str, state: str) -> None:
        with self._lock:
            record = self._crawls.get(crawl_id)
            if record is not None and "finished_at" not in record:
                record.update(finished_at=time.time(), state=state)

    def unfinished_crawls(self) -> list[Doc]:
        with self._lock:
            return [_project(r, ["started_at"]) for r in self._crawls.values() if "finished_at" not in r]


def _copy(value: Any) -> Any:
    """A deep copy as the server would give it back: dicts and lists new, tuples as lists."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def _project(doc: Doc, fields: list[str]) -> Doc:
    """``_id`` and the named fields a document has, in the document's own order (a projection)."""
    return {k: _copy(v) for k, v in doc.items() if k == "_id" or k in fields}


def _limit(docs: Iterable[Doc], skip: int, limit: int) -> list[Doc]:
    """``skip`` documents, then ``limit`` of them; 0 means no limit, as for a cursor."""
    docs = list(docs)[skip:]
    return docs[:limit] if limit else docs
