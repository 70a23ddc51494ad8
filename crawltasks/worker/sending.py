"""The ``Sender`` port on Celery: fetch batches to the fetch queue of their priority, fetched results as
parse -> store chains. One publish a call, as before the port: no broker round trip is added. Tasks go
by name, and queues and routes are ``celeryconfig``'s, so this module needs the app, not the tasks.
The twin is ``backends.memory.sender.MemorySender`` (contract: ``tests/test_sender_contract.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from celery import chain

from ..frontier.queues import Entry, decode
from ..models import Fetched
from ..ports import Sender
from ..urls import redact
from .app import app, celeryconfig


def batch_label(crawl_id: str, batch: Sequence[Entry]) -> str:
    """What Flower shows of a fetch task: crawl, size, first URL (redacted); never the requests."""
    return f"{crawl_id} {len(batch)} url(s) {redact(decode(batch[0][2]).url)}"


def results_label(crawl_id: str, results: Sequence[Fetched]) -> str:
    """What Flower shows of a parse or store task."""
    return f"{crawl_id} {len(results)} url(s) {redact(results[0].request.url)}"


def batch_args(crawl_id: str, priority: str, batch: Sequence[Entry]) -> tuple[str, str, list[list[str]]]:
    """A fetch task's arguments (``tasks.fetch``)."""
    return crawl_id, priority, [[lease, entry] for lease, _, entry in batch]


def results_args(crawl_id: str, results: Sequence[Fetched]) -> tuple[dict]:
    """A parse task's arguments (``tasks.parse``); its store task gets what parse returns."""
    return ({"crawl_id": crawl_id, "results": [f.to_dict() for f in results]},)


class CelerySender(Sender):
    """Sends through this process's Celery app and its broker connection pool."""

    def send_batch(self, crawl_id: str, priority: str, batch: Sequence[Entry]) -> None:
        queue = celeryconfig.FETCH_QUEUES[priority]
        app.send_task(celeryconfig.FETCH_TASK, batch_args(crawl_id, priority, batch), queue=queue,
                      routing_key=queue, argsrepr=batch_label(crawl_id, batch))

    def send_results(self, crawl_id: str, results: Sequence[Fetched]) -> None:
        label = results_label(crawl_id, results)
        chain(app.signature(celeryconfig.PARSE_TASK, results_args(crawl_id, results)).set(argsrepr=label),
              app.signature(celeryconfig.STORE_TASK).set(argsrepr=label)).apply_async()
