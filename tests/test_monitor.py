"""Per-crawl monitoring and log lines: a finished crawl's snapshot, view and `list` rows on the twins
(the registry keeps the hosts a crawl scheduled there too); following a running crawl, the commands
and the crawl progress bar on a real worker, the test Redis and SecantusDB; a host's gate state on
the twins; the log line format as people read it."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid

from rich.console import Console

from crawltasks import logs, start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.backends.memory.runtime import twin_runtime
from crawltasks.monitor.progress import CrawlProgress, RateMeter, eta_seconds, human_seconds
from crawltasks.monitor.watch import host_states, list_rows, render, render_list, render_text, snapshot, watch
from crawltasks.urls import host_key

from .sites import FAST, html, on_twins, page, serve, twin_site
from .test_flower import ROOT, service_env


def cli(settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crawltasks.cli", *args], cwd=ROOT, env=service_env(settings),
                          capture_output=True, text=True, timeout=timeout)


def small_routes():
    routes = {"/": page("Home", [f"/p/{i}" for i in range(6)] + ["/gone", "/broken"])}
    for i in range(6):
        routes[f"/p/{i}"] = page(f"Page {i}", ["/"])
    routes["/gone"] = lambda s, p: (404, {}, html("gone"))
    routes["/broken"] = lambda s, p: (500, {}, html("broken"))
    return routes


def small_site():
    return serve(small_routes())


def test_snapshot_and_view_of_a_finished_crawl(crawl_id):
    site = twin_site(small_routes())
    rt = on_twins(site)
    crawl = start_crawl(site.url("/"), crawl_id=crawl_id, max_retries=1, rt=rt, **FAST)
    assert run_crawl(rt, crawl, timeout=30), crawl.stats()
    snap = snapshot(crawl_id, rt)
    assert snap.finished and snap.done == 9 and snap.stats["stored"] == 7
    assert snap.failures == {"http_404": 1, "http_500": 1}
    assert snap.seeds == [site.url("/")]
    assert [h.host for h in snap.hosts] == [host_key(site.url("/"))]
    assert snap.hosts[0].in_flight == 0 and snap.hosts[0].label == "idle"

    text = render_text(render(snap, rate=3.5, done_rate=4.0))
    for expected in (crawl_id, "finished", "stored", "failures by reason", "http_404", "http_500",
                     "pages/s 3.5", "ETA done", host_key(site.url("/"))):
        assert expected in text, f"{expected!r} not in:\n{text}"

    rows = {r["crawl_id"]: r for r in list_rows(rt)}
    assert rows[crawl_id]["state"] == "finished" and rows[crawl_id]["stored"] == 7
    listing = render_text(render_list(list(rows.values())), width=160)
    assert crawl_id in listing and "finished" in listing


def test_watch_follows_a_running_crawl_until_it_finishes(worker, rt, crawl_id):
    site = small_site()
    try:
        # One request at a time with a delay: the crawl is still running when the watch starts.
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, max_retries=0,
                            **{**FAST, "host_concurrency": 1, "host_delay": 0.1})
        out = io.StringIO()
        last = watch(crawl_id, interval=0.1, console=Console(file=out, width=120), rt=rt)
    finally:
        site.stop()
    assert last.finished and crawl.finished
    text = out.getvalue()
    assert crawl_id in text and "finished" in text and "http_500" in text


def test_cli_stats_watch_and_list(worker, rt, settings, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
    assert crawl.wait(timeout=60)

    watched = cli(settings, "stats", crawl_id, "--watch", "--interval", "0.2")
    assert watched.returncode == 0, watched.stderr
    assert crawl_id in watched.stdout and "failures by reason" in watched.stdout and "http_404" in watched.stdout

    listed = cli(settings, "list")
    assert listed.returncode == 0, listed.stderr
    assert crawl_id in listed.stdout and "finished" in listed.stdout
    rows = json.loads(cli(settings, "list", "--json").stdout)
    assert any(r["crawl_id"] == crawl_id and r["state"] == "finished" for r in rows)

    for args, message in ((["stats", crawl_id, "--watch", "--json"], "do not go together"),
                          (["stats", "no-such-crawl", "--watch"], "no crawl named 'no-such-crawl'")):
        proc = cli(settings, *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_cli_crawl_shows_progress_with_the_same_numbers(worker, rt, settings, crawl_id):
    site = small_site()
    try:
        proc = cli(settings, "crawl", site.url("/"), "--crawl-id", crawl_id, "--host-delay", "0",
                   "--max-retries", "0", "--workers", "2")
    finally:
        site.stop()
    assert proc.returncode == 0, proc.stderr
    assert f"crawl {crawl_id} finished" in proc.stdout
    # stderr is not a terminal here: progress comes as plain lines with the bar's numbers
    last = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"{crawl_id}:")][-1]
    for part in ("9/9 done", "stored 7", "failed 2", "in flight 0", "pages/s", "ETA 0s"):
        assert part in last, last


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_and_quiet():
    stats = {"crawl_id": "c1", "state": "running", "scheduled": 10, "stored": 4, "failed": 1, "skipped": 0,
             "pending": 5, "elapsed": 2.0}
    term = Terminal()
    with CrawlProgress(stream=term) as show:
        show(stats)
        show({**stats, "stored": 9, "pending": 0, "state": "finished"})
    assert "c1" in term.getvalue() and "stored 9" in term.getvalue() and "10/10 done" in term.getvalue()
    quiet = io.StringIO()
    with CrawlProgress(quiet=True, stream=quiet) as show:
        show(stats)
    assert quiet.getvalue() == ""


def test_rates_and_eta():
    meter = RateMeter(window=10)
    assert meter.add(0, at=0.0) is None
    assert meter.add(10, at=2.0) == 5.0
    assert meter.add(40, at=12.0) == 3.0  # samples older than the window are dropped
    assert eta_seconds(0, None) == 0.0 and eta_seconds(10, None) is None and eta_seconds(10, 2.0) == 5.0
    assert [human_seconds(s) for s in (None, 4.4, 75, 3725)] == ["-", "4s", "1m15s", "1h02m"]


def test_log_lines_are_one_structured_line_at_sensible_levels(caplog):
    caplog.set_level(logging.DEBUG, logger=logs.LOGGER_NAME)
    line = logs.crawl_started("c-1", ["http://127.0.0.1:8000/"], {"spider": "site", "max_depth": 2})
    assert line == "crawl.started crawl_id=c-1 url=http://127.0.0.1:8000/ max_depth=2 seeds=1 spider=site"
    logs.request_failed("c-1", "http://127.0.0.1:8000/gone", "http_404", 404, 1, "HTTP 404 from x")
    logs.request_failed("c-1", "http://127.0.0.1:8000/dead", "http_500", 500, 4, "HTTP 500 from x")
    logs.host_backoff("c-1", "127.0.0.1:8000", 30, "http_429", url="http://127.0.0.1:8000/slow")
    logs.host_backoff("c-1", "127.0.0.1:8000", 0.5, "politeness")
    logs.crawl_finished("c-1", {"stored": 7, "failed": 2, "elapsed": 1.25})
    got = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert got[1] == ("INFO", 'request.failed crawl_id=c-1 url=http://127.0.0.1:8000/gone reason=http_404 '
                              'status=404 attempts=1 message="HTTP 404 from x"')
    assert got[2][0] == "WARNING" and "reason=http_500" in got[2][1] and "attempts=4" in got[2][1]
    assert got[3][0] == "WARNING" and got[3][1].startswith("host.backoff crawl_id=c-1 url=")
    assert "seconds=30" in got[3][1]
    assert got[4][0] == "DEBUG"
    assert got[5] == ("INFO", "crawl.finished crawl_id=c-1 elapsed=1.25 failed=2 stored=7")
    assert all("\n" not in message for _, message in got)
    assert caplog.records[0].fields["seeds"] == 1  # the fields travel with the record too


def test_line_formatter_keeps_tracebacks_for_bugs_only():
    stream = io.StringIO()
    handler = logs.setup(logging.INFO, stream)
    try:
        log = logging.getLogger("crawltasks.test")
        try:
            raise TimeoutError("read timed out")
        except TimeoutError:
            log.warning("fetch failed", exc_info=True, extra={"expected": True, "crawl_id": "c-2",
                                                              "url": "http://127.0.0.1:9/x"})
            log.error("unexpected", exc_info=True)
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("WARNING fetch failed crawl_id=c-2 url=http://127.0.0.1:9/x")
    assert "ERROR   unexpected" in lines[1] and "Traceback" in stream.getvalue()
    assert sum("Traceback" in ln for ln in lines) == 1
    assert logs.format_fields({"message": 'say "hi"\nbye', "n": None, "ok": True, "long": "x" * 400}) == (
        'long=' + "x" * 297 + '... message="say \\"hi\\"\\nbye" n=- ok=true')


def test_host_state_shows_a_host_backing_off():
    host = f"monitor-{uuid.uuid4().hex[:6]}.invalid:80"
    rt = twin_runtime()  # the gate's twin: nothing to clean up after
    rt.gate.feedback(host, slow=True, wait=0.0)  # the core's own 429/503 transition
    [state] = host_states(rt, [host], limit=2)
    assert state.backoff == 1.0 and state.label == "backing off" and state.wait > 0
