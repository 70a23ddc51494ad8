"""MongoDB storage through pymongo: pages, items and failures, one document per (crawl_id, fp).

A document's ``_id`` is ``"<crawl_id>:<fp>"``: the index every collection has anyway is what makes
a page unique, and a crawl's documents are one range of it. A second unique index on (crawl_id,
fp) cost two thirds of every insert (measured on the embedded store: 0.16 against 0.055 ms of
server CPU per page).

Writes are buffered and flushed when the buffer is full, when it is old enough, and always before a
store task reports its pages done. A flush inserts (unordered, in bulk); the documents a replayed
batch already wrote come back as duplicate-key errors and are upserted instead, so replaying a batch
changes nothing. Inserting first matters: an upsert must look its key up before it writes, and on
the embedded store it costs about three times as much as an insert (measured: 0.55 vs 0.20 ms).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import pymongo
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, ExecutionTimeout

if TYPE_CHECKING:
    from ..ports import Storage

PAGES, ITEMS, FAILURES = "pages", "items", "failures"
CRAWLS = "crawls"  # one record per crawl: what a rerun needs once Redis forgot it (crawltasks.storage.recovery)
INTERNAL = ("discovered", "request_fp")  # fields kept for a rebuild (crawltasks.storage.recovery), never read back
DUPLICATE_KEY = 11000
EXPORT_BATCH = 2000  # documents per round trip when reading a crawl back
LATEST_MAX_MS = 2000  # the most a look for the latest documents may take on the server


def doc_id(crawl_id: str, fp: str) -> str:
    """The ``_id`` of a crawl's document: unique per (crawl_id, fp), and sorted by crawl."""
    return f"{crawl_id}:{fp}"


def of_crawl(crawl_id: str) -> dict[str, Any]:
    """The filter of a crawl's documents: a range of ``_id`` (the index), then the exact crawl id
    (a crawl named "a:b" falls in the range of "a")."""
    return {"_id": {"$gte": f"{crawl_id}:", "$lt": f"{crawl_id};"}, "crawl_id": crawl_id}


def durable_writes(url: str) -> dict[str, Any]:
    """Writes acknowledged only once they are in the journal, unless the URL chooses its own write
    concern (``w=majority`` on a replica set, or ``journal=false`` to trade safety for speed). A page
    counts as stored when its write is acknowledged: without the journal, a store stopped soon
    after may come back without it."""
    options = {k.lower() for k, _ in parse_qsl(urlsplit(url).query)}
    return {} if options & {"journal", "j", "w"} else {"journal": True}


