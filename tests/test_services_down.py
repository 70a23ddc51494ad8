"""A service that is down is named in one line, within seconds, by the command a user runs; one that
goes away mid-crawl shows as `stalled` and the crawl goes on when it is back."""

import time
from dataclasses import replace
from urllib.parse import urlsplit

import pytest

from crawltasks import runtime, start_crawl
from crawltasks.local.embedded import MongoProcess
from crawltasks.settings import Settings
from crawltasks.worker.app import use_broker

from .clirun import run_cli, start_cli
from .helpers import OwnRedis, free_port, wait_for
from .sites import serve, slow_page
from .workers import WorkerProcess


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
    n = 150  # a chain, fetched one page after another: long enough to be mid-crawl when the store goes
    server = serve({f"/p/{i}": slow_page(f"P{i}", [f"/p/{i + 1}"] if i < n - 1 else [], 0.02) for i in range(n)})
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
        assert sorted(urlsplit(p["url"]).path for p in crawl.pages()) == sorted(f"/p/{i}" for i in range(n))
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
    n = 100  # a chain, fetched one page after another: still running when Redis goes
    server = serve({f"/p/{i}": slow_page(f"P{i}", [f"/p/{i + 1}"] if i < n - 1 else [], 0.03) for i in range(n)})
    worker = WorkerProcess(local, "blip", concurrency=4, log_path=tmp_path / "w.log",
                           env={"CRAWLTASKS_RECLAIM_INTERVAL": "1"})
    proc = start_cli(["crawl", server.url("/p/0"), "--crawl-id", crawl_id, "--no-worker", "--host-delay", "0",
                      "--host-concurrency", "2", "--batch-size", "4"], local.to_env())
    try:
        assert wait_for(lambda: len(server.hits) >= 20, timeout=60)
        own.stop()
        time.sleep(3)  # the outage itself: letting time pass while Redis is down is the point
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


def branching_site(n: int, delay: float) -> dict:
    """Each page links to the next and to one twice as far: many requests wait when Redis is lost."""
    return {f"/p/{i}": slow_page(f"P{i}", [f"/p/{j}" for j in (i + 1, 2 * i + 1) if j < n], delay) for i in range(n)}


def stored_paths(rt: runtime.Runtime, crawl_id: str) -> list[str]:
    return [urlsplit(p["url"]).path for p in rt.storage.pages(crawl_id)]


def test_a_redis_that_lost_its_data_never_makes_a_crawl_finished_and_the_rerun_fetches_what_is_missing(
        settings, tmp_path, crawl_id):
    """Redis restarted empty mid-crawl: the counters that are left contradict themselves, and the
    waiting command says the state was lost (exit 4) instead of reporting a finished crawl; `list`
    shows it lost; the command it names rebuilds the crawl from MongoDB, and the site's own log
    shows that no stored page is fetched again, not even the seed. Only robots.txt may be: its cache in
    Redis is gone, so a worker that has not kept it in memory fetches it once more. The worker that ran
    before the loss keeps working through it all (its cache of seen links must not outlive the loss)."""
    own = OwnRedis(tmp_path, persistent=False)  # keeps nothing across a restart: no AOF, no snapshot
    own.start()
    local = replace(settings, broker_url=own.url, redis_url=own.url)
    here = runtime.Runtime(local)
    server = serve(branching_site(300, 0.03))
    worker = WorkerProcess(local, "volatile", concurrency=4, log_path=tmp_path / "w.log")
    proc = start_cli(["crawl", server.url("/p/0"), "--crawl-id", crawl_id, "--no-worker", "--host-delay", "0",
                      "--host-concurrency", "4", "--batch-size", "4", "--quiet"], local.to_env())
    try:
        assert wait_for(lambda: len(server.hits) >= 40, timeout=60)
        own.stop()
        own.start()  # empty: the crawl's registry, counters, frontier and broker are gone
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 4, (out, err)
        assert f"the state of crawl {crawl_id} in Redis was lost" in err and "finished" not in out
        assert f"continue it with 'crawltasks crawl --crawl-id {crawl_id}'" in err

        listed = run_cli(["list"], local.to_env())
        assert listed.returncode == 0, listed.stderr
        assert any(line.split()[:2] == [crawl_id, "lost"] for line in listed.stdout.splitlines()), listed.stdout

        before, mark = set(stored_paths(here, crawl_id)), len(server.hits)
        assert before, "pages were stored before the loss"
        resumed = run_cli(["crawl", "--crawl-id", crawl_id, "--no-worker", "--quiet"], local.to_env(), timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        assert f"crawl {crawl_id} finished" in resumed.stdout
        again = [hit.path for hit in server.hits[mark:]]
        assert not before & set(again), f"stored pages fetched again: {sorted(before & set(again))}"
        assert again.count("/robots.txt") <= 1
        assert sorted(stored_paths(here, crawl_id)) == sorted(f"/p/{i}" for i in range(300)), "each page once"
        stats = here.state.stats(crawl_id)
        assert stats["stored"] == 300 and stats["pending"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
        print(f"lost state: {len(before)} pages stored before, {len(again)} requests after "
              f"({again.count('/robots.txt')} robots.txt)")
    finally:
        if proc.poll() is None:
            proc.kill()
        worker.kill()
        server.stop()
        here.close()
        own.stop()
