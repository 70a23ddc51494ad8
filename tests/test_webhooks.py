"""Webhook notifications from crawls driven in this process on the twins (``on_twins``: the failure
rate is read from the crawl's time series, which the twin registry keeps as Redis does), posted to a
local webhook that records them. The same on a real worker, and a webhook that hangs, are
tests/test_notify.py's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawltasks import Crawl, start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.monitor import notify
from crawltasks.runtime import Runtime

from .helpers import free_port
from .sites import FAST, on_twins, page, status, twin_site


class Hook:
    """A local webhook answering ``answer`` (status, headers): records each POST and says when one arrives."""

    def __init__(self) -> None:
        self.answer: tuple[int, dict[str, str]] = (200, {})
        self.received: list[dict] = []
        self.arrived = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner.arrived:
                    owner.received.append({"path": self.path, "agent": self.headers["User-Agent"], **body})
                    owner.arrived.notify_all()
                code, headers = owner.answer
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST  # noqa: N815 - a followed redirect would arrive here

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def events(self, name: str) -> list[dict]:
        return [body for body in self.received if body.get("event") == name]

    def wait_for(self, name: str, timeout: float = 10) -> dict:
        with self.arrived:
            assert self.arrived.wait_for(lambda: self.events(name), timeout), f"no {name} within {timeout}s"
            return self.events(name)[0]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


@pytest.fixture
def failing() -> Iterator[tuple[Runtime, str]]:
    """A runtime on the twins and a site where 12 of 15 pages are gone."""
    gone = [f"/gone/{i}" for i in range(12)]
    routes = {"/": page("Home", ["/a", "/b", *gone]), "/a": page("A"), "/b": page("B")}
    routes.update({path: status(404) for path in gone})
    site = twin_site(routes)
    rt = on_twins(site)
    yield rt, site.url("/")
    rt.close()


def crawl_to_end(rt: Runtime, seed: str, crawl_id: str, **options) -> Crawl:
    crawl = start_crawl(seed, crawl_id=crawl_id, rt=rt, **{**FAST, **options})
    assert run_crawl(rt, crawl, timeout=20), crawl.stats()
    return crawl


def test_a_failing_crawl_alerts_once_and_reports_its_finish(failing, hook, crawl_id):
    rt, seed = failing
    crawl_to_end(rt, seed, crawl_id, notify=hook.url, notify_failure_rate=0.5)
    alert = hook.wait_for("crawl.failure_rate")
    assert (alert["crawl_id"], alert["stored"], alert["failed"], alert["threshold"]) == (crawl_id, 3, 12, 0.5)
    assert alert["failure_rate"] == 0.8 and alert["failures"] == {"http_404": 12}
    assert alert["text"].startswith(f"crawl {crawl_id}: 80% of requests failed over the last minute (12 of 15;")
    done = hook.wait_for("crawl.finished")
    assert (done["state"], done["stats"]["stored"], done["stats"]["failed"]) == ("finished", 3, 12)
    assert done["text"].startswith(f"crawl {crawl_id} finished in ") and "http_404 12" in done["text"]
    assert alert["agent"] == "crawltasks-notify/0.1" and alert["path"] == "/hook"
    assert rt.state.mark_of(crawl_id, notify.ALERT) == "sent 200"
    notify.run(rt, crawl_id, finished=True)  # again: each event is sent once
    notify.settle(rt, crawl_id)  # its finish is out already: returns at once
    assert len(hook.received) == 2


def test_below_the_threshold_or_too_few_outcomes_no_alert(failing, hook, crawl_id):
    rt, seed = failing
    crawl_to_end(rt, seed, crawl_id)
    assert not notify.check_failure_rate(rt, crawl_id, hook.url, 0.9)
    small = crawl_to_end(rt, seed + "a", f"{crawl_id}-small")  # one page: too few outcomes to judge
    assert small.stats()["stored"] == 1
    assert not notify.check_failure_rate(rt, small.id, hook.url, 0.0)
    assert notify.check_failure_rate(rt, crawl_id, hook.url, 0.8)
    assert not notify.check_failure_rate(rt, crawl_id, hook.url, 0.8)  # once
    assert [e["event"] for e in hook.received] == ["crawl.failure_rate"]


def test_a_crawl_without_a_webhook_sends_nothing(failing, hook, crawl_id):
    rt, seed = failing
    crawl_to_end(rt, seed, crawl_id)
    notify.run(rt, crawl_id, finished=True)
    notify.settle(rt, crawl_id)
    notify.observe(rt, crawl_id, finished=True)
    assert notify.finish_event(rt, crawl_id).startswith("finished:") and notify.finish_event(rt, "nope") is None
    assert hook.received == []


def test_observe_never_raises(caplog):
    class Broken:
        def options(self, crawl_id: str):
            raise ConnectionError("Redis away")

    notify.observe(Broken(), "c-1", finished=True)  # type: ignore[arg-type]
    assert "notify: ConnectionError('Redis away')" in caplog.text


def test_how_a_post_went(hook):
    for code, said in ((204, "sent 204"), (500, "failed: HTTP 500"), (302, "failed: HTTP 302")):
        hook.answer = (code, {"Location": "/elsewhere"} if code == 302 else {})
        assert notify.post(hook.url, {"event": "t", "crawl_id": "c"}) == said
    assert [r["path"] for r in hook.received] == ["/hook"] * 3  # the redirect was not followed
    assert notify.post(f"http://127.0.0.1:{free_port()}/hook", {"event": "t"}, timeout=2) == "failed: ConnectionError"

