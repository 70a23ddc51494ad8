"""The benchmark in one command: generate a site, serve it, crawl it with crawltasks, Scrapy and wget.

    python bench/run.py                       # 20,000 pages of ~12 KB, ~20 links each, then the big site
    python bench/run.py --pages 2000 --site pages --skip wget --json out.json

Every crawler is a subprocess measured the same way (wall time from start to exit, peak RSS sampled
with psutil). Politeness is lifted explicitly for this local site: crawltasks gets
``--host-delay 0 --host-concurrency 256``; Scrapy gets CONCURRENT_REQUESTS=64 and no robots; wget has no
delay unless asked. Nothing here asserts a timing: the figures are printed (and written as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`: make `bench` and `crawltasks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import site as sitegen  # noqa: E402
from bench.procs import RedisCounter, RunResult, celery_messages, run_measured  # noqa: E402
from bench.serve import StaticServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("crawltasks", "scrapy", "wget")


@dataclass
class Row:
    """One crawler on one site."""

    tool: str
    pages: int
    seconds: float
    peak_worker_mb: float
    peak_tree_mb: float
    server_requests: int = 0
    returncode: int = 0
    crawl_seconds: float | None = None  # crawltasks: from its own counters (start of crawl to finished)
    redis_commands: dict[str, int] = field(default_factory=dict)
    celery_messages: int | None = None
    memory_by_process: dict[str, float] = field(default_factory=dict)
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # CPU seconds summed over processes
    note: str = ""

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pages_per_s"] = round(self.pages_per_s, 1)
        d["seconds"] = round(self.seconds, 2)
        d["peak_worker_mb"] = round(self.peak_worker_mb, 1)
        d["peak_tree_mb"] = round(self.peak_tree_mb, 1)
        if self.pages and self.redis_commands:
            d["redis_commands_per_page"] = round(sum(self.redis_commands.values()) / self.pages, 2)
        if self.pages and self.celery_messages is not None:
            d["celery_messages_per_page"] = round(self.celery_messages / self.pages, 3)
        return d


# --- the three crawlers ----------------------------------------------------------------------------


# Comparable to crawltasks' lifted politeness: many requests at once, no delay, no robots, no throttle.
SCRAPY_SETTINGS = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 64,
    "CONCURRENT_REQUESTS_PER_IP": 0,
    "DOWNLOAD_DELAY": 0,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "ROBOTSTXT_OBEY": False,
    "AUTOTHROTTLE_ENABLED": False,
    "COOKIES_ENABLED": False,
    "TELNETCONSOLE_ENABLED": False,
    "LOG_LEVEL": "WARNING",
    "RETRY_TIMES": 2,
    "DOWNLOAD_TIMEOUT": 30,
    "DEPTH_LIMIT": 0,
}

def clean_env() -> dict[str, str]:
    """The environment for crawlers: no broker configured (crawltasks runs embedded), no proxies."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CRAWLTASKS_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def crawltasks_flags(workers: int | None, concurrency: int, politeness_only: bool = False) -> list[str]:
    """Politeness lifted for this local site only; with ``politeness_only`` nothing else is given
    (crawltasks' defaults: a worker process per core, plus one), else the benchmark's tuned flags
    (``workers`` None: crawltasks' own number of worker processes)."""
    lifted = ["--host-delay", "0", "--host-concurrency", "256"]
    if politeness_only:
        return lifted
    chosen = ["--workers", str(workers)] if workers else []
    return [*lifted, *chosen, "--concurrency", str(concurrency), "--batch-size", "128", "--fetch-concurrency", "96"]


