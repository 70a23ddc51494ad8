"""Leases and the reclaimer: a request whose message is lost is sent again; failures can be re-driven."""

import threading
import uuid
from urllib.parse import urlsplit

import pytest
import redis

from crawltasks import start_crawl
from crawltasks.celeryapp import app
from crawltasks.localworkers import InProcessWorker
from crawltasks.redisstate import RedisState

from .sites import FAST, page, serve


@pytest.fixture
def state(redis_url):
    s = RedisState.from_url(redis_url)
    cid = f"l-{uuid.uuid4().hex[:8]}"
    s.create_crawl(cid, {}, [])
    yield s, cid
    s.delete_crawl(cid)


def test_reclaim_returns_expired_unfinished_requests_once(state, redis_url):
    s, cid = state
    s.schedule(cid, ["a", "b", "c"], [False] * 3)
    s.lease(cid, ["a", "b", "c"], 0.0, ['{"url": "a"}', '{"url": "b"}', '{"url": "c"}'])
    s.finish(cid, [("b", "stored")])
    got: list[list[dict]] = []

    def grab():
        got.append(RedisState.from_url(redis_url).reclaim(cid, 60))

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["url"] for batch in got for r in batch) == ["a", "c"]
    assert s.reclaim(cid, 60) == []  # renewed for 60 s
    assert s.leased(cid) == 2


def test_renewing_keeps_the_saved_request_and_finish_ends_the_lease(state):
    s, cid = state
    s.lease(cid, ["a"], 0.0, ['{"url": "a", "attempt": 2}'])
    s.lease(cid, ["a"], 0.0)
    assert s.reclaim(cid, 0.0) == [{"url": "a", "attempt": 2}]
    s.finish(cid, [("a", "failed")])
    assert s.leased(cid) == 0 and s.reclaim(cid, 0.0) == []


def test_a_lost_message_is_sent_again_by_the_reclaimer(rt, settings, crawl_id, monkeypatch):
    monkeypatch.setenv("CRAWLTASKS_RECLAIM_INTERVAL", "0.5")
    server = serve({"/": page("Home", ["/a", "/b"]), "/a": page("A"), "/b": page("B")})
    worker = None
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, timeout=0.5, lease_time=1.0, **{
            k: v for k, v in FAST.items() if k != "timeout"})
        broker = redis.Redis.from_url(settings.broker_url)
        assert broker.delete("crawl.fetch.default") == 1  # the broker lost the seed's message
        worker = InProcessWorker(app, concurrency=2)
        worker.start()
        assert crawl.wait(timeout=60), crawl.stats()
        assert {urlsplit(p["url"]).path for p in crawl.pages()} == {"/", "/a", "/b"}
        stats = crawl.stats()
        assert stats["reclaimed"] >= 1 and stats["stored"] == 3 and stats["pending"] == 0
        assert rt.state.leased(crawl_id) == 0
    finally:
        if worker:
            worker.stop()
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
