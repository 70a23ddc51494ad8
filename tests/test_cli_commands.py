"""The command's sub-commands run in this process (``main``) on the twins: the services a command
opens are a twin runtime's, and the crawl a command waits for is driven by a ``TwinDriver`` on a
thread of the test (the part workers play); the interruption of a crawl whose command died runs on
the real stores (``on_stores``). How the command opens real or embedded services, forks its workers
and stops them is the stack tier's (tests/test_cli.py)."""

from __future__ import annotations

import argparse
import csv
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from crawltasks import Crawl, runtime, start_crawl
from crawltasks import crawl as crawl_module
from crawltasks.backends.memory.driver import TwinDriver, run_crawl
from crawltasks.cli import commands, main, running
from crawltasks.monitor.health import ServiceDown
from crawltasks.runtime import Runtime
from crawltasks.settings import ENV_BROKER
from crawltasks.worker.app import app

from .sites import FAST, TwinSite, on_stores, on_twins, page, status, twin_site

pytestmark = pytest.mark.usefixtures("keep_root_logging")  # ``main`` sets up logging for its moment


def shop() -> TwinSite:
    """A home page with two products and a page that is gone; the spider test-titles makes items of them."""
    return twin_site({"/": page("Home", ["/p/1", "/p/2", "/gone"]), "/p/1": page("One"), "/p/2": page("Two"),
                      "/gone": status(404)})


def serving(monkeypatch: pytest.MonkeyPatch, rt: Runtime) -> Runtime:
    """The command's services are ``rt``'s (as ``open_services`` would configure the process's runtime)."""

    @contextmanager
    def services(data_dir: str | None, wait: bool = True, attach: bool = False) -> Iterator[tuple[Any, None]]:
        yield rt.settings, None

    monkeypatch.setattr(commands, "open_services", services)
    monkeypatch.setattr(runtime, "current", lambda: rt)
    return rt


@pytest.fixture
def twins(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runtime, TwinSite]]:
    site = shop()
    rt = on_twins(site, broker_url=app.conf.broker_url)  # the broker the app has: run_to_completion points it there
    yield serving(monkeypatch, rt), site
    rt.close()


def finished_crawl(rt: Runtime, site: TwinSite, crawl_id: str) -> Crawl:
    crawl = start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, spider="test-titles", **{**FAST, "max_retries": 0})
    assert run_crawl(rt, crawl, timeout=20), crawl.stats()
    return crawl


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- looking at a crawl ------------------------------------------------------------------------------
def test_stats_plain_and_json(twins, capsys, crawl_id):
    crawl = finished_crawl(*twins, crawl_id)
    code, out, _ = run(capsys, "stats", crawl_id)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0 and lines["state"] == "finished" and lines["stored"] == "3" and lines["failed"] == "1"
    code, out, _ = run(capsys, "stats", crawl_id, "--json")
    shown, now = json.loads(out), crawl.stats()
    assert code == 0 and {k: shown[k] for k in ("state", "stored", "failed", "items")} == {
        k: now[k] for k in ("state", "stored", "failed", "items")}


def test_an_unknown_crawl_is_a_usage_error(twins, capsys):
    for argv in (["stats", "nope"], ["failures", "nope"], ["pause", "nope"], ["export", "nope", "-o", "-"]):
        code, _, err = run(capsys, *argv)
        assert (code, err) == (2, "crawltasks: error: no crawl named 'nope'\n")


def test_export_writes_pages_and_items_where_asked(twins, capsys, crawl_id, tmp_path):
    finished_crawl(*twins, crawl_id)
    pages, items = tmp_path / "pages.jsonl", tmp_path / "items.csv"
    code, out, _ = run(capsys, "export", crawl_id, "-o", str(pages), "--items", str(items))
    assert code == 0 and out == f"wrote 3 page(s) and 3 item(s) to {pages} and {items}\n"
    urls = sorted(json.loads(line)["url"].rsplit("/", 1)[1] for line in pages.read_text().splitlines())
    assert urls == ["", "1", "2"]
    rows = list(csv.DictReader(items.open()))
    assert sorted(r["title"] for r in rows) == ["Home", "One", "Two"] and {r["crawl_id"] for r in rows} == {crawl_id}
    code, out, err = run(capsys, "export", crawl_id, "-o", "-")
    types = sorted(json.loads(line)["type"] for line in out.splitlines())
    assert code == 0 and types == ["item"] * 3 + ["page"] * 3 and err == "wrote 3 page(s) and 3 item(s) to -\n"


