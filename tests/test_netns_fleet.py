"""A fleet across a real network boundary: every part on a host of its own, one worker host cut off.

Hosts are Linux network namespaces on one bridge (``tests.netns``), each with its own address:
``services`` (Redis as broker and crawl state, a MongoDB-protocol store), ``site`` (the crawled web
site), two worker hosts (``celery -A crawltasks worker``) and ``command`` (``crawltasks crawl
--no-worker``). The test process watches from its own address on the same bridge. No part is on
loopback, so an address that silently falls back to 127.0.0.1 breaks the crawl instead of passing.

Mid-crawl, one worker host's cable is pulled for 30 s and plugged back: the other worker must take
its claims over (a short ``CRAWLTASKS_DEAD_AFTER``), the crawl must end with every page stored once
and nothing failed, and the cut worker must come back to the fleet on its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pymongo
import pytest
import redis

from crawltasks.backends.redis.keys import Keys
from crawltasks.crawl import Crawl
from crawltasks.runtime import Runtime
from crawltasks.settings import Settings

from .netns import Network
from .sites import SiteServer, serve, slow_page
from .workers import ALL_QUEUES, ROOT, wait_for, worker_env

N_PAGES = 600
PAGE_DELAY = 0.03  # seconds each page takes to answer
# Politeness caps the whole fleet at one request start per HOST_DELAY on the site (12.5 pages/s): a
# fifth of the site plus 30 s at the cap is 495 pages, so some are left for the cut worker once it is
# back (the whole crawl takes about a minute at the ~10 pages/s it reaches).
HOST_DELAY = 0.08
CUT_FOR = 30.0  # seconds the worker host stays cut off
DEAD_AFTER = 5  # seconds of heartbeat silence before a worker's claims are taken over
REDIS_PORT, MONGO_PORT = 6379, 27017
HOSTS = ["services", "site", "w1", "w2", "command"]

# SecantusDB on a given address (crawltasks.local.embedded binds its store to 127.0.0.1 only, which is
# right for the embedded mode and wrong for a store other hosts reach).
MONGO_SERVER = """
import signal, sys, threading
from secantus import SecantusDBServer
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
server = SecantusDBServer(host=sys.argv[1], port=int(sys.argv[2]), storage_path=sys.argv[3])
server.start()
print(server.uri, flush=True)
stop.wait()
server.stop()
"""


def site_routes(n: int) -> dict:
    """A chain through every page plus a binary tree over them: all reachable from /p/0, found as the
    crawl goes (links are scheduled by whichever worker parses them)."""
    def links(i: int) -> list[str]:
        return [f"/p/{j}" for j in ((i + 1) % n, 2 * i + 1, 2 * i + 2) if j < n]
    return {f"/p/{i}": slow_page(f"P {i}", links(i), PAGE_DELAY) for i in range(n)}


@pytest.fixture
def net() -> Iterator[Network]:
    with Network(HOSTS) as network:
        yield network


@pytest.fixture
def services(net: Network, tmp_path: Path) -> Settings:
    """Redis and the store on the services host. The session's Redis (CRAWLTASKS_TEST_REDIS,
    127.0.0.1 in the root namespace) cannot be reached from the other hosts, and this test is about
    not using loopback: a private redis-server bound to the services host's address takes its place,
    holding the broker (db 0) and the crawl state (db 1)."""
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.skip("needs redis-server")
    addr = net.address["services"]
    net.popen("services", [redis_server, "--bind", addr, "--port", str(REDIS_PORT), "--save", "",
                           "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp_path)],
              log=tmp_path / "redis.log")
    net.popen("services", [sys.executable, "-c", MONGO_SERVER, addr, str(MONGO_PORT), str(tmp_path / "mongo")],
              log=tmp_path / "mongo.log")
    settings = Settings(broker_url=f"redis://{addr}:{REDIS_PORT}/0", redis_url=f"redis://{addr}:{REDIS_PORT}/1",
                        mongo_url=f"mongodb://{addr}:{MONGO_PORT}/", mongo_db="netns")

    def redis_up() -> bool:
        try:
            return bool(redis.Redis.from_url(settings.redis_url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def mongo_up() -> bool:
        client = pymongo.MongoClient(settings.mongo_url, serverSelectionTimeoutMS=1000)
        try:
            client.admin.command("ping")
            return True
        except pymongo.errors.PyMongoError:
            return False
        finally:
            client.close()

    assert wait_for(redis_up, timeout=20), f"redis-server on {addr} did not answer; see {tmp_path / 'redis.log'}"
    assert wait_for(mongo_up, timeout=30), f"the store on {addr} did not answer; see {tmp_path / 'mongo.log'}"
    return settings


@pytest.fixture
def site(net: Network) -> Iterator[SiteServer]:
    """The site on a host of its own: its listening socket is made in the site's namespace."""
    with net.entered("site"):
        server = serve(site_routes(N_PAGES), host=net.address["site"])
    yield server
    server.stop()


