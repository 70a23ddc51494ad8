"""Claims and the reclaimer: a request whose message is lost is sent again; failures can be re-driven."""

from urllib.parse import urlsplit

import redis

from crawltasks import start_crawl
from crawltasks.frontier.dispatcher import Dispatcher
from crawltasks.local.workers import InProcessWorker
from crawltasks.worker.app import app

from .sites import FAST, page, serve
from .workers import wait_for


def test_a_lost_message_is_sent_again_by_the_reclaimer(rt, settings, crawl_id, monkeypatch):
    monkeypatch.setenv("CRAWLTASKS_RECLAIM_INTERVAL", "0.5")
    monkeypatch.setenv("CRAWLTASKS_DISPATCH_LEASE", "1")
    server = serve({"/": page("Home", ["/a", "/b"]), "/a": page("A"), "/b": page("B")})
    worker = dispatcher = None
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, **FAST)
        assert rt.frontier.sizes(crawl_id).queued == 1 and not broker.llen("crawl.fetch.default")
        rt.heartbeat.offer(4)  # a dispatcher alone: the seed leaves the frontier, nobody fetches it
        dispatcher = Dispatcher(rt).start()  # through rt.sender: Celery, to the test broker
        assert wait_for(lambda: broker.llen("crawl.fetch.default") == 1, timeout=10)
        dispatcher.stop()
        assert broker.delete("crawl.fetch.default") == 1  # the broker lost the seed's message
        worker = InProcessWorker(app, concurrency=2)
        worker.start()
        assert crawl.wait(timeout=60), crawl.stats()
        assert {urlsplit(p["url"]).path for p in crawl.pages()} == {"/", "/a", "/b"}
        stats = crawl.stats()
        assert stats["reclaimed"] >= 1 and stats["stored"] == 3 and stats["pending"] == 0
        assert rt.frontier.sizes(crawl_id).claimed == 0
    finally:
        if worker:
            worker.stop()
        broker.close()
        server.stop()


def test_retry_failed_redrives_failures_through_the_pipeline(worker, rt, crawl_id):
    healthy = {"ok": False}
    server = serve({"/": page("Home", ["/sometimes"]),
                    "/sometimes": lambda s, p: (200, {}, b"<title>Back</title>") if healthy["ok"] else (503, {}, b"")})
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
        assert crawl.wait(timeout=30)
        assert [f["reason"] for f in crawl.failures()] == ["http_503"] and crawl.stats()["failed"] == 1
        healthy["ok"] = True
        assert crawl.retry_failed() == 1
        assert crawl.wait(timeout=30), crawl.stats()
        assert {urlsplit(p["url"]).path for p in crawl.pages()} == {"/", "/sometimes"}
        assert crawl.failures() == []
        stats = crawl.stats()
        assert (stats["failed"], stats["stored"], stats["redriven"], stats["state"]) == (0, 2, 1, "finished")
        assert crawl.retry_failed() == 0
    finally:
        server.stop()


def test_a_queue_reads_empty_only_when_no_message_waits(rt, settings, crawl_id):
    """The reclaimer takes back a claim handed on between stages only when no stage message waits
    (``stage_queues_empty``): a queue with no key at all in a Redis broker reads empty, one with a
    message does not. A queue of this test's own: a worker may be consuming the real ones."""
    from crawltasks.worker.app import app
    from crawltasks.worker.reclaimer import _waiting

    queue = f"test.{crawl_id}"
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        with app.connection_for_read() as conn:
            assert _waiting(conn, queue) == 0
            broker.lpush(queue, b"{}")
            assert _waiting(conn, queue) == 1
    finally:
        broker.delete(queue)
        broker.close()
