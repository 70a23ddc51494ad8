"""Dedupe at scale: memory per fingerprint and checks per second, exact seen-set vs Bloom filter.

    python bench/dedupe.py                       # 1M and 10M fingerprints, Bloom at 1 %
    python bench/dedupe.py --sizes 1000000,3000000 --error-rate 0.001 --json dedupe.json

Runs against a private redis-server it starts on a free port (``--save "" --appendonly no``) and
shuts down after; never the shared one. Both modes go through crawltasks' own code: the exact mode is
``RedisState.schedule`` (a Lua SADD per 40-char hex SHA-1 into a SET, with its counters) and the
Bloom mode is ``crawltasks.bloom.BloomFilter.check_and_add`` (k SETBITs per fingerprint), so the
figures include the counters and the script call, as a crawl pays them.

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
from crawltasks.bloom import BloomFilter  # noqa: E402
from crawltasks.redisstate import Keys, RedisState  # noqa: E402

FILL_BATCH = 2000


def fingerprints(start: int, count: int, salt: str = "") -> list[str]:
    """Deterministic 40-char hex SHA-1 fingerprints, as crawltasks makes them."""
    return [hashlib.sha1(f"GET http://bench.test/{salt}{i}".encode()).hexdigest() for i in range(start, start + count)]


def measure(mode: str, size: int, error_rate: float, probe: int = 100_000) -> dict[str, Any]:
    """Fill one fresh private Redis with ``size`` fingerprints in ``mode``; return memory and speed."""
    with tempfile.TemporaryDirectory(prefix="ct-dedupe-") as tmp, PrivateRedis(Path(tmp)) as server:
        r = server.client()
        crawl = "dedupe"
        state = RedisState(r)
        bloom = BloomFilter(r, f"ct:{{{crawl}}}:bloom", capacity=size, error_rate=error_rate)
        stats_key = Keys.stats(crawl)

        def check(fps: list[str]) -> list[bool]:
            if mode == "exact":
                return state.schedule(crawl, fps, [False] * len(fps))
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
    p.add_argument("--modes", default="exact,bloom")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for mode in args.modes.split(","):
            print(f"{mode} {size:,} ...", end="", flush=True)
            t0 = time.monotonic()
            rows.append(measure(mode, size, args.error_rate))
            print(f" {time.monotonic() - t0:.0f}s", flush=True)
    print()
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