def run_crawltasks(url: str, work: Path, workers: int | None, concurrency: int, extra: list[str], timeout: float,
                   profile: Path | None = None, politeness_only: bool = False) -> Row:
    """``crawltasks crawl`` embedded (private Redis + SecantusDB + forked workers) in a fresh data dir."""
    data = work / "crawltasks-data"
    shutil.rmtree(data, ignore_errors=True)
    out = work / "crawltasks.jsonl"
    crawl_id = f"bench-{uuid.uuid4().hex[:8]}"
    env = clean_env()
    env["CRAWLTASKS_DATA_DIR"] = str(data)
    cmd = [sys.executable, "-m", "crawltasks.cli", "crawl", url, "--crawl-id", crawl_id,
           *crawltasks_flags(workers, concurrency, politeness_only), "--output", str(out), "--quiet", *extra]
    if profile is not None:
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--subprocesses", "-r", "50",
               "-f", "raw", "-o", str(profile), "--", *cmd]
    counter = RedisCounter(crawl_id, data_dir=data).start()
    res = run_measured(cmd, env=env, cwd=str(work), timeout=timeout)
    counter.stop()
    pages = _count_pages(out)
    row = _row("crawltasks", res, pages)
    if profile is not None:  # py-spy is the top process; the crawl is its child
        row.peak_worker_mb = res.peak_by_name.get("crawltasks.cli", row.peak_worker_mb)
    row.crawl_seconds = _crawl_seconds(res.stdout)
    row.redis_commands = counter.counts()
    row.celery_messages = celery_messages(row.redis_commands)
    if not counter.finished:
        row.note = "redis counts incomplete (crawl end not seen)"
    if res.returncode:
        row.note = f"exit {res.returncode}: {res.stderr.strip()[-300:]}"
    shutil.rmtree(data, ignore_errors=True)
    return row


def run_scrapy(url: str, work: Path, timeout: float) -> Row:
    """``scrapy runspider bench/scrapy_spider.py`` with politeness lifted the same way."""
    out = work / "scrapy.jsonl"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "scrapy_spider.py"),
           "-a", f"start_url={url}", "-O", f"{out}:jsonlines"]
    for key, value in SCRAPY_SETTINGS.items():
        cmd += ["-s", f"{key}={value}"]
    res = run_measured(cmd, env=clean_env(), cwd=str(work), timeout=timeout)
    # Distinct URLs: Scrapy's start request bypasses its dupe filter, so a link back to it is fetched again.
    return _row("scrapy", res, _count_urls(out))


def run_wget(url: str, work: Path, timeout: float) -> Row:
    """``wget -r -l inf --no-parent``: one connection, C parsing; files on disk are the pages."""
    target = work / "wget"
    shutil.rmtree(target, ignore_errors=True)
    cmd = ["wget", "-r", "-l", "inf", "--no-parent", "-nv", "-e", "robots=off", "-P", str(target), url]
    res = run_measured(cmd, env=clean_env(), cwd=str(work), timeout=timeout)
    pages = sum(1 for p in target.rglob("*.html") if p.is_file())
    row = _row("wget", res, pages)
    if res.returncode == 8:  # 8: the server answered some request with an error: count them, keep the row
        errors = res.stderr.count(" ERROR ")
        row.returncode, row.note = 0, f"{errors} server error response(s)"
    shutil.rmtree(target, ignore_errors=True)
    return row


def _row(tool: str, res: RunResult, pages: int) -> Row:
    note = "" if res.returncode == 0 else f"exit {res.returncode}: {res.stderr.strip()[-300:]}"
    return Row(tool=tool, pages=pages, seconds=res.seconds, peak_worker_mb=res.peak_main_mb,
               peak_tree_mb=res.peak_tree_mb, returncode=res.returncode, memory_by_process=res.peak_by_name,
               cpu_by_process=res.cpu_by_name,
               note=note)


def _count_pages(path: Path) -> int:
    """Stored pages with a 2xx status in crawltasks' JSON Lines output (items have no status)."""
    if not path.exists():
        return 0
    n = 0
    with path.open() as f:
        for line in f:
            status = json.loads(line).get("status")
            if isinstance(status, int) and 200 <= status < 300:
                n += 1
    return n


def _count_urls(path: Path) -> int:
    """Distinct ``url`` values in a JSON Lines file."""
    if not path.exists():
        return 0
    with path.open() as f:
        return len({json.loads(line)["url"] for line in f if line.strip()})


def _crawl_seconds(stdout: str) -> float | None:
    """The crawl's own elapsed time from its summary line ('... finished in 12.3s (...)')."""
    for line in stdout.splitlines():
        if line.startswith("crawl ") and " in " in line:
            try:
                return float(line.split(" in ", 1)[1].split("s", 1)[0])
            except ValueError:
                return None
    return None