def test_failures_lists_each_with_its_reason(twins, capsys, crawl_id):
    site = twins[1]
    site.routes["/gone"] = status(500)
    site.routes["/p/2"] = status(404)
    finished_crawl(*twins, crawl_id)
    code, out, _ = run(capsys, "failures", crawl_id)
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "2 failure(s)"
    assert sorted(line.split()[:2] for line in lines[:-1]) == [["http_404", "404"], ["http_500", "500"]]
    code, out, _ = run(capsys, "failures", crawl_id, "--reason", "http_404")
    [line, total] = out.splitlines()
    assert code == 0 and total == "1 failure(s)" and f"attempts=1 {site.url('/p/2')}  HTTP 404" in line


def test_list_as_lines_json_and_a_table(twins, capsys, crawl_id, monkeypatch):
    code, out, _ = run(capsys, "list")
    assert (code, out) == (0, "no crawls in Redis\n")
    finished_crawl(*twins, crawl_id)
    code, out, _ = run(capsys, "list")
    head, row = out.splitlines()
    assert head.split()[:2] == ["CRAWL_ID", "STATE"] and row.split()[:2] == [crawl_id, "finished"]
    code, out, _ = run(capsys, "list", "--json")
    [shown] = json.loads(out)
    assert (shown["crawl_id"], shown["state"], shown["stored"], shown["failed"]) == (crawl_id, "finished", 3, 1)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, "list")
    assert code == 0 and "crawl id" in out and crawl_id in out and "finished" in out


# --- steering a crawl ------------------------------------------------------------------------------
def test_pause_resume_cancel_and_close_say_what_they_did(twins, capsys, crawl_id):
    rt, site = twins
    start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    rt.heartbeat.beat()
    assert run(capsys, "pause", crawl_id)[1] == f"{crawl_id}: paused\n"
    assert run(capsys, "pause", crawl_id)[1] == f"{crawl_id}: paused (unchanged: cannot pause a paused crawl)\n"
    assert run(capsys, "resume", crawl_id)[1] == f"{crawl_id}: running\n"
    assert run(capsys, "close", crawl_id)[1] == f"{crawl_id}: running (unchanged: cannot close a running crawl)\n"
    code, out, _ = run(capsys, "cancel", crawl_id)
    assert code == 0 and out in (f"{crawl_id}: cancelling\n", f"{crawl_id}: cancelled\n")


def test_add_pushes_new_seeds_only(twins, capsys, crawl_id):
    rt, site = twins
    start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    code, out, _ = run(capsys, "add", crawl_id, site.url("/"), site.url("/p/1"), site.url("/p/2"))
    assert (code, out) == (0, f"{crawl_id}: 2 new of 3 URL(s)\n")


def test_delete_asks_and_refuses_a_running_crawl(twins, capsys, crawl_id, monkeypatch):
    rt, site = twins
    running_id = f"{crawl_id}-running"
    start_crawl(site.url("/"), crawl_id=running_id, rt=rt, **FAST)
    rt.heartbeat.beat()
    code, _, err = run(capsys, "delete", running_id, "--yes")
    assert code == 2 and f"crawl {running_id} is running: cancel it first" in err
    finished_crawl(rt, site, crawl_id)
    monkeypatch.setattr(sys, "stdin", _Answer("no\n"))
    code, _, err = run(capsys, "delete", crawl_id)
    assert code == 1 and err == f"delete crawl {crawl_id} (finished) and its stored documents? [y/N] not deleted\n"
    assert Crawl(crawl_id, rt).exists and Crawl(crawl_id, rt).counts()["pages"] == 3
    monkeypatch.setattr(sys, "stdin", _Answer("y\n"))
    code, out, _ = run(capsys, "delete", crawl_id)
    assert (code, out) == (0, f"deleted crawl {crawl_id}\n")
    assert not Crawl(crawl_id, rt).exists and Crawl(crawl_id, rt).counts()["pages"] == 0


class _Answer:
    def __init__(self, text: str) -> None:
        self.text = text

    def readline(self) -> str:
        return self.text


