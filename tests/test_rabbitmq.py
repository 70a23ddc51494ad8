"""RabbitMQ as the broker: the same end-to-end crawl on a real worker, with Redis still holding dedupe
and counters. Uses the machine's RabbitMQ (127.0.0.1:5672, guest/guest, or CRAWLTASKS_TEST_AMQP_URL);
the crawl queues are declared with x-max-priority and purged before and after."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import amqp.exceptions
import pytest
from kombu import Connection, pools

import celeryconfig
from crawltasks import start_crawl
from crawltasks.backends.redis.keys import Keys
from crawltasks.local.workers import InProcessWorker
from crawltasks.settings import Settings
from crawltasks.worker.app import app, use_broker

from .sites import FAST, expected_basic_paths

AMQP_URL = os.environ.get("CRAWLTASKS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
QUEUE_NAMES = [q.name for q in celeryconfig.task_queues]


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=2):
            return True
    except OSError:
        return False


def switch_broker(url: str) -> None:
    """Point the app at another broker, dropping every cached connection to the old one."""
    use_broker(url)
    # use_broker closes the app's pool but leaves it in kombu's global registry (a later switch back to
    # that URL would get the closed pool) and keeps the producer pool bound to the old broker.
    pools.reset()
    app.amqp._producer_pool = None


def purge_queues() -> dict[str, int]:
    """Declare the crawl queues (as workers do) and empty them; returns what each held."""
    held = {}
    with Connection(AMQP_URL, connect_timeout=5) as conn:
        channel = conn.channel()
        for queue in celeryconfig.task_queues:
            bound = queue(channel)
            bound.declare()
            held[queue.name] = bound.purge() or 0
    return held


def message_counts() -> dict[str, int]:
    with Connection(AMQP_URL, connect_timeout=5) as conn:
        channel = conn.channel()
        return {name: channel.queue_declare(name, passive=True).message_count for name in QUEUE_NAMES}


@pytest.fixture(scope="module")
def rabbit_worker(rt, settings: Settings) -> Iterator[InProcessWorker]:
    """A real worker consuming every crawl queue from RabbitMQ; the runtime still uses the test Redis."""
    if not reachable(AMQP_URL):
        pytest.skip(f"RabbitMQ is not reachable at {urlsplit(AMQP_URL).netloc.split('@')[-1]}")
    purge_queues()
    switch_broker(AMQP_URL)
    worker = InProcessWorker(app, concurrency=4, loglevel="WARNING")
    try:
        worker.start()
        yield worker
    finally:
        worker.stop()
        switch_broker(settings.broker_url)
        purge_queues()


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_end_to_end_crawl_over_rabbitmq(rabbit_worker, rt, basic_server, crawl_id):
    assert app.connection_for_write().transport_cls in ("amqp", "pyamqp") or \
        app.connection_for_write().transport.driver_type == "amqp"
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=3, **FAST)
    assert crawl.wait(timeout=60), crawl.stats()

    pages = crawl.pages()
    assert {path_of(p["url"]) for p in pages} == expected_basic_paths()
    assert len(pages) == len(expected_basic_paths()), "a page was stored twice"
    failures = {path_of(f["url"]): f["reason"] for f in crawl.failures()}
    assert failures == {"/missing": "http_404", "/dead": "http_500"}

    stats = crawl.stats()
    assert stats["state"] == "finished" and stats["pending"] == 0
    assert stats["stored"] == len(expected_basic_paths()) and stats["failed"] == 2
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
    assert stats["retried"] == 3 + 2  # retries with countdowns went through RabbitMQ too
    # Dedupe and counters live in Redis whatever the broker is.
    redis = rt.state.r
    assert redis.scard(Keys.seen(crawl_id)) >= stats["scheduled"]
    assert int(redis.hget(Keys.stats(crawl_id), "stored")) == stats["stored"]
    assert basic_server.counts["/dead"] == 4 and basic_server.counts["/"] == 1
    # Nothing was left behind on the broker.
    assert sum(message_counts().values()) == 0


def test_crawl_queues_are_declared_with_max_priority(rabbit_worker):
    with Connection(AMQP_URL, connect_timeout=5) as conn:
        for name in QUEUE_NAMES:
            # A passive declare finds each queue; declaring it with another max priority is refused,
            # which shows the broker holds it with x-max-priority 10.
            assert conn.channel().queue_declare(name, passive=True).queue == name
            channel = conn.channel()
            with pytest.raises(amqp.exceptions.PreconditionFailed):
                channel.queue_declare(name, durable=True, auto_delete=False, arguments={"x-max-priority": 3})
