"""The command line's grammar: every sub-command, its options and their types; a mistake is one line."""

from __future__ import annotations

import argparse
import os

from .. import __version__
from ..errors import ConfigError


class UsageError(ConfigError):
    """A mistake on the command line: printed as one line, exit status 2."""


def default_workers() -> int:
    """One worker process per core, plus one: a worker waits on Redis, the broker and the store part
    of the time, and the command's own process runs none. Measured on a 2-core machine, broad crawl
    at 1 s latency: 58.9 s with 3 workers against 69.3 s with 2."""
    return (os.cpu_count() or 1) + 1


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
    c.add_argument("--workers", type=positive_int, default=default_workers(),
                   help="local worker processes, forked from this command and restarted when one dies "
                        "(default: one per core, plus one)")
    c.add_argument("--concurrency", type=positive_int,
                   help="tasks at once in each local worker process (default 1; more: a thread pool)")
    c.add_argument("--host-concurrency", type=positive_int, help="requests at once per host (default 2)")
    c.add_argument("--host-delay", type=non_negative_float, help="seconds between requests per host (0.5)")
    c.add_argument("--max-retries", type=positive_int, help="retries of transient failures (default 3)")
    c.add_argument("--fetch-concurrency", "--fetch-threads", type=positive_int, dest="fetch_concurrency",
                   help="HTTP requests in flight at once per worker process (default 512)")
    c.add_argument("--batch-size", type=positive_int, help="requests per task message (default 64)")
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
    r.add_argument("--workers", type=positive_int, default=default_workers())
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
