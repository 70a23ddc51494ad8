"""The Sender port's contract: every test runs on CelerySender (the test Redis as the broker, each message
read back off its queue with kombu) and on MemorySender, its twin (read from its record). Pinned here:
the queue and routing key of each priority's fetch batches, the parse -> store chain of results, what
a worker decodes (JSON: tuples come as lists, requests and results round-trip), and what Celery's
JSON refuses, refused before anything is sent. Also the parse -> store message (``Parsed``) through
the same JSON."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kombu.exceptions import EncodeError

from crawltasks.backends.memory.sender import MemorySender, json_round_trip
from crawltasks.frontier.queues import Entry, decode, encode
from crawltasks.models import PRIORITIES, Fetched, Parsed, Request
from crawltasks.ports import Sender
from crawltasks.urls import canonicalize, fingerprint
from crawltasks.worker.app import app, celeryconfig
from crawltasks.worker.sending import CelerySender

QUEUES = [*celeryconfig.FETCH_QUEUES.values(), celeryconfig.PARSE_QUEUE, celeryconfig.STORE_QUEUE]


@dataclass
class Seen:
    """One message as a worker would take it."""

    task: str
    queue: str  # where it waits
    routing_key: str
    payload: list[Any]  # the task's arguments, decoded
    then: list[tuple[str, str]] = field(default_factory=list)  # the chain's next steps: (task, queue)
    label: str = ""


class Twin:
    def __init__(self) -> None:
        self.sender: Sender = MemorySender()

    def seen(self) -> list[Seen]:
        return [Seen(s.task, s.queue, s.routing_key, s.payload, s.then, s.label) for s in self.sender.sent]


class OnBroker:
    """CelerySender on the test broker; what it sent is read back off the crawl queues (only this
    test's crawl: a message of another is dropped, as a leftover)."""

    def __init__(self, crawl_id: str) -> None:
        self.sender: Sender = CelerySender()
        self.crawl_id = crawl_id

    def seen(self) -> list[Seen]:
        out = []
        with app.connection_for_read() as conn:
            channel = conn.default_channel
            for queue in QUEUES:
                while (message := channel.basic_get(queue, no_ack=True)) is not None:
                    seen = self._seen(queue, message)
                    if seen is not None:
                        out.append(seen)
        return out

    def _seen(self, queue: str, message: Any) -> Seen | None:
        assert message.content_type == "application/json"
        args, _kwargs, embed = message.decode()
        if (args[0] if isinstance(args[0], str) else args[0].get("crawl_id")) != self.crawl_id:
            return None
        router = app.amqp.router
        then = [(s["task"], router.route(dict(s["options"]), s["task"])["queue"].name)
                for s in reversed(embed.get("chain") or [])]
        return Seen(message.headers["task"], queue, message.delivery_info["routing_key"], args, then,
                    message.headers["argsrepr"])


@pytest.fixture(params=["memory", "celery"])
def side(request: pytest.FixtureRequest) -> Iterator[Twin | OnBroker]:
    if request.param == "memory":
        yield Twin()
        return
    request.getfixturevalue("rt")  # the session's runtime: its broker is the test Redis
    impl = OnBroker(CRAWL)
    impl.seen()  # what a failed test left of this crawl: gone
    yield impl


CRAWL = f"sc-{uuid.uuid4().hex[:8]}"


def entries(priority: str, *paths: str) -> list[Entry]:
    """Requests as the frontier hands them out: (lease, priority, encoded request)."""
    out = []
    for path in paths:
        url = canonicalize(f"http://sender.test{path}")
        req = Request(url=url, priority=priority, fp=fingerprint(url), ticket=fingerprint(url), depth=1,
                      meta={"n": len(out)})
        out.append((f"L{uuid.uuid4().hex[:6]}", priority, encode(req)))
    return out


def fetched(n: int, meta: dict[str, Any] | None = None) -> list[Fetched]:
    """n results of the crawl: the odd ones failed, the even ones with a parked body."""
    out = []
    for i in range(n):
        url = canonicalize(f"http://sender.test/r{i}")
        req = Request(url=url, fp=fingerprint(url), ticket=fingerprint(url), lease=f"L{i}", meta=meta or {})
        if i % 2:
            out.append(Fetched(request=req, error="http_404", status=404, message="gone", fetched_at="t"))
        else:
            out.append(Fetched(request=req, status=200, url=url, fp=req.fp, content_type="text/html",
                               body_key=f"body:{i}", size=10, fetched_at="t", headers={"ETag": '"x"'}))
    return out


def test_each_priority_goes_to_the_fetch_queue_of_its_priority(side):
    batches = {p: entries(p, f"/{p}/1", f"/{p}/2") for p in PRIORITIES}
    for priority, batch in batches.items():
        side.sender.send_batch(CRAWL, priority, batch)
    got = {s.payload[1]: s for s in side.seen()}
    assert set(got) == set(PRIORITIES)
    for priority, batch in batches.items():
        s = got[priority]
        queue = f"crawl.fetch.{priority}"
        assert (s.task, s.queue, s.routing_key, s.then) == ("crawltasks.fetch", queue, queue, [])
        assert s.payload == [CRAWL, priority, [[lease, entry] for lease, _, entry in batch]]
        assert [decode(e, priority, lease).url for lease, e in s.payload[2]] == [
            f"http://sender.test/{priority}/1", f"http://sender.test/{priority}/2"]
        assert s.label == f"{CRAWL} 2 url(s) http://sender.test/{priority}/1"


def test_results_go_to_parse_then_store_and_come_back_whole(side):
    results = fetched(3)
    side.sender.send_results(CRAWL, results)
    [s] = side.seen()
    assert (s.task, s.queue, s.routing_key) == ("crawltasks.parse", "crawl.parse", "crawl.parse")
    assert s.then == [("crawltasks.store", "crawl.store")]
    [message] = s.payload
    assert message["crawl_id"] == CRAWL
    assert [Fetched.from_dict(f) for f in message["results"]] == results
    assert s.label == f"{CRAWL} 3 url(s) http://sender.test/r0"


def test_what_arrives_is_what_json_makes_of_it(side):
    side.sender.send_results(CRAWL, fetched(1, meta={"pair": (1, 2), "nested": {"t": ("a",)}}))
    [s] = side.seen()
    assert s.payload[0]["results"][0]["request"]["meta"] == {"pair": [1, 2], "nested": {"t": ["a"]}}


def test_what_json_cannot_carry_is_refused_and_nothing_is_sent(side):
    with pytest.raises(EncodeError):
        side.sender.send_results(CRAWL, fetched(2, meta={"tags": {"a", "b"}}))
    with pytest.raises(EncodeError):
        side.sender.send_results(CRAWL, fetched(1, meta={"spider": object()}))
    assert side.seen() == []


def test_an_unknown_priority_has_no_queue(side):
    with pytest.raises(KeyError):
        side.sender.send_batch(CRAWL, "urgent", entries("default", "/x"))
    assert side.seen() == []


def test_a_big_batch_is_one_message_with_a_short_label(side):
    batch = entries("low", *(f"/many/{i}" for i in range(300)))
    side.sender.send_batch(CRAWL, "low", batch)
    [s] = side.seen()
    assert len(s.payload[2]) == 300 and len(s.label) < 100


# --- the parse -> store message -------------------------------------------------------------------
def test_the_parse_to_store_message_round_trips_json():
    parsed = Parsed(CRAWL, pages=[{"ticket": "t1", "lease": "L1", "url": "http://a.test/", "discovered": ["x"]}],
                    items=[{"name": "a"}, {"name": "b"}], item_tickets=["t1", ""],
                    records=[{"ticket": "t2", "lease": "L2", "outcome": "failed", "reason": "timeout"}],
                    skipped=[("t3", "L3")], body_keys=["body:1"])
    [wire] = json_round_trip([parsed.to_dict()])
    assert Parsed.from_dict(wire) == parsed
    assert wire["skipped"] == [["t3", "L3"]]  # pairs travel as JSON arrays, and come back as tuples


def test_a_parse_to_store_message_without_item_owners_gives_its_items_to_nobody():
    wire = {"crawl_id": CRAWL, "pages": [], "items": [{"a": 1}], "records": [], "skipped": [], "body_keys": []}
    assert Parsed.from_dict(wire).item_tickets == [""]
