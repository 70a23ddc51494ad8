"""Failover: worker processes killed with SIGKILL mid-crawl, and how soon their requests are back.

    python bench/failover.py                       # 100 lab hosts x 40 pages, 3 kills, polite defaults
    python bench/failover.py --hosts 50 --kills 3 --json failover.json

Two ``celery -A crawltasks worker`` processes (solo pool) share a crawl of the broad-crawl lab
(bench/labsite.py, served by bench/labserve.py) on a private redis-server and SecantusDB. At random
moments one of them is killed with SIGKILL and started again. For each kill the script reports how
long the killed worker's claims stayed in the frontier (its heartbeat stops; the reclaimers of the
others put its requests back), measured from the kill to the moment no claim names it any more.
At the end: every page stored exactly once (documents, distinct URLs, and requests in the server's
log). Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import labsite, serverlog  # noqa: E402
from bench.labserve import LabServer  # noqa: E402
from bench.procs import PrivateMongo, PrivateRedis  # noqa: E402
from crawltasks import runtime  # noqa: E402
from crawltasks.backends.redis.keys import Keys  # noqa: E402
from crawltasks.crawl import start_crawl  # noqa: E402
from crawltasks.settings import Settings  # noqa: E402
from crawltasks.worker.app import use_broker  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUEUES = "crawl.fetch.high,crawl.fetch.default,crawl.fetch.low,crawl.store,crawl.parse"


def start_worker(settings: Settings, name: str, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")}
    env.update(settings.to_env(), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "celery", "-A", "crawltasks", "worker", "-Q", QUEUES, "-P", "solo",
           "-n", f"{name}@%h", "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def claims_of(rt: runtime.Runtime, crawl_id: str, pid: int) -> int:
    """Claims of the crawl owned by the worker process ``pid``."""
    marker = f":{pid}:"
    return sum(marker in raw.decode() for raw in rt.state.r.hvals(Keys.claims(crawl_id)))


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    spec = labsite.LabSpec(hosts=args.hosts, pages=args.pages_per_host,
                           port=labsite.choose_port(labsite.LabSpec(hosts=args.hosts).addresses))
    lab = labsite.generate(spec, work / "lab")
    rnd = random.Random(args.seed)
    with PrivateRedis(work / "redis") as redis_server, PrivateMongo(work / "mongo") as mongo, \
            LabServer(lab, spec, args.latency, work / "server") as server:
        settings = Settings(broker_url=redis_server.url, redis_url=redis_server.url, mongo_url=mongo.url,
                            mongo_db="failover")
        use_broker(settings.broker_url)
        rt = runtime.configure(settings)
        rt.storage.ensure_indexes()
        workers = [start_worker(settings, f"w{i}", work / f"w{i}.log") for i in range(2)]
        crawl = start_crawl(spec.seeds(), crawl_id="failover")
        t0, kills = time.monotonic(), []
        try:
            while len(kills) < args.kills and not crawl.finished:
                time.sleep(rnd.uniform(3.0, 8.0))
                slot = rnd.randrange(2)
                victim = workers[slot]
                held = claims_of(rt, crawl.id, victim.pid)
                os.killpg(victim.pid, signal.SIGKILL)
                victim.wait()
                killed_at = time.monotonic()
                workers[slot] = start_worker(settings, f"w{slot}-{len(kills)}", work / f"w{slot}.log")
                while claims_of(rt, crawl.id, victim.pid) and time.monotonic() - killed_at < 120:
                    time.sleep(0.1)
                kills.append({"at_s": round(killed_at - t0, 1), "claims_held": held,
                              "back_in_s": round(time.monotonic() - killed_at, 1)})
                print(f"kill {len(kills)}: {kills[-1]}", flush=True)
            finished = crawl.wait(timeout=600)
        finally:
            for w in workers:
                if w.poll() is None:
                    os.killpg(w.pid, signal.SIGKILL)
                    w.wait()
        stats, pages = crawl.stats(), crawl.pages()
    hits = [r for r in serverlog.read_log(server.access_log) if not r.uri.endswith("/robots.txt")]  # flushed now
    urls = [p["url"] for p in pages]
    return {"hosts": args.hosts, "pages_per_host": args.pages_per_host, "latency": args.latency,
            "finished": finished, "seconds": round(stats.get("elapsed", 0.0), 1), "kills": kills,
            "stored": stats["stored"], "documents": len(pages), "distinct_urls": len(set(urls)),
            "page_requests_at_server": len(hits), "reclaimed": stats["reclaimed"],
            "expected_pages": args.hosts * args.pages_per_host}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/failover.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--pages-per-host", type=int, default=40)
    p.add_argument("--latency", type=float, default=0.1)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ct-failover-") as tmp:
        out = run(args, Path(tmp))
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
