"""Crash test: real worker subprocesses killed with SIGKILL at random moments during a crawl of a few
thousand local pages, and restarted. The crawl must finish with every reachable page stored exactly
once and the counters equal to the stored set.

What brings a dead worker's requests back is its silence: the other workers' reclaimers see its
heartbeat stop and put its claims back in the frontier within seconds (the crawl's ``lease_time``
stays at its default, 600 s, far beyond the test). The idempotent store and the once-only finish
counters make the duplicates harmless.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
import redis

from crawltasks import start_crawl
from crawltasks.settings import Settings

from .sites import SiteServer, html
from .workers import WorkerProcess

N_PAGES = 2000
KILLS = 4
QUEUES = "crawl.fetch.high,crawl.fetch.default,crawl.fetch.low,crawl.store,crawl.parse"
# CRASH_RECLAIM=0 relies on Celery's redelivery alone: that loses requests (a message taken off the
# queue but not yet recorded as unacked dies with its worker), which is why claims and heartbeats exist.
RECLAIM = os.environ.get("CRASH_RECLAIM", "1") == "1"


def crash_site(n: int = N_PAGES, seed: int = 5) -> dict:
    """n pages, each linking to the next one (so all are reachable) and to a few random others."""
    rnd = random.Random(seed)
    routes = {}
    for i in range(n):
        links = [f"/p/{(i + 1) % n}", *(f"/p/{rnd.randrange(n)}" for _ in range(4))]
        body = html(f"Page {i}", links, extra="<p>" + "filler text " * 40 + "</p>")
        routes[f"/p/{i}"] = lambda server, path, body=body: (200, {}, body)
    return routes


class Workers:
    """Worker subprocesses by slot (see tests.workers), killed and restarted; all are killed at the end."""

    def __init__(self, settings: Settings, logdir: Path, concurrency: int = 8) -> None:
        self.settings = settings
        self.env = {"CRAWLTASKS_RECLAIM_INTERVAL": "2" if RECLAIM else "100000", "PYTHONUNBUFFERED": "1",
                    "CRAWLTASKS_DEAD_AFTER": "6",
                    **({"CRASH_TRACE": str(logdir)} if os.environ.get("CRASH_TRACE") else {})}
        self.logdir = logdir
        self.concurrency = concurrency
        self.procs: dict[int, WorkerProcess] = {}
        self.started = 0

    def start(self, slot: int) -> WorkerProcess:
        self.started += 1
        self.procs[slot] = WorkerProcess(self.settings, f"crash{slot}-{self.started}", queues=QUEUES,
                                         concurrency=self.concurrency, env=self.env, app="tests.crashapp",
                                         log_path=self.logdir / f"worker{slot}-{self.started}.log")
        return self.procs[slot]

    def kill(self, slot: int) -> None:
        self.procs[slot].kill()

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of every worker's log (for failure reports)."""
        out = []
        for path in sorted(self.logdir.glob("worker*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop_all(self) -> None:
        for worker in self.procs.values():
            worker.kill()


def frontier_state(rt, crawl_id: str) -> dict:
    """Where the unfinished requests are: queued, claimed, hosts' slots and times (for failure reports)."""
    from crawltasks.backends.redis.keys import Keys

    r = rt.state.r
    claims = {k.decode(): v.decode() for k, v in r.hgetall(Keys.claims(crawl_id)).items()}
    return {"sizes": rt.frontier.sizes(crawl_id), "claims": dict(list(claims.items())[:8]),
            "busy": r.hgetall(Keys.busy(crawl_id)), "ready": r.zrange(Keys.ready(crawl_id), 0, -1, withscores=True),
            "now": r.time(), "live": rt.fleet().read()}


def broker_state(url: str) -> dict:
    """What the Redis broker holds: queued, reserved (unacked) and the restore mutex (for failure reports)."""
    client = redis.Redis.from_url(url)
    try:
        queued = {}
        for q in QUEUES.split(","):
            keys = [q, *client.keys(f"{q}\x06\x16*")]
            queued[q] = sum(client.llen(k) for k in keys)
        return {"queued": queued, "unacked": client.hlen("unacked"), "unacked_index": client.zcard("unacked_index"),
                "unacked_mutex_ttl": client.ttl("unacked_mutex")}
    finally:
        client.close()


@pytest.fixture
def workers(settings, tmp_path):
    w = Workers(settings, tmp_path)
    yield w
    w.stop_all()


@pytest.fixture
def crash_server():
    server = SiteServer(crash_site()).start()
    yield server
    server.stop()


def test_killed_workers_lose_nothing_and_store_nothing_twice(rt, workers, crash_server, crawl_id):
    seed = int(os.environ.get("CRASH_SEED", "11"))  # the kill moments; a failure names it, to run it again
    rnd = random.Random(seed)
    for slot in (0, 1):
        workers.start(slot)
    crawl = start_crawl(crash_server.url("/p/0"), crawl_id=crawl_id, host_delay=0.0, host_concurrency=64,
                        batch_size=4, timeout=5.0, retry_base=0.05, retry_cap=0.5)
    kills = []
    try:
        while len(kills) < KILLS and not crawl.finished:
            time.sleep(rnd.uniform(1.5, 4.0))  # the point: a kill at a random moment of the crawl
            if crawl.finished:
                break
            slot = rnd.choice((0, 1))
            workers.kill(slot)
            kills.append((slot, crawl.stats()["stored"]))
            workers.start(slot)
        finished = crawl.wait(timeout=110)
        stats = crawl.stats()
        print(f"\ncrash test (CRASH_SEED={seed}): kills (worker, pages stored at the kill) {kills}; stats {stats}; "
              f"server requests {len(crash_server.hits)}")
        assert len(kills) >= 3, f"the crawl finished before {KILLS} kills: make it longer ({kills})"
        assert finished, (f"the crawl did not finish after {len(kills)} kills (CRASH_SEED={seed}): {stats}; "
                          f"broker {broker_state(rt.settings.broker_url)}; frontier {frontier_state(rt, crawl_id)}\n"
                          f"{workers.log_tails()}")

        pages = crawl.pages()
        urls = [p["url"] for p in pages]
        assert len(urls) == len(set(urls)), "a page was stored twice"
        assert {u.removeprefix(crash_server.base) for u in urls} == {f"/p/{i}" for i in range(N_PAGES)}
        failures = [(f["reason"], f["url"].removeprefix(crash_server.base)) for f in crawl.failures()]
        assert not failures, f"failure records for pages of a site that never fails: {failures}"
        assert stats["stored"] == len(pages) == N_PAGES
        assert stats["failed"] == 0 and stats["pending"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"] == N_PAGES
    finally:
        workers.stop_all()
        rt.state.delete_crawl(crawl_id)
        rt.storage.delete_crawl(crawl_id)
