"""Redis, as broker and crawl state, restarted again and again under two busy workers: neither worker
dies of it, and the crawl finishes with every page stored exactly once.

Without the guard in ``crawltasks.worker.app`` (``DetachedSafeQoS``) a worker that loses its broker
connection while it holds unacknowledged messages stops with ``Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")``: a worker died in each of 5 runs
of this test without it.

The Redis is a redis-server of the test's own, not the shared one (``CRAWLTASKS_TEST_REDIS``): it is
stopped and started again, which nobody may do to a Redis that other test sessions use. It keeps an
append-only file, so the crawl's state and the queued messages survive each restart.
"""

import shutil
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawltasks import runtime, start_crawl
from crawltasks.worker.app import use_broker

from .helpers import OwnRedis, wait_for
from .sites import serve
from .test_outage import slow_site
from .workers import WorkerProcess

N_PAGES = 300
RESTARTS = 4  # without the guard ~6 in 10 connection losses stopped a worker: 8 losses, one almost surely
LOST = "Connection to broker lost"  # what a worker's consumer logs when it notices
CONNECTED = "Connected to redis://"  # what it logs (at info) each time it is connected again


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def losses(logs: list[Path]) -> list[int]:
    """How many times each worker has noticed its broker connection go."""
    return [log_text(log).count(LOST) for log in logs]


def all_connected(logs: list[Path]) -> bool:
    """Whether every worker's consumer is connected: it connected once more than it lost the connection.

    A worker still waiting out its reconnect backoff when Redis stops again never had a connection to
    lose, and would never log the loss the test waits for.
    """
    return all(text.count(CONNECTED) > text.count(LOST) for text in map(log_text, logs))


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_workers_survive_redis_restarts(settings, rt, tmp_path, crawl_id):
    own = OwnRedis(tmp_path)
    own.start()
    local = replace(settings, broker_url=own.url, redis_url=own.url)
    use_broker(own.url)
    here = runtime.Runtime(local)  # this test's own Redis; the session's runtime stays as it is
    server = serve(slow_site(N_PAGES, 0.02))
    logs = [tmp_path / f"w{i}.log" for i in range(2)]
    workers = [WorkerProcess(local, f"restart{i}", concurrency=4, log_path=log,
                             env={"CRAWLTASKS_RECLAIM_INTERVAL": "1"}, loglevel="info") for i, log in enumerate(logs)]

    def dead() -> list[str]:
        """What each worker that exited said: from its "Unrecoverable error" if it logged one."""
        out = []
        for w, log in zip(workers, logs, strict=True):
            if w.proc.poll() is not None:
                text = log_text(log)
                at = text.find("Unrecoverable error")
                out.append(f"{w.name} exited {w.proc.returncode}: {text[at:at + 3000] if at >= 0 else text[-3000:]}")
        return out

    try:
        crawl = start_crawl(server.url("/p/0"), crawl_id=crawl_id, host_delay=0, host_concurrency=8, batch_size=4,
                            obey_robots=False, retry_base=0.05, timeout=3, lease_time=8, rt=here)
        for _ in range(RESTARTS):
            # Work in flight (unacknowledged messages in both workers) when Redis goes away.
            target = crawl.stats()["stored"] + 15
            assert wait_for(lambda t=target: crawl.stats()["stored"] >= t or dead(), timeout=60), crawl.stats()
            assert not dead(), dead()
            assert wait_for(lambda: all_connected(logs) or dead(), timeout=60), losses(logs)
            assert not dead(), dead()
            seen = losses(logs)
            own.stop()
            # Down until both consumers have seen the connection go: the moment the crash happened.
            assert wait_for(lambda n=seen: all(a > b for a, b in zip(losses(logs), n, strict=True)), timeout=30)
            own.start()
        assert wait_for(lambda: crawl.finished or dead(), timeout=120), crawl.stats()
        assert not dead(), dead()
        assert not any("Unrecoverable error" in log_text(log) for log in logs)
        stored = [urlsplit(p["url"]).path for p in crawl.pages()]
        assert sorted(stored) == sorted(f"/p/{i}" for i in range(N_PAGES)), "a page was lost or stored twice"
        stats = crawl.stats()
        assert stats["stored"] == N_PAGES and stats["pending"] == 0 and stats["failed"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["skipped"]
    finally:
        for w in workers:
            w.kill()
        server.stop()
        here.close()
        own.stop()
        use_broker(settings.broker_url)
