"""The ``crawltasks`` command: crawl, stats, export, failures, list.

With ``CRAWLTASKS_BROKER_URL`` unset, everything runs embedded under a data directory; otherwise
the configured Redis, Mongo and broker are used and external workers can share the work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import __version__
from .cliopts import OptionError
from .feeds import FeedError
from .health import ServiceDown
from .settings import ENV_BROKER, ENV_REDIS, Settings

log = logging.getLogger("crawltasks")

SUMMARY_FIELDS = ("scheduled", "stored", "failed", "skipped", "duplicates", "filtered", "retried", "pending")


class UsageError(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(f"{message} (see '{self.prog} --help')")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {value}")
    return value


def build_parser() -> Parser:
    p = Parser(prog="crawltasks", description="A distributed web crawler on Celery.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    p.add_argument("--data-dir", help="embedded mode's data directory (default ~/.local/share/crawltasks)")
    p.add_argument("--version", action="version", version=f"crawltasks {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    c = sub.add_parser("crawl", help="crawl from seed URLs until done")
    c.add_argument("urls", nargs="*", metavar="URL")
    c.add_argument("--spider", help="a registered spider name, module:Class or a file (myspider.py[:Class]), "
                                    "found in the current directory too (default: the site spider)")
    c.add_argument("-s", "--set", action="append", metavar="NAME=VALUE",
                   help="any crawl option, JSON-typed (repeatable): -s max_pages=100 -s obey_robots=false")
    c.add_argument("-a", dest="spider_arg", action="append", metavar="NAME=VALUE",
                   help="a spider argument, passed to its __init__ on every worker (repeatable)")
    c.add_argument("--seeds-file", metavar="FILE", help="seed URLs, one a line ('-': standard input)")
    c.add_argument("--items", metavar="FILE", help="write the spider's items here (then --output has only pages)")
    c.add_argument("--stats-json", metavar="FILE", help="write the final summary as JSON")
    c.add_argument("--crawl-id", help="name the crawl (generated otherwise); an existing id continues it")
    c.add_argument("--max-depth", type=positive_int, help="seeds are depth 0; 0 fetches only the seeds")
    c.add_argument("--output", "-o", help="write stored pages (and items, with a type field) to FILE: .jsonl, "
                                          ".json or .csv by its extension; '-' is JSON Lines on stdout")
    c.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="local worker processes: 1 runs a worker inside this command; N > 1 adds N worker "
                        "processes beside it (default: one per core)")
    c.add_argument("--concurrency", type=positive_int,
                   help="tasks at once in the worker inside this command (default 8, or 1 beside --workers > 1)")
    c.add_argument("--host-concurrency", type=positive_int, help="requests at once per host (default 2)")
    c.add_argument("--host-delay", type=non_negative_float, help="seconds between requests per host (0.5)")
    c.add_argument("--max-retries", type=positive_int, help="retries of transient failures (default 3)")
    c.add_argument("--fetch-concurrency", "--fetch-threads", type=positive_int, dest="fetch_concurrency",
                   help="HTTP requests in flight at once per worker process (default 512)")
    c.add_argument("--batch-size", type=positive_int, help="requests per task message (default 16)")
    c.add_argument("--timeout", type=non_negative_float, help="seconds for one whole response (default 20)")
    c.add_argument("--allowed-domain", action="append", dest="allowed_domains",
                   help="follow links to this domain (repeatable; default: the seeds' hosts)")
    c.add_argument("--dedupe", choices=["set", "bloom"], help="exact set (default) or a Bloom filter for huge crawls")
    c.add_argument("--store-html", action="store_true", default=None, help="keep each page's HTML")
    c.add_argument("--store-text", action="store_true", default=None, help="keep each page's visible text")
    c.add_argument("--no-worker", action="store_true", help="only enqueue; external workers crawl")
    c.add_argument("--detach", action="store_true", help="with --no-worker: print the crawl id and return")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    c.add_argument("--web", action="store_true", help="serve the crawl dashboard on 127.0.0.1 while it runs")
    c.add_argument("--web-port", type=positive_int, default=8080, help="its port (default 8080, else any free one)")
    c.add_argument("--notify", metavar="URL", help="webhook: a JSON summary when the crawl finishes, an alert "
                                                   "when the failure rate over a minute reaches --notify-failure-rate")
    c.add_argument("--notify-failure-rate", type=float, metavar="RATE", help="share of failed requests (default 0.5)")

    s = sub.add_parser("stats", help="counters of a crawl; --watch for a live view")
    s.add_argument("crawl_id")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--watch", "-w", action="store_true",
                   help="live view (counters, pages/s, in flight, failures by reason, hosts, ETA) until it finishes")
    s.add_argument("--interval", type=non_negative_float, default=1.0, help="seconds between readings (--watch)")

    e = sub.add_parser("export", help="write a crawl's pages as JSON Lines")
    e.add_argument("crawl_id")
    e.add_argument("--output", "-o", required=True, help=".jsonl, .json or .csv by its extension; '-': stdout")
    e.add_argument("--items", metavar="FILE", help="the items here (then --output has only pages)")

    d = sub.add_parser("delete", help="remove a crawl: its Redis state and its stored documents")
    d.add_argument("crawl_id")
    d.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    t = sub.add_parser("fetch", help="run the spider on one page and print what it yields; stores nothing")
    t.add_argument("url")
    t.add_argument("--spider", help="as for crawl (default: the site spider)")
    t.add_argument("-a", dest="spider_arg", action="append", metavar="NAME=VALUE", help="a spider argument")
    t.add_argument("-s", "--set", action="append", metavar="NAME=VALUE", help="a crawl option (timeout, headers...)")

    for name, text in (("pause", "stop fetching on every worker; queued batches are parked"),
                       ("resume", "continue a paused crawl"),
                       ("cancel", "stop a crawl for good; it finishes as cancelled"),
                       ("close", "no more seeds: a feed crawl finishes once nothing is pending")):
        sub.add_parser(name, help=text).add_argument("crawl_id")

    r = sub.add_parser("retry-failed", help="send a crawl's failed requests through the pipeline again")
    r.add_argument("crawl_id")
    r.add_argument("--reason", help="only failures with this reason")
    for flag in ("--no-worker", "--detach", "--quiet"):
        r.add_argument(flag, action="store_true")
    r.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1)
    r.add_argument("--concurrency", type=positive_int)
    r.add_argument("--output", "-o", help="write the crawl's pages afterwards")
    r.add_argument("--items", metavar="FILE", help="write the items here (then --output has only pages)")
    r.add_argument("--stats-json", metavar="FILE", help="write the final summary as JSON")

    a = sub.add_parser("add", help="push seed URLs to a running crawl (a finished one runs again)")
    a.add_argument("crawl_id")
    a.add_argument("urls", nargs="+", metavar="URL")

    f = sub.add_parser("failures", help="list a crawl's failed URLs")
    f.add_argument("crawl_id")
    f.add_argument("--reason", help="only this reason, e.g. http_404 or timeout")

    ls = sub.add_parser("list", help="crawls known to Redis, with their state")
    ls.add_argument("--json", action="store_true", help="print JSON")

    w = sub.add_parser("web", help="the crawl dashboard and Prometheus metrics (loopback unless --basic-auth)")
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    w.add_argument("--port", type=positive_int, default=8080, help="port (default 8080)")
    w.add_argument("--basic-auth", metavar="USER:PASSWORD", help="required beyond loopback (or CRAWLTASKS_WEB_AUTH)")
    w.add_argument("--flower-url", help="Flower's address for the task links (default http://127.0.0.1:5555, "
                                        "or CRAWLTASKS_FLOWER_URL)")
    w.add_argument("--refresh", type=non_negative_float, default=2.0, help="seconds between live updates")
    for command in sub.choices.values():  # accepted after the command too; SUPPRESS keeps the one before
        command.add_argument("--data-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def crawl_options(args: argparse.Namespace) -> dict[str, Any]:
    from .cliopts import crawl_options as from_args

    return from_args(args)


@contextmanager
def services(args: argparse.Namespace, wait: bool = True) -> Iterator[tuple[Settings, Any]]:
    """The services to use: from the environment, or embedded ones. Yields (settings, the embedded
    services or None). ``wait=False``: the embedded store may still be starting (see wait_ready)."""
    settings = Settings.from_env()
    if settings.broker_url:
        from . import runtime
        from .health import ServiceDown, check_services

        problems = check_services(settings)
        if problems:
            raise ServiceDown(problems[0])
        rt = runtime.configure(settings)
        try:
            yield settings, None
        finally:
            rt.close()
        return
    from .embedded import EmbeddedError, EmbeddedServices, data_dir

    root = data_dir(args.data_dir)
    running = EmbeddedServices.running(root)
    if running is not None:
        if args.command == "crawl":
            raise EmbeddedError(f"a crawl runs on {root} already: watch it with 'crawltasks stats ID --watch', "
                                "or give this one a --data-dir of its own")
        from . import runtime

        rt = runtime.configure(running)  # a second terminal: the running command's services
        try:
            yield running, None
        finally:
            rt.close()
        return
    with EmbeddedServices(root, wait=wait) as emb:
        from . import runtime  # imported while the store boots (pymongo and Celery take a third of a second)

        assert emb.settings is not None
        rt = runtime.configure(emb.settings)
        try:
            yield emb.settings, emb
        finally:
            rt.close()


def summary(stats: dict[str, Any]) -> str:
    rate = stats["stored"] / stats["elapsed"] if stats.get("elapsed") else 0.0
    parts = "  ".join(f"{k} {stats[k]}" for k in SUMMARY_FIELDS)
    return f"crawl {stats['crawl_id']} {stats['state']} in {stats.get('elapsed', 0):.1f}s ({rate:.1f} pages/s): {parts}"


def cmd_crawl(args: argparse.Namespace) -> int:
    from .cliopts import locate, read_seeds
    from .feeds import check_output
    from .urls import check_seeds

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
        from .crawl import start_crawl

        try:
            return start_crawl(args.urls or None, spider=spider, crawl_id=args.crawl_id, **options)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    return run_to_completion(args, begin)


def cmd_retry_failed(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    check_worker_flags(args)

    def begin():
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
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
    """Start the services and (unless --no-worker) a local worker, run begin(), wait, summarize, export."""
    with services(args, wait=False) as (settings, embedded):
        from .celeryapp import app, use_broker

        if getattr(args, "fetch_concurrency", None):
            settings.fetch_concurrency = args.fetch_concurrency

        use_broker(settings.broker_url)
        if embedded:  # nobody can watch a private broker: spare the event messages
            app.conf.update(worker_send_task_events=False, task_send_sent_event=False,
                            # an idle worker notices a stop request within one poll (default 1 s)
                            broker_transport_options={**app.conf.broker_transport_options, "polling_interval": 0.2})
        worker = children = stopping = crawl = dashboard = None
        try:
            if embedded:
                note_abandoned(args)
            if not args.no_worker:
                worker, children = start_local_workers(args, app, settings, bool(embedded))
            if embedded:  # it booted while this process imported Celery and started the workers
                embedded.wait_ready()
            crawl = begin()
            if args.detach:
                print(crawl.id)
                return 0
            if getattr(args, "web", False):  # crawl --web: its page, served by this command
                from .web.server import for_crawl

                dashboard = for_crawl(crawl.rt, crawl.id, args.web_port)
            from .monitor import CrawlProgress

            try:
                with CrawlProgress(quiet=args.quiet) as progress:
                    wait_through_outages(crawl, progress, settings)
            except KeyboardInterrupt:
                interrupted(args, crawl, bool(embedded))
                raise
            from .notify import settle

            settle(crawl.rt, crawl.id)  # its finish webhook is out before the workers that send it stop
            # Finished: the workers wind down while the results are written. A private broker holds
            # nothing more of this crawl, so its worker processes can go at once (tasks of another,
            # interrupted crawl in the same data directory come back later: acks are late, requests leased).
            stopping = threading.Thread(target=stop_workers, args=(worker, children, bool(embedded)),
                                        name="stop-workers")
            stopping.start()
            from .summary import finish

            out = sys.stderr if args.output == "-" else sys.stdout  # stdout carries the feed then
            print(summary(crawl.stats()), file=out)
            finish(crawl, args, out)
        finally:
            if dashboard is not None:
                dashboard.stop()
            if stopping is None:  # interrupted, or failed to start: a warm stop, nothing is dropped
                stop_workers(worker, children)
            else:
                stopping.join()
    return 0


def wait_through_outages(crawl, progress, settings: Settings) -> None:
    """Wait for the crawl; while Redis does not answer, say so once and keep trying, for up to
    ``outage_limit()`` seconds (the workers ride it out by themselves)."""
    import redis

    from .health import Problem, ServiceDown, outage_limit
    from .urls import redact

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
    from .crawl import Crawl
    from .runtime import current

    rt = current()
    rt.fleet().forget_all()
    for crawl_id in rt.state.active_crawls():
        if Crawl(crawl_id, rt).interrupt():
            print(f"crawl {crawl_id} was interrupted (its command died); continue it with: "
                  f"{resume_command(args, crawl_id)}", file=sys.stderr)


def start_local_workers(args: argparse.Namespace, app, settings: Settings, embedded: bool):
    """The worker inside this command, and with ``--workers N`` N worker processes beside it."""
    from .embedded import data_dir
    from .localworkers import ChildWorkers, InProcessWorker

    children = None
    if args.workers > 1:  # forked first, while this process has no thread or connection to copy
        log_dir = data_dir(args.data_dir) if embedded else Path(tempfile.gettempdir())
        children = ChildWorkers(app, settings, args.workers, log_dir)
    concurrency = args.concurrency or (8 if args.workers <= 1 else 1)
    worker = InProcessWorker(app, concurrency=max(1, concurrency), loglevel="INFO" if args.verbose else "WARNING")
    try:
        worker.start()
    except BaseException:
        if children is not None:
            children.stop()
        raise
    return worker, children


def stop_workers(worker, children, finished: bool = False) -> None:
    """Stop the local workers together: the child processes are told first, then waited for."""
    if children is not None:
        children.signal_stop(kill=finished)
    if worker is not None:
        worker.stop()
    if children is not None:
        children.wait()


def cmd_stats(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    if args.watch and args.json:
        raise UsageError("--watch and --json do not go together")
    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        if args.watch:
            from .monitor import watch

            watch(args.crawl_id, interval=max(0.1, args.interval))
            return 0
        stats = crawl.stats()
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        for key, value in stats.items():
            print(f"{key:>20}  {value}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        from .feeds import check_output, export

        check_output(args.output)
        check_output(args.items, "--items")
        pages, items = export(crawl.rt.storage, crawl.id, args.output, args.items)
    where = " and ".join(p for p in (args.output, args.items) if p)
    out = sys.stderr if args.output == "-" else sys.stdout
    print(f"wrote {pages} page(s) and {items} item(s) to {where}", file=out)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        state = crawl.stats()["state"]
        if state in ("running", "paused"):
            raise UsageError(f"crawl {args.crawl_id} is {state}: cancel it first ('crawltasks cancel {args.crawl_id}')")
        if not args.yes and not confirm(f"delete crawl {args.crawl_id} ({state}) and its stored documents? [y/N] "):
            print("not deleted", file=sys.stderr)
            return 1
        crawl.rt.storage.delete_crawl(crawl.id)
        crawl.rt.state.delete_crawl(crawl.id)
    print(f"deleted crawl {args.crawl_id}")
    return 0


def confirm(question: str) -> bool:
    """Ask on stderr, read the answer from stdin (a pipe may answer); no answer means no."""
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_fetch(args: argparse.Namespace) -> int:
    from .cliopts import locate, parse_settings, parse_spider_args
    from .trypage import PageError, try_page
    from .urls import check_seeds

    try:
        check_seeds([args.url])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = {**parse_settings(args.set), "spider_args": parse_spider_args(args.spider_arg)}
    try:
        items, requests = try_page(args.url, locate(args.spider), options)
    except PageError as exc:
        print(f"crawltasks: {args.url}: {exc}", file=sys.stderr)
        return 1
    print(f"{items} item(s), {requests} request(s)", file=sys.stderr)
    return 0


def cmd_failures(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        failures = crawl.failures(args.reason)
    for f in failures:
        print(f"{f['reason']:<20} {str(f.get('status') or '-'):>4} attempts={f['attempts']} {f['url']}  {f['message']}")
    print(f"{len(failures)} failure(s)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from .monitor import list_rows, plain_list, render_list

    with services(args):
        rows = list_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif sys.stdout.isatty():
        from rich.console import Console

        Console().print(render_list(rows))
    else:
        print(plain_list(rows) if rows else "no crawls in Redis")
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    from .web.server import listen, serve

    try:
        users, sockets = listen(args)  # refuses a public address without auth, before any service
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return serve(args, users, sockets, services)


def cmd_control(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        changed = getattr(crawl, args.command)()
        state = crawl.stats()["state"]
    print(f"{args.crawl_id}: {state}" + ("" if changed else f" (unchanged: cannot {args.command} a {state} crawl)"))
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from .crawl import Crawl

    with services(args):
        crawl = Crawl(args.crawl_id)
        if not crawl.exists:
            raise UsageError(f"no crawl named {args.crawl_id!r}")
        new = crawl.add(args.urls)
    print(f"{args.crawl_id}: {new} new of {len(args.urls)} URL(s)")
    return 0


COMMANDS = {
    "crawl": cmd_crawl, "stats": cmd_stats, "export": cmd_export, "failures": cmd_failures, "list": cmd_list,
    "retry-failed": cmd_retry_failed, "pause": cmd_control, "resume": cmd_control, "cancel": cmd_control,
    "close": cmd_control, "add": cmd_add,
    "web": cmd_web, "delete": cmd_delete, "fetch": cmd_fetch,
}


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a command as Ctrl-C does: workers warm-stopped, services saved


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not args.command:
            raise UsageError("give a command: crawl, stats, export, failures or list (see 'crawltasks --help')")
        from .logs import setup

        setup(logging.INFO if args.verbose else logging.WARNING)
        return COMMANDS[args.command](args)
    except ServiceDown as exc:
        print(f"crawltasks: error: {exc}", file=sys.stderr)
        return 3
    except (UsageError, OptionError, FeedError) as exc:
        from .urls import redact

        print(f"crawltasks: error: {redact(str(exc))}", file=sys.stderr)  # a bad seed's password stays unseen
        return 2
    except KeyboardInterrupt:
        print("\ncrawltasks: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # services down, bad spider, ...: one line, not a traceback
        if os.environ.get("CRAWLTASKS_DEBUG"):
            raise
        from .urls import redact

        print(f"crawltasks: error: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return 1


def entry() -> None:
    """The console script: ``main``, then a prompt exit. Once the command has closed what it owns
    (files, services, workers), the interpreter's teardown only waits on library threads, such as
    pymongo's monitors, which sleep in half-second steps: 0.4 s added to every command."""
    signal.signal(signal.SIGTERM, _terminated)
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a closed pipe has nothing left to flush into
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
