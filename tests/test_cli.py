"""The `crawltasks` command as users run it: a subprocess with no service configured (embedded mode)."""

import json
import os
import subprocess
import sys

import pytest

from . import clirun
from .sites import basic_site, expected_basic_paths, serve


def run_cli(args, home, timeout=120):
    return clirun.run_cli(args, {"HOME": str(home)}, timeout)  # the embedded data directory lives under it


@pytest.fixture(scope="module")
def site():
    server = serve(basic_site())
    yield server
    server.stop()


def test_embedded_crawl_then_stats_and_export_from_the_same_data_dir(site, tmp_path):
    out = tmp_path / "pages.jsonl"
    proc = run_cli(["crawl", site.url("/"), "--crawl-id", "cli-1", "--output", str(out), "--host-delay", "0",
                    "--host-concurrency", "8", "--max-retries", "1", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "crawl cli-1 finished" in proc.stdout
    pages = [json.loads(line) for line in out.read_text().splitlines()]
    # one retry is not enough for /flaky (it fails twice): it ends failed, with /missing and /dead
    assert {p["url"].removeprefix(site.base) for p in pages} == expected_basic_paths() - {"/flaky"}
    for p in pages:
        assert {"url", "status", "depth", "title", "crawl_id", "fetched_at"} <= set(p)
        assert p["crawl_id"] == "cli-1" and "#" not in p["url"]

    stats = run_cli(["stats", "cli-1", "--json"], tmp_path)
    assert stats.returncode == 0, stats.stderr
    numbers = json.loads(stats.stdout)
    assert numbers["state"] == "finished" and numbers["stored"] == len(pages) and numbers["failed"] == 3

    again = tmp_path / "again.jsonl"
    export = run_cli(["export", "cli-1", "--output", str(again)], tmp_path)
    assert export.returncode == 0, export.stderr
    assert sorted(again.read_text().splitlines()) == sorted(out.read_text().splitlines())

    failures = run_cli(["failures", "cli-1", "--reason", "http_404"], tmp_path)
    assert failures.returncode == 0 and "/missing" in failures.stdout and "1 failure(s)" in failures.stdout

    retried = run_cli(["retry-failed", "cli-1", "--reason", "http_500", "--quiet"], tmp_path)
    assert retried.returncode == 0, retried.stderr
    assert "sending 2 failed request(s) again" in retried.stdout  # /dead and /flaky
    assert "crawl cli-1 finished" in retried.stdout

    cancel = run_cli(["cancel", "cli-1"], tmp_path)
    assert cancel.returncode == 0 and "cannot cancel a finished crawl" in cancel.stdout


def test_max_depth_zero_fetches_only_the_seeds(site, tmp_path):
    out = tmp_path / "seed.jsonl"
    proc = run_cli(["crawl", site.url("/"), site.url("/p/7"), "--max-depth", "0", "-o", str(out),
                    "--host-delay", "0", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(line)["url"] for line in out.read_text().splitlines()) == [site.url("/"), site.url("/p/7")]


@pytest.mark.parametrize(("args", "message"), [
    (["crawl"], "give at least one URL"),
    (["crawl", "ftp://example.com/"], "unsupported scheme"),
    (["crawl", "http://127.0.0.1:9/", "--max-depth", "-1"], "--max-depth"),
    (["crawl", "http://127.0.0.1:9/", "--detach"], "--detach goes with --no-worker"),
    (["crawl", "http://127.0.0.1:9/", "--no-worker"], "CRAWLTASKS_BROKER_URL"),
    (["nonsense"], "invalid choice"),
    ([], "give a command"),
])
def test_usage_errors_are_one_line(args, message, tmp_path):
    proc = run_cli(args, tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_crawl_is_a_clear_error(tmp_path):
    proc = run_cli(["stats", "no-such-crawl"], tmp_path)
    assert proc.returncode == 2 and "no crawl named 'no-such-crawl'" in proc.stderr


def test_a_store_that_cannot_start_is_one_line_and_leaves_no_worker_behind(site, tmp_path):
    """The embedded store boots while the workers start; when it fails, the workers go too."""
    import psutil

    data = tmp_path / ".local" / "share" / "crawltasks"
    data.mkdir(parents=True)
    (data / "mongo").write_text("a file where the store wants its directory")
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", site.url("/"), "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")},
                                 "HOME": str(tmp_path)})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "store" in lines[0] and "Traceback" not in err, err
    # the worker processes are forked copies of the command: the same command line
    leftovers = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == cmd]
    assert not leftovers, f"worker processes left running: {leftovers}"
