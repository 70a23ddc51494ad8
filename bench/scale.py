"""Scaling out: the same crawl with 1, then 2 separate worker processes sharing one Redis and one Mongo.

    python bench/scale.py --pages 10000 --layouts 1,2,split

Starts a private redis-server (free port, nothing persisted) and SecantusDB, serves the generated site
with nginx (or the fallback), starts the worker processes of a layout and runs
``crawltasks crawl URL --no-worker`` against them. A layout is a number N (N ``celery -A crawltasks
worker -P POOL -c C`` processes on every queue) or ``split`` (two: one on the fetch queues, one on
parse and store). Reports pages/s of the crawl itself (from its
counters: started to finished), peak RSS per worker process, Redis commands per page (exact: the
statistics are reset before each crawl and include commands run inside Lua scripts), Celery
messages per page, and the CPU seconds the redis-server process spent per page, which gives the
pages/s one Redis core could carry: 1 / (Redis CPU seconds per page).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from bench import site as sitegen  # noqa: E402
from bench.procs import MB, PrivateMongo, PrivateRedis, celery_messages  # noqa: E402
from bench.run import ROOT, clean_env  # noqa: E402
from bench.serve import StaticServer  # noqa: E402
from crawltasks.local.embedded import stop_process  # noqa: E402

FETCH_QUEUES = "crawl.fetch.high,crawl.fetch.default,crawl.fetch.low,crawl.control"
PARSE_STORE_QUEUES = "crawl.parse,crawl.store"


def layout_queues(layout: str) -> list[str | None]:
    """The queues of each worker process of a layout (None: all of them)."""
    if layout == "split":
        return [FETCH_QUEUES, PARSE_STORE_QUEUES]
    return [None] * int(layout)


def start_workers(queues: list[str | None], pool: str, concurrency: int, env: dict[str, str],
                  logdir: Path) -> list[subprocess.Popen]:
    """One worker process per entry; returns once each has logged that it is ready."""
    procs, logs = [], []
    for i, qs in enumerate(queues):
        log = logdir / f"worker{i}.log"
        logs.append(log)
        cmd = [sys.executable, "-m", "celery", "-A", "crawltasks", "worker", "-P", pool, "-c", str(concurrency),
               "-n", f"bench{i}-{uuid.uuid4().hex[:6]}@%h", "--loglevel", "INFO", "--without-heartbeat",
               "--without-mingle", "--without-gossip", *(["-Q", qs] if qs else [])]
        procs.append(subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, process_group=0))
    deadline = time.monotonic() + 60
    while not all("ready." in log.read_text(errors="replace") for log in logs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            stop_workers(procs)
            raise RuntimeError(f"workers did not start; see {logdir}")
        time.sleep(0.2)
    return procs


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        stop_process(p, 20, signal_=None)


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of a worker and its pool processes (prefork children count)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += sum(p.cpu_times()[:2])
    return total


def one_run(layout: str, url: str, args: argparse.Namespace, base_env: dict[str, str], work: Path,
            redis_server: PrivateRedis) -> dict[str, Any]:
    """Crawl the site once with a layout's worker processes; every figure of one table row."""
    r = redis_server.client()
    r.flushall()
    env = dict(base_env)
    queues = layout_queues(layout)
    n = len(queues)
    procs = start_workers(queues, args.pool, args.concurrency, env, work)
    redis_proc = psutil.Process(redis_server.proc.pid)  # type: ignore[union-attr]
    workers = [psutil.Process(p.pid) for p in procs]
    crawl_id = f"scale{n}-{uuid.uuid4().hex[:6]}"
    r.config_resetstat()
    cpu0 = sum(redis_proc.cpu_times()[:2])
    wcpu0 = [tree_cpu(w) for w in workers]
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", url, "--no-worker", "--crawl-id", crawl_id,
           "--host-delay", "0", "--host-concurrency", "256", "--quiet", *args.crawltasks_arg]
    client = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks = [0] * n
    wcpu = list(wcpu0)
    while client.poll() is None:
        for i, w in enumerate(workers):
            with contextlib.suppress(psutil.Error):
                peaks[i] = max(peaks[i], w.memory_info().rss,
                               *(c.memory_info().rss for c in w.children(recursive=True)))
            wcpu[i] = tree_cpu(w)
        time.sleep(0.1)
    output = client.stdout.read() if client.stdout else ""
    stats = {k: v["calls"] for k, v in r.info("commandstats").items()}
    stats = {k.removeprefix("cmdstat_"): int(v) for k, v in stats.items()}
    stats.pop("info", None)
    redis_cpu = sum(redis_proc.cpu_times()[:2]) - cpu0
    worker_cpu = [round(c1 - c0, 1) for c1, c0 in zip(wcpu, wcpu0, strict=True)]
    meta = {k.decode(): v.decode() for k, v in r.hgetall(f"ct:{{{crawl_id}}}:meta").items()}
    counters = {k.decode(): int(v) for k, v in r.hgetall(f"ct:{{{crawl_id}}}:stats").items()}
    stop_workers(procs)
    pages = counters.get("stored", 0)
    elapsed = float(meta["finished_at"]) - float(meta["started_at"]) if "finished_at" in meta else float("nan")
    total = sum(stats.values())
    r.close()
    return {
        "layout": layout, "processes": n, "pool": args.pool, "concurrency": args.concurrency,
        "pages": pages, "crawl_seconds": round(elapsed, 2),
        "pages_per_s": round(pages / elapsed, 1) if pages else 0.0,
        "peak_rss_mb_per_process": [round(p / MB, 1) for p in peaks],
        "worker_cpu_seconds": worker_cpu,
        "redis_commands_per_page": round(total / pages, 2) if pages else 0.0,
        "evalsha_per_page": round(stats.get("evalsha", 0) / pages, 2) if pages else 0.0,
        "celery_messages_per_page": round(celery_messages(stats) / pages, 3) if pages else 0.0,
        "redis_cpu_ms_per_page": round(1000 * redis_cpu / pages, 3) if pages else 0.0,
        "one_redis_core_pages_per_s": round(pages / redis_cpu) if redis_cpu > 0 else None,
        "redis_commands": dict(sorted(stats.items(), key=lambda kv: -kv[1])),
        "exit": client.returncode, "output": output.strip()[-500:],
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'layout':>6} {'pages':>6} {'crawl s':>8} {'pages/s':>8} {'speed-up':>8} {'peak MB/proc':>14} "
            f"{'worker CPU s':>14} {'redis cmd/page':>14} {'celery msg/page':>15} {'redis ms/page':>13} "
            f"{'1 Redis core: pages/s':>21}")
    lines = [head, "-" * len(head)]
    base = rows[0]["pages_per_s"] if rows else 0
    for r in rows:
        peaks = "/".join(f"{p:.0f}" for p in r["peak_rss_mb_per_process"])
        cpu = "/".join(f"{c:.0f}" for c in r["worker_cpu_seconds"])
        speed = f"{r['pages_per_s'] / base:.2f}x" if base else "-"
        lines.append(f"{r['layout']:>6} {r['pages']:>6} {r['crawl_seconds']:>8.1f} {r['pages_per_s']:>8.1f} "
                     f"{speed:>8} {peaks:>14} {cpu:>14} {r['redis_commands_per_page']:>14.1f} "
                     f"{r['celery_messages_per_page']:>15.3f} {r['redis_cpu_ms_per_page']:>13.3f} "
                     f"{r['one_redis_core_pages_per_s'] or 0:>21,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/scale.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=10_000)
    p.add_argument("--links", type=int, default=20)
    p.add_argument("--page-kb", type=float, default=12.0)
    p.add_argument("--layouts", default="1,2,split",
                   help="comma-separated: N worker processes on all queues, or 'split' (fetch / parse+store)")
    p.add_argument("--pool", choices=("solo", "prefork", "threads"), default="solo",
                   help="worker pool (default solo: one task at a time per process, as --workers runs them)")
    p.add_argument("--concurrency", type=int, default=1, help="-c of each worker process")
    p.add_argument("--crawltasks-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--server", choices=("nginx", "python"), default="nginx")
    p.add_argument("--cache-dir")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    cache = Path(args.cache_dir or Path(tempfile.gettempdir()) / "crawltasks-bench-sites")
    spec = sitegen.SiteSpec(pages=args.pages, links=args.links, page_kb=args.page_kb)
    root = sitegen.generate(spec, cache)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ct-scale-") as tmp:
        work = Path(tmp)
        with PrivateRedis(work / "redis") as red, PrivateMongo(work / "mongo") as mongo, \
                StaticServer(root, work / "server", prefer=args.server) as server:
            env = clean_env()
            env.update(CRAWLTASKS_BROKER_URL=red.url, CRAWLTASKS_REDIS_URL=red.url, CRAWLTASKS_MONGO_URL=mongo.url,
                       CRAWLTASKS_MONGO_DB="bench")
            url = server.base + sitegen.seed_path()
            for layout in args.layouts.split(","):
                print(f"layout {layout} ...", end="", flush=True)
                row = one_run(layout, url, args, env, work, red)
                print(f" {row['pages']} pages, {row['pages_per_s']} pages/s", flush=True)
                rows.append(row)
    print()
    print(f"scaling: {spec.pages} pages of ~{spec.page_kb:g} KB, ~{spec.links} links; {os.cpu_count()} cores; "
          f"workers -P {args.pool} -c {args.concurrency}; one redis-server, SecantusDB, {server.kind}")
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
