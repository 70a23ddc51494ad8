"""State does not pile up: Redis memory over 100 small crawls run one after another, retention off and on.

    python bench/retention.py                                 # 100 crawls of a 30-page site, through the pipeline
    python bench/retention.py --crawls 1000 --driver api      # the Redis API alone, as the pipeline drives it
    python bench/retention.py --pages 100 --json retention.json

Each mode runs in a child process of its own, against a private redis-server (free port, nothing
persisted; never the shared 6379). ``--driver pipeline`` (default) also starts SecantusDB, serves a
generated site with nginx (or the Python fallback) and runs a real Celery worker in the process
(``InProcessWorker``): every crawl is ``start_crawl`` + ``wait``, with politeness lifted for the local
site. ``--driver api`` schedules, takes, fetches and finishes each crawl's requests through
``RedisFrontier`` and ``RedisState`` (no broker, no fetching), so thousands of crawls take seconds.

Retention off is ``retention=0`` (keep everything, as before retention existed); on is
``--retention`` seconds (1). After every ``--every`` crawls the "on" run waits until the retention has
passed and walks the keyspace (an expired key is dropped when touched), then both read ``used_memory``
and the number of keys. Meta and stats stay ten times the retention, so the "on" figure holds the
summaries of the crawls of the last ten seconds. Nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench import site as sitegen  # noqa: E402
from bench.procs import PrivateMongo, PrivateRedis  # noqa: E402
from bench.serve import StaticServer  # noqa: E402
from crawltasks.backends.redis.frontier import RedisFrontier  # noqa: E402
from crawltasks.backends.redis.registry import RedisState  # noqa: E402
from crawltasks.frontier.queues import HostPolicy  # noqa: E402
from crawltasks.models import Request  # noqa: E402
from crawltasks.urls import fingerprint  # noqa: E402

LOCAL = dict(host_delay=0.0, host_concurrency=32, batch_size=16, obey_robots=False)  # our own site only


def memory(r: redis.Redis) -> dict[str, int]:
    return {"used_memory": int(r.info("memory")["used_memory"]), "keys": int(r.dbsize())}


def settle(r: redis.Redis, retention: float) -> None:
    """Let the retention pass, then touch every key so Redis drops those that expired."""
    if retention > 0:
        time.sleep(retention + 0.2)
        for _ in r.scan_iter(count=1000):
            pass


def series(r: redis.Redis, crawls: int, every: int, retention: float, one: Callable[[int], None]) -> list[dict]:
    """Run ``one(i)`` for each crawl; a reading of Redis after every ``every`` crawls."""
    out = [{"crawls": 0, **memory(r)}]
    t0 = time.perf_counter()
    for i in range(crawls):
        one(i)
        if (i + 1) % every == 0:
            settle(r, retention)
            out.append({"crawls": i + 1, "seconds": round(time.perf_counter() - t0, 1), **memory(r)})
    return out


def api_crawl(state: RedisState, frontier: RedisFrontier, crawl_id: str, pages: int, retention: float) -> None:
    """One crawl as the pipeline drives Redis: schedule the pages, take them, fetched, finished."""
    state.create_crawl(crawl_id, {"retention": retention}, ["http://bench.test/"])
    urls = [f"http://bench.test/{crawl_id}/page/{i}.html" for i in range(pages)]
    frontier.add(crawl_id, [Request(url=u, fp=fingerprint(u)) for u in urls])
    policy = HostPolicy(concurrency=32, delay=0.0)
    while taken := frontier.take(crawl_id, 64, policy).requests:
        frontier.fetched(crawl_id, [r.lease for r in taken])
        state.finish(crawl_id, [(r.ticket, "stored", r.lease) for r in taken])
    assert state.is_finished(crawl_id), crawl_id


def run_api(args: argparse.Namespace, retention: float, work: Path) -> list[dict]:
    with PrivateRedis(work / "redis") as server:
        r = server.client()
        state, frontier = RedisState(r), RedisFrontier(r)
        return series(r, args.crawls, args.every, retention,
                      lambda i: api_crawl(state, frontier, f"ret-{i:04d}", args.pages, retention))


def run_pipeline(args: argparse.Namespace, retention: float, work: Path) -> list[dict]:
    from crawltasks import runtime, start_crawl
    from crawltasks.local.workers import InProcessWorker
    from crawltasks.settings import Settings
    from crawltasks.worker.app import app, use_broker

    site = sitegen.generate(sitegen.SiteSpec(pages=args.pages, links=8, page_kb=4.0), work / "site")
    with (PrivateRedis(work / "redis") as server, PrivateMongo(work / "mongo") as mongo,
          StaticServer(site, work / "www") as www):
        settings = Settings(broker_url=server.url, redis_url=server.url, mongo_url=mongo.url, mongo_db="retention")
        use_broker(settings.broker_url)
        rt = runtime.configure(settings)
        worker = InProcessWorker(app, concurrency=4, loglevel="ERROR")
        worker.start()
        seed = www.base + sitegen.seed_path()

        def one(i: int) -> None:
            crawl = start_crawl(seed, crawl_id=f"ret-{i:04d}", rt=rt, retention=retention, **LOCAL)
            if not crawl.wait(timeout=300):
                raise RuntimeError(f"crawl {crawl.id} did not finish: {crawl.stats()}")

        try:
            return series(server.client(), args.crawls, args.every, retention, one)
        finally:
            worker.stop()


def child(args: argparse.Namespace) -> int:
    """One mode, in this process: prints its series as JSON."""
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("crawltasks").setLevel(logging.ERROR)
    run = run_api if args.driver == "api" else run_pipeline
    with tempfile.TemporaryDirectory(prefix="ct-retention-") as tmp:
        print(json.dumps(run(args, args.child, Path(tmp))))
    return 0


def run_mode(args: argparse.Namespace, retention: float) -> list[dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(retention), "--driver", args.driver,
           "--crawls", str(args.crawls), "--every", str(args.every), "--pages", str(args.pages)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"retention={retention} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(off: list[dict], on: list[dict], retention: float) -> str:
    lines = [f"{'crawls':>6}  {'off: used_memory':>16} {'keys':>6}  {f'on ({retention:g} s): used_memory':>24} "
             f"{'keys':>6}  {'saved':>9}"]
    for a, b in zip(off, on, strict=True):
        lines.append(f"{a['crawls']:>6}  {a['used_memory'] / 1024:>13.1f} KB {a['keys']:>6}  "
                     f"{b['used_memory'] / 1024:>21.1f} KB {b['keys']:>6}  "
                     f"{(a['used_memory'] - b['used_memory']) / 1024:>6.1f} KB")
    grow_off = (off[-1]["used_memory"] - off[0]["used_memory"]) / max(1, off[-1]["crawls"])
    grow_on = (on[-1]["used_memory"] - on[0]["used_memory"]) / max(1, on[-1]["crawls"])
    lines.append(f"growth per crawl: off {grow_off:,.0f} B, on {grow_on:,.0f} B")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawls", type=int, default=100)
    parser.add_argument("--every", type=int, default=10, help="read Redis after every N crawls")
    parser.add_argument("--pages", type=int, default=30, help="pages per crawl")
    parser.add_argument("--retention", type=float, default=1.0, help="seconds, for the run with retention on")
    parser.add_argument("--driver", choices=("pipeline", "api"), default="pipeline")
    parser.add_argument("--json", help="write both series here")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child(args)
    off, on = run_mode(args, 0.0), run_mode(args, args.retention)
    print(f"{args.crawls} crawls of {args.pages} pages, driver {args.driver}")
    print(table(off, on, args.retention))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "off": off, "on": on}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
