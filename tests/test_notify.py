"""Webhook notifications on real parts: a real Celery worker, the test Redis and Mongo, fixture sites
and a local webhook server that records what it receives. The same from crawls driven in this process
are tests/test_webhooks.py's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawltasks import start_crawl
from crawltasks.monitor import notify
from crawltasks.monitor.watch import failure_counts
from crawltasks.settings import CrawlOptions

from .sites import FAST, html, page, serve
from .test_flower import ROOT, service_env


class Webhook:
    """A local webhook: records each POST's path and JSON body. ``answer`` may redirect; ``hold``
    (an Event) makes every answer wait until it is set."""

    def __init__(self, answer: tuple[int, dict[str, str]] = (200, {}), hold: threading.Event | None = None) -> None:
        self.received: list[tuple[str, dict]] = []
        self.arrived = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.received.append((self.path, json.loads(body or b"{}")))
                owner.arrived.set()
                if hold is not None:
                    hold.wait(30)
                self.send_response(answer[0])
                for name, value in answer[1].items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST  # a followed redirect would arrive here  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def events(self, name: str) -> list[dict]:
        return [body for _, body in self.received if body.get("event") == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 20) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.events(name)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.events(name)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hook():
    server = Webhook()
    yield server
    server.stop()


def failing_site(bad: int = 40, good: int = 4):
    """A home page linking to ``bad`` pages that answer 404 and ``good`` pages that work."""
    routes = {"/": page("Home", [f"/ok/{i}" for i in range(good)] + [f"/gone/{i}" for i in range(bad)])}
    for i in range(good):
        routes[f"/ok/{i}"] = page(f"ok {i}")
    for i in range(bad):
        routes[f"/gone/{i}"] = lambda s, p: (404, {}, html("gone"))
    return serve(routes)


def test_one_finish_notification_with_the_crawls_numbers(worker, rt, hook, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, notify=hook.url, max_retries=0, **FAST)
    assert crawl.wait(timeout=60)
    [sent] = hook.wait_for("crawl.finished")
    stats = crawl.stats()
    for name in ("scheduled", "stored", "failed", "skipped"):
        assert sent["stats"][name] == stats[name], name
    assert sent["crawl_id"] == crawl_id and sent["state"] == "finished"
    assert sent["failures"] == failure_counts(rt, crawl_id) == {"http_500": 2, "http_404": 1}  # /flaky, /dead
    assert f"crawl {crawl_id} finished" in sent["text"]
    # Replays of the finish (a redelivered store task, the waiting command) send nothing more.
    notify.run(rt, crawl_id, finished=True)
    notify.settle(rt, crawl_id)
    assert len(hook.events("crawl.finished")) == 1 and hook.events("crawl.failure_rate") == []
    assert rt.state.mark_of(crawl_id, notify.finish_event(rt, crawl_id)) == "sent 200"


def test_one_alert_for_a_site_that_fails_most_requests(worker, rt, hook, crawl_id):
    site = failing_site()
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, notify=hook.url, max_retries=0,
                            **{**FAST, "host_concurrency": 2})
        assert crawl.wait(timeout=60)
        hook.wait_for("crawl.finished")
    finally:
        site.stop()
    alerts = hook.events("crawl.failure_rate")
    assert len(alerts) == 1, hook.received
    alert = alerts[0]
    assert alert["crawl_id"] == crawl_id and alert["failure_rate"] >= 0.5 and alert["threshold"] == 0.5
    assert alert["failed"] >= notify.MIN_OUTCOMES // 2 and "http_404" in alert["text"]
    assert len(hook.events("crawl.finished")) == 1
    assert [path for path, _ in hook.received] == ["/hook", "/hook"]


def test_no_alert_below_the_threshold(worker, rt, hook, crawl_id):
    site = failing_site(bad=12, good=4)  # 12 of 17 fail: 70 %, below a threshold of 0.9
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, notify=hook.url, notify_failure_rate=0.9,
                            max_retries=0, **FAST)
        assert crawl.wait(timeout=60)
        assert len(hook.wait_for("crawl.finished")) == 1
    finally:
        site.stop()
    assert hook.events("crawl.failure_rate") == []


def test_a_redirecting_webhook_is_not_followed(worker, rt, crawl_id, basic_server):
    hook = Webhook(answer=(302, {"Location": "/elsewhere"}))
    try:
        crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, notify=hook.url, max_retries=0, **FAST)
        assert crawl.wait(timeout=60)
        notify.settle(rt, crawl_id)
        assert rt.state.mark_of(crawl_id, notify.finish_event(rt, crawl_id)) == "failed: HTTP 302"
        assert [path for path, _ in hook.received] == ["/hook"]  # /elsewhere never asked for
    finally:
        hook.stop()


def test_a_webhook_that_hangs_never_holds_the_store_stage(worker, rt, crawl_id, basic_server):
    """``observe`` returns before the webhook answers: the webhook answers only once it has returned,
    so a synchronous send would never get its answer (the test would time out, not pass)."""
    release = threading.Event()
    hook = Webhook(hold=release)
    try:
        crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, notify=hook.url + "-late", max_retries=0,
                            **FAST)
        assert crawl.wait(timeout=60)
        assert hook.arrived.wait(20)  # the worker's notifier is held by the webhook now
        event = notify.finish_event(rt, crawl_id)
        assert rt.state.mark_of(crawl_id, event).startswith("sending")
        notify.observe(rt, crawl_id, finished=True)  # queued behind the held one: returns at once
        release.set()
        notify.settle(rt, crawl_id)
        assert rt.state.mark_of(crawl_id, event) == "sent 200"
        assert len(hook.events("crawl.finished")) == 1
    finally:
        release.set()
        hook.stop()


def test_cli_crawl_with_notify_and_web(worker, rt, settings, hook, crawl_id):
    """``crawltasks crawl --notify URL --web``: the command serves the dashboard while it waits, and
    does not end before the finish notification is out (its own workers send it)."""
    site = failing_site(bad=2, good=6)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "crawltasks.cli", "crawl", site.url("/"), "--crawl-id", crawl_id, "--workers",
             "1", "--host-delay", "0", "--max-retries", "0", "--notify", hook.url, "--web", "--web-port", "0"],
            cwd=ROOT, env=service_env(settings), capture_output=True, text=True, timeout=120)
    finally:
        site.stop()
    assert proc.returncode == 0, proc.stderr
    assert "dashboard: http://127.0.0.1:" in proc.stderr and f"/crawl/{crawl_id}" in proc.stderr
    [sent] = hook.events("crawl.finished")
    assert sent["stats"]["stored"] == 7 and sent["stats"]["failed"] == 2


def test_notify_options_are_checked():
    assert CrawlOptions(notify="http://127.0.0.1:9/x").notify_failure_rate == 0.5
    for bad in ({"notify": "file:///etc/passwd"}, {"notify": "ftp://x/"}, {"notify_failure_rate": 0},
                {"notify_failure_rate": 1.5}):
        with pytest.raises(ValueError):
            CrawlOptions(**bad)