def start_worker(net: Network, host: str, settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    """``celery -A crawltasks worker`` on ``host``, every queue, pointed at the services host."""
    env = worker_env(settings, CRAWLTASKS_DEAD_AFTER=str(DEAD_AFTER), CRAWLTASKS_RECLAIM_INTERVAL="1")
    cmd = [sys.executable, "-m", "celery", "-A", "crawltasks", "worker", "-Q", ALL_QUEUES, "-P", "threads",
           "-c", "4", "-n", f"{host}@%h", "-l", "warning", "--without-gossip", "--without-mingle",
           "--without-heartbeat"]
    return net.popen(host, cmd, log=log, cwd=ROOT, env=env)


def beats_of(rt: Runtime, pid: int) -> float | None:
    """Seconds since the worker process ``pid`` last beat (its id holds its pid), or None if never."""
    now_s, now_us = rt.state.r.time()
    now = now_s * 1000 + now_us // 1000
    ages = [now - score for member, score in rt.state.r.zrange(Keys.workers, 0, -1, withscores=True)
            if member.decode().split(":")[1] == str(pid)]
    return min(ages) / 1000 if ages else None


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def test_crawl_across_hosts_survives_a_worker_host_cut_off(net: Network, services: Settings, site: SiteServer,
                                                            tmp_path: Path) -> None:
    crawl_id = f"netns-{int(time.time())}"
    cut_host, other_host = "w1", "w2"
    cut_addr, other_addr = net.address[cut_host], net.address[other_host]
    workers = {h: start_worker(net, h, services, tmp_path / f"{h}.log") for h in (cut_host, other_host)}
    stats_path = tmp_path / "stats.json"
    command_log = tmp_path / "command.log"
    command = net.popen(
        "command",
        [sys.executable, "-m", "crawltasks.cli", "crawl", site.url("/p/0"), "--no-worker", "--quiet",
         "--crawl-id", crawl_id, "--stats-json", str(stats_path), "--host-concurrency", "4",
         "--host-delay", str(HOST_DELAY), "--batch-size", "4", "--timeout", "5",
         "-s", "obey_robots=false", "-s", "retry_base=0.2", "-s", "retry_cap=2", "-s", "lease_time=60"],
        cwd=ROOT, env=worker_env(services, CRAWLTASKS_DEAD_AFTER=str(DEAD_AFTER)),
        log=command_log)
    rt = Runtime(services)  # the test's own view, from its address on the bridge
    crawl = Crawl(crawl_id, rt)
    try:
        def stats() -> dict:
            return rt.state.stats(crawl_id)

        def fetched_by(addr: str, since: float = 0.0, until: float = float("inf")) -> int:
            return sum(1 for h in list(site.hits) if h.client == addr and since <= h.started <= until)

        # Both workers fetch, a fifth of the site is stored: pull the cut worker's cable.
        assert wait_for(lambda: stats().get("stored", 0) >= N_PAGES // 5 and fetched_by(cut_addr) > 0
                        and fetched_by(other_addr) > 0, timeout=90, interval=0.2), \
            f"the crawl did not get going: {stats()}\n{tail(command_log)}\n{tail(tmp_path / 'w1.log')}"
        before = stats()
        net.cut(cut_host)
        cut_at = time.monotonic()
        took_over_at = None
        while time.monotonic() - cut_at < CUT_FOR:
            if took_over_at is None and stats().get("reclaimed", 0) > before.get("reclaimed", 0):
                took_over_at = time.monotonic()
            time.sleep(0.2)
        during = stats()
        net.restore(cut_host)
        restored_at = time.monotonic()
        print(f"cut {cut_host} at {before.get('stored')} stored; during the cut "
              f"{during.get('stored', 0) - before.get('stored', 0)} more stored, "
              f"{during.get('reclaimed', 0) - before.get('reclaimed', 0)} request(s) taken over "
              f"{'after %.1f s' % (took_over_at - cut_at) if took_over_at else 'never'}")

        # The cut is real: nothing of the cut host reached the site meanwhile (a request already on
        # its way when the cable was pulled is allowed for a second). The other worker went on.
        assert fetched_by(cut_addr, since=cut_at + 1.0, until=restored_at) == 0, "the cut host still reached the site"
        assert fetched_by(other_addr, since=cut_at, until=restored_at) > 0, "nothing was fetched during the cut"
        assert during["stored"] > before["stored"], "the crawl made no progress while a worker was cut off"
        assert took_over_at is not None, "the cut worker's claims were not taken over while it was away"

        try:
            code = command.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the crawl did not finish: {crawl.stats()}\n{tail(command_log)}")
        assert code == 0, f"crawl command exited {code}:\n{tail(command_log)}"
        final = json.loads(stats_path.read_text())
        print(f"final: {final}")

        # Every page stored exactly once, nothing failed.
        urls = Counter(urlsplit(p["url"]).path for p in crawl.pages())
        assert {u for u, n in urls.items() if n > 1} == set(), "a page was stored twice"
        assert set(urls) == {f"/p/{i}" for i in range(N_PAGES)}, "a page is missing"
        assert rt.storage.count("pages", crawl_id) == N_PAGES
        assert crawl.failures() == [], "a request failed"
        end = crawl.stats()
        assert end["state"] == "finished" and end["stored"] == N_PAGES and end["failed"] == 0, end
        assert end["pending"] == 0
        # The site saw every page; a page fetched again after a takeover is expected (stored once still).
        fetches = Counter(h.path for h in site.hits)
        assert set(fetches) == set(urls)
        again = sum(n - 1 for n in fetches.values())
        print(f"{N_PAGES} pages stored once; {again} fetch(es) repeated after the takeover; "
              f"{end['reclaimed']} reclaimed; the cut worker fetched "
              f"{fetched_by(cut_addr, since=restored_at)} after it was plugged back")

        # The cut worker came back by itself: still running, beating again in the fleet.
        assert workers[cut_host].poll() is None, f"the cut worker died:\n{tail(tmp_path / f'{cut_host}.log')}"

        def beating() -> bool:
            age = beats_of(rt, workers[cut_host].pid)
            return age is not None and age < DEAD_AFTER
        assert wait_for(beating, timeout=60, interval=0.5), \
            f"the cut worker did not beat again:\n{tail(tmp_path / f'{cut_host}.log')}"
        # ... and took work again: its broker connection recovered too (fetches arrive as messages).
        after_restore = fetched_by(cut_addr, since=restored_at)
        assert after_restore > 0, f"the cut worker took no work after it was plugged back:\n{tail(tmp_path / 'w1.log')}"
        assert workers[other_host].poll() is None
    finally:
        rt.close()