# --- the table ------------------------------------------------------------------------------------

def format_table(title: str, rows: list[Row]) -> str:
    """One table: pages, seconds, pages/s, peak worker memory, and crawltasks/peer ratios."""
    ct = next((r for r in rows if r.tool == "crawltasks"), None)
    head = f"{'tool':<11} {'pages':>7} {'seconds':>8} {'pages/s':>8} {'peak MB':>8} {'tree MB':>8} " \
           f"{'srv reqs':>8} {'ct/peer pages/s':>15} {'ct/peer time':>12}"
    lines = [title, head, "-" * len(head)]
    for r in rows:
        speed = time_ratio = "-"
        if ct is not None and r is not ct and r.pages_per_s > 0 and ct.pages_per_s > 0:
            speed = f"{ct.pages_per_s / r.pages_per_s:.2f}x"
            time_ratio = f"{ct.seconds / r.seconds:.2f}"
        lines.append(f"{r.tool:<11} {r.pages:>7} {r.seconds:>8.1f} {r.pages_per_s:>8.1f} {r.peak_worker_mb:>8.0f} "
                     f"{r.peak_tree_mb:>8.0f} {r.server_requests:>8} {speed:>15} {time_ratio:>12}")
    for r in rows:
        if r.tool == "crawltasks" and r.pages:
            extra = []
            if r.crawl_seconds:
                extra.append(f"crawl alone {r.crawl_seconds:.1f}s = {r.pages / r.crawl_seconds:.1f} pages/s "
                             f"(rest is start-up of the embedded services and export)")
            if r.redis_commands:
                extra.append(f"Redis commands/page {sum(r.redis_commands.values()) / r.pages:.1f}")
            if r.celery_messages is not None:
                extra.append(f"Celery messages/page {r.celery_messages / r.pages:.3f}")
            if r.memory_by_process:
                extra.append("peak RSS by process: " + ", ".join(f"{k} {v:.0f} MB"
                                                                 for k, v in sorted(r.memory_by_process.items())))
            lines += [f"  crawltasks: {e}" for e in extra]
            if r.redis_commands:
                top = sorted(r.redis_commands.items(), key=lambda kv: -kv[1])[:10]
                lines.append("  crawltasks: top Redis commands/page: "
                             + ", ".join(f"{k} {v / r.pages:.2f}" for k, v in top))
        if r.pages and r.cpu_by_process:
            per_page = sorted(r.cpu_by_process.items(), key=lambda kv: -kv[1])
            lines.append(f"  {r.tool}: CPU ms/page {1000 * sum(r.cpu_by_process.values()) / r.pages:.2f} = "
                         + " + ".join(f"{k} {1000 * v / r.pages:.2f}" for k, v in per_page))
        if r.note:
            lines.append(f"  {r.tool}: {r.note}")
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=20_000, help="pages of the generated site (default 20000)")
    p.add_argument("--links", type=int, default=20, help="links per page (default 20)")
    p.add_argument("--page-kb", type=float, default=12.0, help="page size in KB (default 12)")
    p.add_argument("--big-pages", type=int, default=300, help="pages of the big documentation-like site")
    p.add_argument("--site", choices=("pages", "big", "both"), default="both", help="which site(s) to crawl")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip", default="", help="comma-separated tools to leave out: crawltasks,scrapy,wget")
    p.add_argument("--workers", type=int, default=None,
                   help="crawltasks --workers (worker processes beside the command; default: crawltasks' own, "
                        "one per core plus one)")
    p.add_argument("--concurrency", type=int, default=1,
                   help="crawltasks --concurrency (tasks at once in each worker process)")
    p.add_argument("--politeness-only", action="store_true",
                   help="crawltasks gets only --host-delay 0 --host-concurrency 256 (its defaults otherwise)")
    p.add_argument("--crawltasks-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `crawltasks crawl` (repeatable), e.g. --crawltasks-arg=--batch-size=32")
    p.add_argument("--server", choices=("nginx", "python"), default="nginx",
                   help="static server; python is the fallback used when nginx is not installed")
    p.add_argument("--workdir", help="where sites, logs and outputs go (default: a temp dir)")
    p.add_argument("--cache-dir", help="where generated sites are kept between runs "
                                        "(default: $TMPDIR/crawltasks-bench-sites)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per crawler run")
    p.add_argument("--profile", metavar="RAW", help="run crawltasks under py-spy; write collapsed stacks here")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    unknown = {s for s in args.skip.split(",") if s} - set(TOOLS)
    if unknown:
        p.error(f"unknown tool(s) in --skip: {', '.join(sorted(unknown))}")
    return args