# --- fetch: one page through the spider, nothing stored ---------------------------------------------
def test_fetch_prints_items_and_requests(twins, capsys, monkeypatch):
    rt, site = twins
    monkeypatch.setenv("CRAWLTASKS_SPIDER_MODULES", "tests.spiders")
    code, out, err = run(capsys, "fetch", site.url("/"), "--spider", "test-titles")
    lines = out.splitlines()
    assert code == 0 and err == "1 item(s), 3 request(s)\n", err
    assert json.loads(lines[0]) == {"title": "Home", "h1": None}
    assert lines[1:] == [site.url("/p/1"), site.url("/p/2"), site.url("/gone")]
    assert not rt.state.crawl_ids() and site.counts["/"] == 1


def test_fetch_of_a_page_that_fails_says_why(twins, capsys):
    rt, site = twins
    site.routes["/down"] = lambda s, p: (_ for _ in ()).throw(ConnectionError("refused"))
    code, _, err = run(capsys, "fetch", site.url("/down"), "-s", "max_retries=0")
    assert code == 1 and err.startswith(f"crawltasks: {site.url('/down')}: ")


# --- crawl and retry-failed, waited for as the workers (a driver) do the work ------------------------
@contextmanager
def driven(rt: Runtime, crawl_id: str, started: Callable[[], bool]) -> Iterator[list[bool]]:
    """Drive the crawl on a thread once ``started()`` holds (the command has begun it), until it finishes."""
    finished: list[bool] = []

    def drive() -> None:
        driver = TwinDriver(rt)
        try:
            if driver.run_until(started, timeout=20):
                finished.append(driver.run(Crawl(crawl_id, rt), timeout=20))
        finally:
            driver.close()

    thread = threading.Thread(target=drive, name="test-driver")
    thread.start()
    try:
        yield finished
    finally:
        thread.join(30)


