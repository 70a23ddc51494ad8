"""The sub-commands that look at or steer a crawl: stats, export, delete, fetch, failures, list, web,
pause/resume/cancel/close and add. Each opens the services (``services``), acts, and prints."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..local.services import open_services
from ..states import CrawlState
from .parser import UsageError


def services(args: argparse.Namespace, wait: bool = True) -> Any:
    """The services of this command (see ``crawltasks.local.services``); any command but ``crawl`` reaches a
    running embedded crawl's from a second terminal."""
    return open_services(args.data_dir, wait=wait, attach=args.command != "crawl")


def existing_crawl(crawl_id: str):
    """The handle of a crawl the services know, or a one-line usage error."""
    from ..crawl import Crawl

    crawl = Crawl(crawl_id)
    if not crawl.exists and crawl.rt.storage.crawl_record(crawl_id) is None:  # Redis may have lost it
        raise UsageError(f"no crawl named {crawl_id!r}")
    return crawl


def cmd_stats(args: argparse.Namespace) -> int:
    if args.watch and args.json:
        raise UsageError("--watch and --json do not go together")
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        if args.watch:
            from ..monitor.watch import watch

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
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        from ..storage.feeds import check_output, export

        check_output(args.output)
        check_output(args.items, "--items")
        pages, items = export(crawl.rt.storage, crawl.id, args.output, args.items)
    where = " and ".join(p for p in (args.output, args.items) if p)
    out = sys.stderr if args.output == "-" else sys.stdout
    print(f"wrote {pages} page(s) and {items} item(s) to {where}", file=out)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        state = crawl.stats()["state"]
        if state in (CrawlState.RUNNING, CrawlState.PAUSED):
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
    from ..urls import check_seeds
    from .options import locate, parse_settings, parse_spider_args
    from .trypage import PageError, try_page

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
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        failures = crawl.failures(args.reason)
    for f in failures:
        print(f"{f['reason']:<20} {str(f.get('status') or '-'):>4} attempts={f['attempts']} {f['url']}  {f['message']}")
    print(f"{len(failures)} failure(s)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from ..monitor.watch import list_rows, plain_list, render_list

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
    from ..web.server import listen, serve

    try:
        users, sockets = listen(args)  # refuses a public address without auth, before any service
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return serve(args, users, sockets, services)


def cmd_control(args: argparse.Namespace) -> int:
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        changed = getattr(crawl, args.command)()
        state = crawl.stats()["state"]
    print(f"{args.crawl_id}: {state}" + ("" if changed else f" (unchanged: cannot {args.command} a {state} crawl)"))
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    with services(args):
        crawl = existing_crawl(args.crawl_id)
        new = crawl.add(args.urls)
    print(f"{args.crawl_id}: {new} new of {len(args.urls)} URL(s)")
    return 0