def site_specs(args: argparse.Namespace) -> list[sitegen.SiteSpec]:
    specs = []
    if args.site in ("pages", "both"):
        specs.append(sitegen.SiteSpec(pages=args.pages, links=args.links, page_kb=args.page_kb, seed=args.seed))
    if args.site in ("big", "both"):
        specs.append(sitegen.SiteSpec.big(pages=args.big_pages, seed=args.seed))
    return specs


def describe(spec: sitegen.SiteSpec, info: dict[str, Any]) -> str:
    mb = info["bytes"] / 1e6
    if spec.shape == "big":
        return f"big site: {spec.pages} documentation-like pages of 100-300 KB, hundreds of links each ({mb:.0f} MB)"
    return f"site: {spec.pages} pages of ~{spec.page_kb:g} KB, ~{spec.links} links each ({mb:.0f} MB)"


def bench_site(spec: sitegen.SiteSpec, args: argparse.Namespace, work: Path, cache: Path) -> dict[str, Any]:
    """Generate, serve and crawl one site with every tool not skipped; returns its JSON-ready result."""
    skip = {s for s in args.skip.split(",") if s}
    t0 = time.monotonic()
    root = sitegen.generate(spec, cache)
    info = sitegen.manifest(root)
    print(f"{describe(spec, info)}; generated/reused in {time.monotonic() - t0:.1f}s at {root}", flush=True)
    site_work = work / spec.key
    site_work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    with StaticServer(root, site_work / "server", prefer=args.server) as server:
        url = server.base + sitegen.seed_path()
        for tool in TOOLS:
            if tool in skip:
                continue
            mark = server.log_mark()
            print(f"  {tool} ...", end="", flush=True)
            if tool == "crawltasks":
                profile = Path(args.profile).resolve() if args.profile else None
                if profile and len(args.site) and args.site == "both":
                    profile = profile.with_name(f"{profile.stem}-{spec.shape}{profile.suffix}")
                row = run_crawltasks(url, site_work, args.workers, args.concurrency, args.crawltasks_arg,
                                     args.timeout, profile, args.politeness_only)
            elif tool == "scrapy":
                row = run_scrapy(url, site_work, args.timeout)
            else:
                row = run_wget(url, site_work, args.timeout)
            row.server_requests = server.requests_since(mark)["requests"]
            print(f" {row.pages} pages in {row.seconds:.1f}s ({row.pages_per_s:.1f}/s)", flush=True)
            rows.append(row)
        kind = server.kind
    title = f"{describe(spec, info)}; server: {kind}"
    return {"spec": asdict(spec), "bytes": info["bytes"], "server": kind, "title": title, "rows": rows}


def machine() -> dict[str, Any]:
    def version(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "missing"

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "nginx": version(["nginx", "-v"]), "wget": version(["wget", "--version"])}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache = Path(args.cache_dir or Path(tempfile.gettempdir()) / "crawltasks-bench-sites")
    cache.mkdir(parents=True, exist_ok=True)
    own_work = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="crawltasks-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    results = []
    try:
        for spec in site_specs(args):
            results.append(bench_site(spec, args, work, cache))
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"crawltasks benchmark, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"crawltasks crawl URL {' '.join(crawltasks_flags(args.workers, args.concurrency, args.politeness_only))}")
    for res in results:
        print()
        print(format_table(res["title"], res["rows"]))
    if args.json:
        doc = {"date": started.isoformat(timespec="seconds"), "machine": machine(), "args": vars(args),
               "sites": [{**r, "rows": [row.to_dict() for row in r["rows"]]} for r in results]}
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"\nwrote {args.json}")
    failed = [r for res in results for r in res["rows"] if r.returncode]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