def begun(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> threading.Event:
    """An event set once ``owner.name`` has returned (what the command calls to begin its crawl)."""
    event, real = threading.Event(), getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        finally:
            event.set()

    monkeypatch.setattr(owner, name, spy)
    return event


def test_crawl_waits_summarizes_and_writes_its_feeds(twins, capsys, crawl_id, monkeypatch, tmp_path):
    rt, site = twins
    monkeypatch.setenv(ENV_BROKER, rt.settings.broker_url)
    started = begun(monkeypatch, crawl_module, "start_crawl")
    out_file, stats_file = tmp_path / "pages.json", tmp_path / "stats.json"
    with driven(rt, crawl_id, started.is_set) as finished:
        code, out, err = run(capsys, "crawl", site.url("/"), "--crawl-id", crawl_id, "--no-worker", "--quiet",
                             "-s", "host_delay=0", "--host-concurrency", "8", "-o", str(out_file),
                             "--stats-json", str(stats_file), "--web", "--web-port", "0")
    assert code == 0 and finished == [True], err
    assert out.splitlines()[0].startswith(f"crawl {crawl_id} finished in ")
    assert f"wrote 3 page(s) and 0 item(s) to {out_file}" in out
    assert err.startswith("dashboard: http://127.0.0.1:") and f"/crawl/{crawl_id}" in err
    assert sorted(p["url"] for p in json.loads(out_file.read_text())) == sorted(
        site.url(p) for p in ("/", "/p/1", "/p/2"))
    stats = json.loads(stats_file.read_text())
    assert (stats["state"], stats["stored"], stats["failures_by_reason"]) == ("finished", 3, {"http_404": 1})


def test_crawl_detach_prints_the_id_and_leaves_it_running(twins, capsys, crawl_id, monkeypatch):
    rt, site = twins
    monkeypatch.setenv(ENV_BROKER, rt.settings.broker_url)
    code, out, _ = run(capsys, "crawl", site.url("/"), "--crawl-id", crawl_id, "--no-worker", "--detach")
    assert (code, out) == (0, f"{crawl_id}\n")
    assert rt.state.state_of(crawl_id) == "running" and not site.hits


def test_a_failed_request_is_sent_again_and_stored(twins, capsys, crawl_id, monkeypatch):
    rt, site = twins
    site.routes["/gone"] = lambda s, p: (404, {}, b"gone") if s.counts[p] == 1 else (200, {}, b"<title>Back</title>")
    crawl = start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    assert run_crawl(rt, crawl, timeout=20)
    assert crawl.stats()["failed"] == 1
    monkeypatch.setenv(ENV_BROKER, rt.settings.broker_url)
    sent = begun(monkeypatch, Crawl, "retry_failed")
    with driven(rt, crawl_id, sent.is_set) as finished:
        code, out, err = run(capsys, "retry-failed", crawl_id, "--no-worker", "--quiet")
    assert code == 0 and finished == [True], err
    assert out.splitlines()[0] == "sending 1 failed request(s) again"
    assert crawl.stats()["failed"] == 0 and crawl.stats()["redriven"] == 1
    assert {p["url"]: p["title"] for p in crawl.pages()}[site.url("/gone")] == "Back"


# --- the parts of waiting that say what happens -------------------------------------------------------
def test_an_interrupted_crawl_says_how_to_go_on(twins, capsys, crawl_id):
    rt, site = twins
    crawl = start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
    args = argparse.Namespace(no_worker=True, data_dir="/data")
    running.interrupted(args, crawl, embedded=False)
    assert capsys.readouterr().err == (f"\ncrawl {crawl_id} goes on in the fleet; watch it with: "
                                       f"crawltasks stats {crawl_id} --watch\n")
    assert rt.state.state_of(crawl_id) == "running"
    running.interrupted(args, crawl, embedded=True)
    assert capsys.readouterr().err == (f"\ncrawl {crawl_id} interrupted; continue it with: "
                                       f"crawltasks --data-dir /data crawl --crawl-id {crawl_id}\n")
    assert rt.state.state_of(crawl_id) == "interrupted"


class _Children:
    """What the command asks of its local workers, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def check(self) -> None:
        self.calls.append("check")

    def signal_stop(self, kill: bool) -> None:
        self.calls.append(f"stop kill={kill}")

    def wait(self) -> None:
        self.calls.append("wait")


def test_progress_also_looks_at_the_workers_and_stopping_waits_for_them():
    seen: list[dict[str, Any]] = []
    assert running.watching(seen.append, None) == seen.append
    children = _Children()
    running.watching(seen.append, children)({"stored": 1})  # type: ignore[arg-type]
    assert seen == [{"stored": 1}] and children.calls == ["check"]
    running.stop_workers(children, finished=True)  # type: ignore[arg-type]
    running.stop_workers(None)
    assert children.calls == ["check", "stop kill=True", "wait"]


class _Crawl:
    """A crawl whose wait finds Redis down ``downs`` times, then returns."""

    def __init__(self, downs: int) -> None:
        self.downs = downs

    def wait(self, progress: Any, poll: float) -> bool:
        if self.downs:
            self.downs -= 1
            raise redis.ConnectionError("Connection refused")
        return True


def test_waiting_rides_out_redis_for_the_outage_limit(twins, capsys, monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(running.time, "sleep", sleeps.append)
    settings = twins[0].settings
    monkeypatch.setenv("CRAWLTASKS_OUTAGE_LIMIT", "300")
    running.wait_through_outages(_Crawl(2), None, settings)
    err = capsys.readouterr().err
    assert sleeps == [1.0, 1.0] and err.count("stalled: Redis at") == 1 and "waiting up to 300 s" in err
    monkeypatch.setenv("CRAWLTASKS_OUTAGE_LIMIT", "-1")
    with pytest.raises(ServiceDown, match="Redis at .* is unreachable .*Connection refused"):
        running.wait_through_outages(_Crawl(5), None, settings)


def test_web_refuses_a_port_in_use(capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        code, _, err = run(capsys, "web", "--port", str(port))
    finally:
        taken.close()
    assert code == 2 and f"web: cannot listen on 127.0.0.1:{port}: " in err


# --- stats --watch reads the hosts a crawl scheduled ----------------------------------------------------
def test_stats_watch_shows_a_finished_crawl_once(capsys, crawl_id, monkeypatch):
    site = shop()
    rt = serving(monkeypatch, on_twins(site))
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=20)
        code, out, _ = run(capsys, "stats", crawl_id, "--watch", "--interval", "0")
    finally:
        rt.close()
    assert code == 0 and crawl_id in out and "finished" in out and "http_404" in out and "127.0.0.1:8080" in out


def test_a_command_dead_crawl_is_interrupted_at_the_next_start(quiet_settings, capsys, crawl_id, monkeypatch):
    site = shop()
    rt = serving(monkeypatch, on_stores(site, quiet_settings))
    try:
        start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
        running.note_abandoned(argparse.Namespace(data_dir=None))
        assert rt.state.state_of(crawl_id) == "interrupted" and not rt.fleet().read()[0]
    finally:
        rt.close()
    assert capsys.readouterr().err == (f"crawl {crawl_id} was interrupted (its command died); continue it with: "
                                       f"crawltasks crawl --crawl-id {crawl_id}\n")