class MongoStorage:
    """The crawl's documents in one Mongo database, with a write buffer."""

    def __init__(self, client: pymongo.MongoClient, db_name: str = "crawltasks",
                 flush_size: int = 500, flush_interval: float = 1.0) -> None:
        self.client = client
        self.db = client[db_name]
        self.flush_size = flush_size
        self.flush_interval = flush_interval
        self._buffer: dict[str, list[dict[str, Any]]] = {PAGES: [], ITEMS: [], FAILURES: []}
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._indexed = False

    @classmethod
    def from_url(cls, url: str, db_name: str = "crawltasks", **kwargs: Any) -> MongoStorage:
        client = pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000, connectTimeoutMS=5_000,
                                     retryWrites=True, tz_aware=True, **durable_writes(url))
        return cls(client, db_name, **kwargs)

    def close(self) -> None:
        """Close the client's connections (and its monitor threads)."""
        self.client.close()

    def ensure_indexes(self) -> None:
        """The failures' index by reason; safe to call again. Pages and items need none but ``_id``."""
        if self._indexed:
            return
        self.db[FAILURES].create_index([("crawl_id", pymongo.ASCENDING), ("reason", pymongo.ASCENDING)],
                                       name="crawl_reason")
        self._indexed = True

    # --- buffered writes -------------------------------------------------------------------------
    def add(self, collection: str, docs: list[dict[str, Any]]) -> None:
        """Queue documents keyed by (crawl_id, fp); flushes when the buffer is full or old."""
        with self._lock:
            self._buffer[collection].extend({"_id": doc_id(doc["crawl_id"], doc["fp"]), **doc} for doc in docs)
            if self._oldest is None and docs:
                self._oldest = time.monotonic()
            if self.buffered() >= self.flush_size or self._too_old():
                self.flush()

    def buffered(self) -> int:
        return sum(len(ops) for ops in self._buffer.values())

    def _too_old(self) -> bool:
        return self._oldest is not None and time.monotonic() - self._oldest >= self.flush_interval

    def flush(self) -> int:
        """Write everything buffered; returns the number of operations written."""
        with self._lock:
            self.ensure_indexes()
            written = 0
            for name, docs in self._buffer.items():
                if docs:
                    self._write(name, docs)
                    written += len(docs)
                    self._buffer[name] = []
            self._oldest = None
            return written

    def _write(self, collection: str, docs: list[dict[str, Any]]) -> None:
        """Insert the documents; upsert the ones whose key is already there (a replay, a re-run)."""
        try:
            self.db[collection].insert_many(docs, ordered=False)
            return
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            only_duplicates = all(e.get("code") == DUPLICATE_KEY for e in errors)
            if not errors or not only_duplicates or exc.details.get("writeConcernErrors"):
                raise
            again = [docs[e["index"]] for e in errors]
        ops = [UpdateOne({"_id": doc["_id"]}, {"$set": {k: v for k, v in doc.items() if k != "_id"}}, upsert=True)
               for doc in again]
        self.db[collection].bulk_write(ops, ordered=False)

    # --- reads -----------------------------------------------------------------------------------
    def pages(self, crawl_id: str) -> Iterator[dict[str, Any]]:
        return self._find(PAGES, of_crawl(crawl_id))

    def items(self, crawl_id: str) -> Iterator[dict[str, Any]]:
        return self._find(ITEMS, of_crawl(crawl_id))

    def failures(self, crawl_id: str, reason: str | None = None) -> Iterator[dict[str, Any]]:
        query = of_crawl(crawl_id)
        if reason:
            query["reason"] = reason
        return self._find(FAILURES, query)

    def count(self, collection: str, crawl_id: str) -> int:
        return self.db[collection].count_documents(of_crawl(crawl_id))

    def latest(self, collection: str, crawl_id: str, limit: int = 20,
               fields: list[str] | None = None) -> list[dict[str, Any]]:
        """The crawl's last-written documents, newest first: a backward scan in the order the server
        keeps them, stopped at ``limit`` matches (no index on time: it would cost every insert), and
        cut short after LATEST_MAX_MS, so a long-finished crawl in a big collection costs little."""
        projection = dict.fromkeys(fields, 1) if fields else None
        cursor = (self.db[collection].find(of_crawl(crawl_id), projection).hint([("$natural", -1)])
                  .limit(limit).max_time_ms(LATEST_MAX_MS))
        try:
            docs = list(cursor)
        except ExecutionTimeout:
            return []
        return [_public(doc) for doc in docs]

    def failure_samples(self, crawl_id: str, reasons: list[str], per_reason: int = 3) -> dict[str, list[str]]:
        """A few failed URLs of each reason (one indexed query per reason)."""
        out = {}
        for reason in reasons:
            query = {"crawl_id": crawl_id, "reason": reason}
            out[reason] = [d["url"] for d in self.db[FAILURES].find(query, {"url": 1}).limit(per_reason)]
        return out

    def failures_page(self, crawl_id: str, reason: str | None, skip: int, limit: int) -> list[dict[str, Any]]:
        """One page of the crawl's failure records (of one reason), in the order the server keeps them."""
        query = of_crawl(crawl_id)
        if reason:
            query["reason"] = reason
        return [_public(doc) for doc in self.db[FAILURES].find(query).skip(skip).limit(limit)]

    def failure_counts(self, crawl_id: str) -> dict[str, int]:
        """The crawl's failure records by reason (one aggregation on the server, on the reason index);
        a record without a reason counts under "None"."""
        pipeline = [{"$match": {"crawl_id": crawl_id}}, {"$group": {"_id": "$reason", "n": {"$sum": 1}}}]
        return {str(r["_id"]): int(r["n"]) for r in self.db[FAILURES].aggregate(pipeline)}

    def scan(self, collection: str, crawl_id: str, fields: list[str],
             having: str | None = None) -> Iterator[dict[str, Any]]:
        """Only ``fields`` of the crawl's documents (those with a field ``having``, if given), the
        internal ones included: what a rebuild reads (crawltasks.storage.recovery), without the bodies."""
        query = of_crawl(crawl_id)
        if having:
            query[having] = {"$exists": True}
        projection = {"_id": 0, **dict.fromkeys(fields, 1)}
        yield from self.db[collection].find(query, projection).batch_size(EXPORT_BATCH)

    def _find(self, collection: str, query: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The documents without their ``_id``, in the order the server keeps them. Dropped here, not
        by a projection, and not sorted: both cost the embedded store more than the read itself.
        Read 2,000 at a time: the default batch (16 MB) held ~100 MB of documents in this process
        while 100,000 pages were exported, for no gain in speed (measured)."""
        for doc in self.db[collection].find(query).batch_size(EXPORT_BATCH):
            yield _public(doc)

    def touch_pages(self, keys: list[tuple[str, str]], checked_at: str) -> None:
        """Set ``checked_at`` on stored pages, each named by (crawl_id, fp): a revisit found them
        unchanged (crawltasks.frontier.revisit). A page not stored stays absent."""
        ops = [UpdateOne({"_id": doc_id(crawl_id, fp)}, {"$set": {"checked_at": checked_at}}) for crawl_id, fp in keys]
        if ops:
            self.db[PAGES].bulk_write(ops, ordered=False)

    def delete_failures(self, crawl_id: str, fps: list[str]) -> None:
        if fps:
            self.db[FAILURES].delete_many({"_id": {"$in": [doc_id(crawl_id, fp) for fp in fps]}})

    def delete_crawl(self, crawl_id: str) -> None:
        for name in (PAGES, ITEMS, FAILURES):
            self.db[name].delete_many(of_crawl(crawl_id))
        self.db[CRAWLS].delete_one({"_id": crawl_id})

    # --- the crawls' records -------------------------------------------------------------------
    def save_crawl(self, crawl_id: str, record: dict[str, Any], started_at: float) -> None:
        """Write (or refresh) a crawl's record; a crawl started again is not finished any more."""
        self.db[CRAWLS].update_one({"_id": crawl_id}, {"$set": record, "$setOnInsert": {"started_at": started_at},
                                                       "$unset": {"finished_at": ""}}, upsert=True)

    def crawl_record(self, crawl_id: str) -> dict[str, Any] | None:
        return self.db[CRAWLS].find_one({"_id": crawl_id})

    def crawl_ended(self, crawl_id: str, state: str) -> None:
        """The crawl finished (or was cancelled): Redis may forget it after its retention, not lose it."""
        self.db[CRAWLS].update_one({"_id": crawl_id, "finished_at": {"$exists": False}},
                                   {"$set": {"finished_at": time.time(), "state": state}})

    def unfinished_crawls(self) -> list[dict[str, Any]]:
        """Records of the crawls that never finished (one small document each)."""
        return list(self.db[CRAWLS].find({"finished_at": {"$exists": False}}, {"started_at": 1}))


def _public(doc: dict[str, Any]) -> dict[str, Any]:
    """A document as reads return it: no ``_id``, none of the fields only a rebuild reads."""
    for name in ("_id", *INTERNAL):
        doc.pop(name, None)
    return doc


def write_jsonl(docs: Iterator[dict[str, Any]], out: IO[str]) -> int:
    """Write documents as JSON Lines; returns how many were written."""
    n = 0
    for doc in docs:
        doc.pop("fp", None)
        out.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
        n += 1
    return n


def export_crawl(storage: Storage, crawl_id: str, path: str, items: bool = True) -> tuple[int, int]:
    """Pages (then the spider's items) of a crawl as JSON Lines; returns (pages, items)."""
    with open(path, "w", encoding="utf-8") as out:
        pages = write_jsonl(storage.pages(crawl_id), out)
        n_items = write_jsonl(storage.items(crawl_id), out) if items else 0
    return pages, n_items
