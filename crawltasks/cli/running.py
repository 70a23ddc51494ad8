"""``crawl`` and ``retry-failed``: start the services and the local workers, run the crawl to its end
(riding out a Redis blip, saying how to continue after Ctrl-C or SIGTERM), summarize and export."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..local.services import quiet_private_broker
from ..settings import ENV_BROKER, ENV_REDIS, Settings
from .commands import existing_crawl, services
from .parser import UsageError

if TYPE_CHECKING:
    from ..local.workers import ChildWorkers

SUMMARY_FIELDS = ("scheduled", "stored", "failed", "skipped", "duplicates", "filtered", "retried", "pending")


def crawl_options(args: argparse.Namespace) -> dict[str, Any]:
    from .options import crawl_options as from_args

    return from_args(args)


def summary(stats: dict[str, Any]) -> str:
    rate = stats["stored"] / stats["elapsed"] if stats.get("elapsed") else 0.0
    parts = "  ".join(f"{k} {stats[k]}" for k in SUMMARY_FIELDS)
    return f"crawl {stats['crawl_id']} {stats['state']} in {stats.get('elapsed', 0):.1f}s ({rate:.1f} pages/s): {parts}"


def cmd_crawl(args: argparse.Namespace) -> int:
    from ..storage.feeds import check_output
    from ..urls import check_seeds
    from .options import locate, read_seeds

    args.urls = [*args.urls, *read_seeds(args.seeds_file)]
    if not args.urls and not args.spider and not args.crawl_id:
        raise UsageError("give at least one URL, --spider NAME with start_urls, or --crawl-id of a crawl to continue")
    check_worker_flags(args)
    try:
        check_seeds(args.urls)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = crawl_options(args)  # every mistake is found before a service starts
    check_output(args.output)
    check_output(args.items, "--items")
    spider = locate(args.spider)

    def begin():
        from ..crawl import start_crawl

        try:
            return start_crawl(args.urls or None, spider=spider, crawl_id=args.crawl_id, **options)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    return run_to_completion(args, begin)


def cmd_retry_failed(args: argparse.Namespace) -> int:
    check_worker_flags(args)

    def begin():
        crawl = existing_crawl(args.crawl_id)
        out = sys.stderr if args.output == "-" else sys.stdout
        print(f"sending {crawl.retry_failed(args.reason)} failed request(s) again", file=out)
        return crawl

    return run_to_completion(args, begin)


def check_worker_flags(args: argparse.Namespace) -> None:
    if args.detach and not args.no_worker:
        raise UsageError("--detach goes with --no-worker")
    if args.no_worker and not os.environ.get(ENV_BROKER):
        raise UsageError(f"--no-worker needs external workers: set {ENV_BROKER} (and the Redis/Mongo URLs)")


def run_to_completion(args: argparse.Namespace, begin) -> int:
    """Start the services and (unless --no-worker) the local workers, run begin(), wait, summarize, export."""
    with services(args, wait=False) as (settings, embedded):
        from ..worker.app import app, use_broker

        if getattr(args, "fetch_concurrency", None):
            settings.fetch_concurrency = args.fetch_concurrency

        use_broker(settings.broker_url)
        if embedded:
            quiet_private_broker(app)
        children = stopping = crawl = dashboard = None
        try:
            if embedded:
                note_abandoned(args)
            if not args.no_worker:
                children = start_local_workers(args, app, settings, bool(embedded))
            if embedded:  # it booted while this process imported Celery and started the workers
                embedded.wait_ready()
            crawl = begin()
            if args.detach:
                print(crawl.id)
                return 0
            if getattr(args, "web", False):  # crawl --web: its page, served by this command
                from ..web.server import for_crawl

                dashboard = for_crawl(crawl.rt, crawl.id, args.web_port)
            from ..local.workers import WorkersGone
            from ..monitor.progress import CrawlProgress

            try:
                with CrawlProgress(quiet=args.quiet) as progress:
                    wait_through_outages(crawl, watching(progress, children), settings)
            except (KeyboardInterrupt, WorkersGone):
                interrupted(args, crawl, bool(embedded))
                raise
            from ..monitor.notify import settle

            settle(crawl.rt, crawl.id)  # its finish webhook is out before the workers that send it stop
            # Finished: the workers wind down while the results are written. A private broker holds
            # nothing more of this crawl, so its worker processes can go at once (tasks of another,
            # interrupted crawl in the same data directory come back later: acks are late, requests leased).
            if children is not None:
                children.check()  # a death reported after the last look
            stopping = threading.Thread(target=stop_workers, args=(children, bool(embedded)), name="stop-workers")
            stopping.start()
            from ..monitor.summary import finish

            out = sys.stderr if args.output == "-" else sys.stdout  # stdout carries the feed then
            print(summary(crawl.stats()), file=out)
            finish(crawl, args, out)
        finally:
            if dashboard is not None:
                dashboard.stop()
            if stopping is None:  # interrupted, or failed to start: a warm stop, nothing is dropped
                stop_workers(children)
            else:
                stopping.join()
    return 0


def wait_through_outages(crawl, progress, settings: Settings) -> None:
    """Wait for the crawl; while Redis does not answer, say so once and keep trying, for up to
    ``outage_limit()`` seconds (the workers ride it out by themselves)."""
    import redis

    from ..monitor.health import Problem, ServiceDown, outage_limit
    from ..urls import redact

    down_since = None
    while True:
        try:
            crawl.wait(progress=progress, poll=0.25)
            return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
            now = time.monotonic()
            if down_since is None:
                down_since = now
                print(f"\nstalled: Redis at {redact(settings.redis_url)} unreachable since "
                      f"{time.strftime('%H:%M:%S')} ({exc}); waiting up to {outage_limit():.0f} s", file=sys.stderr)
            elif now - down_since > outage_limit():
                raise ServiceDown(Problem("Redis", redact(settings.redis_url), str(exc), ENV_REDIS)) from None
            time.sleep(1.0)


def resume_command(args: argparse.Namespace, crawl_id: str) -> str:
    data = f" --data-dir {shlex.quote(args.data_dir)}" if getattr(args, "data_dir", None) else ""
    return f"crawltasks{data} crawl --crawl-id {shlex.quote(crawl_id)}"


def interrupted(args: argparse.Namespace, crawl, embedded: bool) -> None:
    """Ctrl-C or SIGTERM while a crawl runs: say how to go on. With private services nobody else can
    go on with it, so it waits (interrupted) instead of running behind the next crawl of this data."""
    if embedded or not args.no_worker:
        if embedded:
            crawl.interrupt()
        print(f"\ncrawl {crawl.id} interrupted; continue it with: {resume_command(args, crawl.id)}", file=sys.stderr)
    else:
        print(f"\ncrawl {crawl.id} goes on in the fleet; watch it with: crawltasks stats {crawl.id} --watch",
              file=sys.stderr)


def note_abandoned(args: argparse.Namespace) -> None:
    """Crawls of this data directory still marked running were left by a command that died (this
    command holds the directory's lock, so no other one runs): they wait, interrupted, until they
    are continued by their id, instead of taking this crawl's workers."""
    from ..crawl import Crawl
    from ..runtime import current

    rt = current()
    rt.fleet().forget_all()
    for crawl_id in rt.state.active_crawls():
        if Crawl(crawl_id, rt).interrupt():
            print(f"crawl {crawl_id} was interrupted (its command died); continue it with: "
                  f"{resume_command(args, crawl_id)}", file=sys.stderr)


def start_local_workers(args: argparse.Namespace, app: Any, settings: Settings, embedded: bool) -> ChildWorkers:
    """``--workers N`` worker processes beside this command, forked (while this process has no
    thread or connection to copy) through a zygote that replaces one that dies. The command runs no
    task itself: a page that kills its process kills a worker, and the crawl goes on."""
    from ..local.embedded import data_dir
    from ..local.workers import ChildWorkers

    log_dir = data_dir(args.data_dir) if embedded else Path(tempfile.gettempdir())
    return ChildWorkers(app, settings, args.workers, log_dir, concurrency=args.concurrency or 1,
                        loglevel="INFO" if args.verbose else "WARNING")


def watching(progress: Callable[[dict[str, Any]], None],
             children: ChildWorkers | None) -> Callable[[dict[str, Any]], None]:
    """The progress callback, which also says when a local worker died (and was restarted), and
    stops the wait when none is left."""
    if children is None:
        return progress

    def shown(stats: dict[str, Any]) -> None:
        progress(stats)
        children.check()

    return shown


def stop_workers(children: ChildWorkers | None, finished: bool = False) -> None:
    """Stop the local workers (a warm stop; killed at once when ``finished``) and wait for them."""
    if children is not None:
        children.signal_stop(kill=finished)
        children.wait()
