"""A service that is down is named in one line, within seconds, by the command a user runs; one that
goes away mid-crawl shows as `stalled` and the crawl goes on when it is back."""

import os
import subprocess
import sys
import time
from dataclasses import replace
from urllib.parse import urlsplit

import pytest

from crawltasks import runtime, start_crawl
from crawltasks.celeryapp import use_broker
from crawltasks.embedded import MongoProcess, free_port
from crawltasks.settings import Settings

from .sites import serve, slow_page
from .test_outage import OwnRedis
from .workers import WorkerProcess, wait_for


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")} | env
    return subprocess.run([sys.executable, "-m", "crawltasks.cli", *args], capture_output=True, text=True,
                          env=full, timeout=timeout)


def closed_port_env(settings: Settings, which: str) -> dict[str, str]:
    env = settings.to_env()
    port = free_port()  # nothing listens there
    if which == "redis":
        env["CRAWLTASKS_BROKER_URL"] = env["CRAWLTASKS_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    elif which == "amqp":
        env["CRAWLTASKS_BROKER_URL"] = f"amqp://guest:Secret99@127.0.0.1:{port}//"
    else:
        env["CRAWLTASKS_MONGO_URL"] = f"mongodb://127.0.0.1:{port}/"
    return env


@pytest.mark.parametrize(("which", "named"), [("redis", "Redis at redis://127.0.0.1:"),
                                              ("amqp", "the broker at amqp://guest:***@127.0.0.1:"),
                                              ("mongo", "MongoDB at mongodb://127.0.0.1:")])
@pytest.mark.parametrize("command", [["crawl", "http://127.0.0.1:9/"], ["list"]])
def test_a_service_that_is_down_is_named_in_one_line(settings, which, named, command):
    proc = run_cli(command, closed_port_env(settings, which), timeout=30)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1 and named in lines[0] and "unreachable" in lines[0], proc.stderr
    assert "Secret99" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_store_outage_shows_as_stalled_and_the_crawl_goes_on(settings, rt, tmp_path, crawl_id):
    mongo = MongoProcess(tmp_path / "mongo", tmp_path / "mongo.log")
    local = replace(settings, mongo_url=mongo.start(), mongo_db="stalled")
    here = runtime.Runtime(local)
    server = serve({f"/p/{i}": slow_page(f"P{i}", [f"/p/{i + 1}"] if i < 299 else [], 0.02) for i in range(300)})
    worker = WorkerProcess(local, "stalled", concurrency=4, log_path=tmp_path / "w.log")
    try:
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, host_delay=0, obey_robots=False, batch_size=4,
                            rt=here)
        assert wait_for(lambda: crawl.stats()["stored"] >= 20, timeout=60)
        mongo.stop()
        assert wait_for(lambda: "MongoDB unreachable since" in crawl.stats().get("stalled", ""), timeout=60), \
            crawl.stats()
        mongo.start()
        assert crawl.wait(timeout=180), crawl.stats()
        assert sorted(urlsplit(p["url"]).path for p in crawl.pages()) == sorted(f"/p/{i}" for i in range(300))
        assert "stalled" not in crawl.stats()
    finally:
        worker.kill()
        server.stop()
        here.close()
        mongo.stop()


def test_the_waiting_command_rides_out_a_redis_restart(settings, tmp_path, crawl_id):
    own = OwnRedis(tmp_path)
    own.start()
    local = replace(settings, broker_url=own.url, redis_url=own.url)
    server = serve({f"/p/{i}": slow_page(f"P{i}", [f"/p/{i + 1}"] if i < 199 else [], 0.03) for i in range(200)})
    worker = WorkerProcess(local, "blip", concurrency=4, log_path=tmp_path / "w.log",
                           env={"CRAWLTASKS_RECLAIM_INTERVAL": "1"})
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", server.url("/p/0"), "--crawl-id", crawl_id,
           "--no-worker", "--host-delay", "0", "--host-concurrency", "2", "--batch-size", "4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")} | local.to_env()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: len(server.hits) >= 20, timeout=60)
        own.stop()
        time.sleep(3)  # the outage
        own.start()
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert "stalled: Redis at redis://127.0.0.1:" in err and f"crawl {crawl_id} finished" in out
    finally:
        if proc.poll() is None:
            proc.kill()
        worker.kill()
        server.stop()
        own.stop()
        use_broker(settings.broker_url)


class VolatileRedis(OwnRedis):
    """A redis-server that keeps nothing across a restart (no AOF, no snapshot)."""

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--appendonly", "no", "--save", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(self.ping, timeout=10), "redis-server did not start"


def test_a_redis_that_lost_its_data_never_makes_a_crawl_finished(settings, tmp_path, crawl_id):
    """Redis restarted empty mid-crawl: the counters that are left contradict themselves, and the
    waiting command says the state was lost (exit 4) instead of reporting a finished crawl."""
    own = VolatileRedis(tmp_path)
    own.start()
    local = replace(settings, broker_url=own.url, redis_url=own.url)
    server = serve({f"/p/{i}": slow_page(f"P{i}", [f"/p/{i + 1}"] if i < 299 else [], 0.03) for i in range(300)})
    worker = WorkerProcess(local, "volatile", concurrency=4, log_path=tmp_path / "w.log")
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", server.url("/p/0"), "--crawl-id", crawl_id,
           "--no-worker", "--host-delay", "0", "--host-concurrency", "2", "--batch-size", "4", "--quiet"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")} | local.to_env()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: len(server.hits) >= 20, timeout=60)
        own.stop()
        own.start()  # empty: the crawl's registry, counters, frontier and broker are gone
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 4, (out, err)
        assert f"the state of crawl {crawl_id} in Redis was lost" in err and "finished" not in out
    finally:
        if proc.poll() is None:
            proc.kill()
        worker.kill()
        server.stop()
        own.stop()
