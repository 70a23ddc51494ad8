"""What a process would send, in memory: the twin of ``sending.CelerySender`` (contract:
``tests/test_sender_contract.py``). Each message is shaped as the Celery one, put through Celery's
JSON serializer and back, and recorded with the queue and next steps the routes of ``celeryconfig``
give it; so a payload Celery would refuse is refused here too (``kombu.exceptions.EncodeError``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kombu.serialization import dumps, loads

from ...frontier.queues import Entry, decode
from ...models import Fetched, Request
from ...ports import Sender
from ...worker.app import celeryconfig
from ...worker.sending import batch_args, batch_label, results_args, results_label

FETCH, PARSE, STORE = "crawltasks.fetch", "crawltasks.parse", "crawltasks.store"


@dataclass(frozen=True)
class Sent:
    """One message: its task, where it goes, its arguments as a worker decodes them, the chain's next
    steps ((task, queue) each) and what Flower shows of it."""

    task: str
    queue: str
    routing_key: str
    priority: str | None  # a fetch batch's; None for results
    payload: list[Any]
    then: list[tuple[str, str]] = field(default_factory=list)
    label: str = ""


def route(task: str) -> tuple[str, str]:
    """(queue, routing key) of a task by the routes of ``celeryconfig``."""
    r = celeryconfig.task_routes[task]
    return r["queue"], r["routing_key"]


def json_round_trip(args: Sequence[Any]) -> list[Any]:
    """The arguments as a worker gets them from Celery's JSON serializer (EncodeError if it cannot)."""
    content_type, encoding, body = dumps(list(args), serializer="json")
    return loads(body, content_type, encoding)


class MemorySender(Sender):
    """Records every message (``sent``), in order; thread-safe (the fetch engine sends from its own
    thread), and ``wait_for`` lets a test wait for messages to come."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._changed = threading.Condition()

    def send_batch(self, crawl_id: str, priority: str, batch: Sequence[Entry]) -> None:
        queue = celeryconfig.FETCH_QUEUES[priority]
        self._record(Sent(FETCH, queue, queue, priority, json_round_trip(batch_args(crawl_id, priority, batch)),
                          label=batch_label(crawl_id, batch)))

    def send_results(self, crawl_id: str, results: Sequence[Fetched]) -> None:
        payload = json_round_trip(results_args(crawl_id, results))
        self._record(Sent(PARSE, *route(PARSE), None, payload, [(STORE, route(STORE)[0])],
                          results_label(crawl_id, results)))

    def _record(self, sent: Sent) -> None:
        with self._changed:
            self.sent.append(sent)
            self._changed.notify_all()

    def wait_for(self, done: Callable[[MemorySender], bool], timeout: float = 20.0) -> bool:
        """Wait until ``done(self)`` holds; False if it did not within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: done(self), timeout)

    # --- what was sent, decoded as the workers decode it ---
    def batches(self) -> list[tuple[str, str, list[Request]]]:
        """(crawl id, priority, requests) of each fetch task, in order."""
        with self._changed:
            sent = [s for s in self.sent if s.task == FETCH]
        return [(cid, p, [decode(entry, p, lease) for lease, entry in rows]) for cid, p, rows in
                (s.payload for s in sent)]

    def fetched(self) -> list[Fetched]:
        """Every fetched result sent to parse, in order."""
        with self._changed:
            sent = [s for s in self.sent if s.task == PARSE]
        return [Fetched.from_dict(f) for s in sent for f in s.payload[0]["results"]]
