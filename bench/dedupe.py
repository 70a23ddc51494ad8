"""Dedupe and the frontier at scale: memory per fingerprint and checks per second, exact seen-set vs
Bloom filter; and the memory of a request waiting in the per-host frontier.

    python bench/dedupe.py                       # 1M and 10M fingerprints, Bloom at 1 %, 1M queued requests
    python bench/dedupe.py --sizes 1000000,3000000 --error-rate 0.001 --json dedupe.json
    python bench/dedupe.py --sizes 1000000 --modes queue

Runs against a private redis-server it starts on a free port (``--save "" --appendonly no``) and
shuts down after; never the shared one. Every mode goes through crawltasks' own code: the exact mode is
``RedisFrontier.add`` (a Lua SADD per 40-char hex SHA-1 into a SET, with its counters; the requests it
queues are dropped before memory is read) and the Bloom mode is
``crawltasks.backends.redis.bloom.BloomFilter.check_and_add`` (k SETBITs per fingerprint), so the figures include the
counters and the script call, as a crawl pays them. The queue mode fills the frontier with requests
of realistic shape (1,000 hosts, ~70-character URLs, each with its referer) and reports the bytes of
the host queues per waiting request, and of everything the frontier keeps (seen-set included).

Memory is the growth of Redis' ``used_memory`` (and ``MEMORY USAGE`` of the key) after filling.
Checks/s is measured after filling, on fingerprints half new and half seen, at two batch sizes: 20
(one parsed page's links) and 1000 (bulk).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.procs import PrivateRedis  # noqa: E402
from crawltasks.backends.redis.bloom import BloomFilter  # noqa: E402
from crawltasks.backends.redis.frontier import RedisFrontier  # noqa: E402
from crawltasks.backends.redis.keys import Keys  # noqa: E402
from crawltasks.models import Request  # noqa: E402
from crawltasks.urls import fingerprint  # noqa: E402

FILL_BATCH = 2000


def fingerprints(start: int, count: int, salt: str = "") -> list[str]:
    """Deterministic 40-char hex SHA-1 fingerprints, as crawltasks makes them."""
    return [hashlib.sha1(f"GET http://bench.test/{salt}{i}".encode()).hexdigest() for i in range(start, start + count)]


def measure(mode: str, size: int, error_rate: float, probe: int = 100_000) -> dict[str, Any]:
    """Fill one fresh private Redis with ``size`` fingerprints in ``mode``; return memory and speed."""
    with tempfile.TemporaryDirectory(prefix="ct-dedupe-") as tmp, PrivateRedis(Path(tmp)) as server:
        r = server.client()
        crawl = "dedupe"
        frontier = RedisFrontier(r)
        bloom = BloomFilter(r, f"ct:{{{crawl}}}:bloom", capacity=size, error_rate=error_rate)
        stats_key = Keys.stats(crawl)

        def check(fps: list[str]) -> list[bool]:
            if mode == "exact":
                reqs = [Request(url="http://bench.test/", fp=fp, ticket=fp) for fp in fps]
                flags = [bool(v) for v in frontier.add(crawl, reqs)]
                r.delete(Keys.queue_prefix(crawl) + "bench.test:80:d")  # the seen-set alone is measured
                return flags
            return bloom.check_and_add(fps, stats_key=stats_key)

        check([fingerprints(0, 1, "warm")[0]])  # loads the script, creates the bitmap
        r.delete(Keys.seen(crawl), bloom.key, bloom.params_key)  # memory is then counted from empty
        base = r.info("memory")["used_memory"]
        t0 = time.perf_counter()
        gen = 0.0
        taken_as_seen = 0
        for start in range(0, size, 100_000):
            g0 = time.perf_counter()
            chunk = fingerprints(start, min(100_000, size - start))
            gen += time.perf_counter() - g0
            for i in range(0, len(chunk), FILL_BATCH):
                taken_as_seen += check(chunk[i:i + FILL_BATCH]).count(False)
        fill_s = time.perf_counter() - t0 - gen
        used = r.info("memory")["used_memory"] - base
        key = Keys.seen(crawl) if mode == "exact" else bloom.key
        key_bytes = int(r.memory_usage(key, samples=0) or 0)
        out: dict[str, Any] = {
            "mode": mode, "fingerprints": size, "error_rate": error_rate if mode == "bloom" else 0.0,
            "used_memory_bytes": used, "key_bytes": key_bytes,
            "bytes_per_fp": round(used / size, 2), "key_bytes_per_fp": round(key_bytes / size, 2),
            "fill_seconds": round(fill_s, 1), "fill_per_s": round(size / fill_s),
            "new_taken_as_seen_while_filling": taken_as_seen,
        }
        if mode == "bloom":
            out["bits"], out["hashes"] = bloom.params.bits, bloom.params.hashes
        if mode == "bloom":  # at capacity, before the checks below add more
            probes = fingerprints(0, probe, salt="probe/")
            hits = sum(sum(bloom.contains(probes[i:i + 5000])) for i in range(0, probe, 5000))
            out["measured_false_positive_rate"] = round(hits / probe, 5)
            out["expected_false_positive_rate"] = round(bloom.params.expected_error(size), 5)
        # Checks/s after filling: half seen, half new, at two batch sizes.
        seen = fingerprints(0, probe // 2)
        new = fingerprints(0, probe // 2, salt="new/")
        mixed = [x for pair in zip(seen, new, strict=True) for x in pair]
        for batch in (20, 1000):
            n = min(len(mixed), 20_000 if batch == 20 else len(mixed))
            part = mixed[:n] if batch == 20 else mixed
            t0 = time.perf_counter()
            for i in range(0, len(part), batch):
                check(part[i:i + batch])
            out[f"checks_per_s_batch{batch}"] = round(len(part) / (time.perf_counter() - t0))
            mixed = fingerprints(0, probe // 2, salt=f"again{batch}/") + seen  # fresh new ones for the next round
        r.close()
        return out


def queued_request(i: int, hosts: int = 1000) -> Request:
    """A link as a broad crawl finds it: ~70 characters, on one of ``hosts`` sites, with its referer."""
    host, section = i % hosts, (i // hosts) % 50
    url = f"https://www.shop-{host}.example.com/catalog/section-{section}/item-{i}.html"
    fp = fingerprint(url)
    return Request(url=url, depth=3, fp=fp, ticket=fp,
                   referer=f"https://www.shop-{host}.example.com/catalog/section-{section}/index.html")


def measure_queue(size: int) -> dict[str, Any]:
    """Fill the frontier with ``size`` waiting requests; bytes per request, queues alone and in all."""
    with tempfile.TemporaryDirectory(prefix="ct-queue-") as tmp, PrivateRedis(Path(tmp)) as server:
        r, crawl = server.client(), "queue"
        frontier = RedisFrontier(r)
        base = r.info("memory")["used_memory"]
        t0 = time.perf_counter()
        for start in range(0, size, FILL_BATCH):
            frontier.add(crawl, [queued_request(i) for i in range(start, min(size, start + FILL_BATCH))])
        fill_s = time.perf_counter() - t0
        used = r.info("memory")["used_memory"] - base
        queue_bytes = sum(int(r.memory_usage(k, samples=0) or 0)
                          for k in r.scan_iter(match=Keys.queue_prefix(crawl) + "*", count=1000))
        queue_bytes += int(r.memory_usage(Keys.ready(crawl), samples=0) or 0)
        seen_bytes = int(r.memory_usage(Keys.seen(crawl), samples=0) or 0)
        r.close()
        return {"mode": "queue", "requests": size, "queued": frontier_sizes(server, crawl),
                "bytes_per_request_queues": round(queue_bytes / size, 1),
                "bytes_per_request_seen": round(seen_bytes / size, 1),
                "bytes_per_request_all": round(used / size, 1), "fill_per_s": round(size / fill_s)}


def frontier_sizes(server: PrivateRedis, crawl: str) -> int:
    client = server.client()
    try:
        return RedisFrontier(client).sizes(crawl).queued
    finally:
        client.close()


def format_queue(rows: list[dict[str, Any]]) -> str:
    head = f"{'queued requests':>15} {'B/request (queues)':>18} {'B/request (seen-set)':>20} {'B/request (all)':>15}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['requests']:>15,} {r['bytes_per_request_queues']:>18.1f} "
                     f"{r['bytes_per_request_seen']:>20.1f} {r['bytes_per_request_all']:>15.1f}")
    return "\n".join(lines)


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'mode':<7} {'FP rate':>8} {'fingerprints':>12} {'B/fp (used_memory)':>18} {'B/fp (key)':>10} "
            f"{'fill/s':>9} {'checks/s @20':>12} {'checks/s @1000':>14} {'measured FP':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        fp_rate = f"{r['error_rate']:.3%}" if r["mode"] == "bloom" else "exact"
        measured = f"{r['measured_false_positive_rate']:.3%}" if "measured_false_positive_rate" in r else "0"
        lines.append(f"{r['mode']:<7} {fp_rate:>8} {r['fingerprints']:>12,} {r['bytes_per_fp']:>18.2f} "
                     f"{r['key_bytes_per_fp']:>10.2f} {r['fill_per_s']:>9,} {r['checks_per_s_batch20']:>12,} "
                     f"{r['checks_per_s_batch1000']:>14,} {measured:>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/dedupe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000,10000000", help="comma-separated fingerprint counts")
    p.add_argument("--error-rate", type=float, default=0.01, help="Bloom false-positive rate (default 0.01)")
    p.add_argument("--modes", default="exact,bloom,queue")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    rows, queues = [], []
    modes = args.modes.split(",")
    for size in (int(s) for s in args.sizes.split(",")):
        for mode in modes:
            if mode == "queue" and size > 1_000_000:
                continue  # the frontier's figure is asked for at 1M waiting requests
            print(f"{mode} {size:,} ...", end="", flush=True)
            t0 = time.monotonic()
            (queues if mode == "queue" else rows).append(
                measure_queue(size) if mode == "queue" else measure(mode, size, args.error_rate))
            print(f" {time.monotonic() - t0:.0f}s", flush=True)
    print()
    if rows:
        print(format_table(rows))
    if queues:
        print("\nthe per-host frontier: memory of a waiting request")
        print(format_queue(queues))
    rows += queues
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
