"""The ``crawltasks`` command (``main``; ``entry`` is the console script).

With ``CRAWLTASKS_BROKER_URL`` unset, everything runs embedded under a data directory; otherwise
the configured Redis, Mongo and broker are used and external workers can share the work.
Exit status: 0 done, 1 an error, 2 a command-line mistake, 3 a service unreachable, 4 state lost,
130 interrupted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

from ..monitor.health import ServiceDown, StateLost
from ..storage.feeds import FeedError
from .commands import (
    cmd_add,
    cmd_control,
    cmd_delete,
    cmd_export,
    cmd_failures,
    cmd_fetch,
    cmd_list,
    cmd_stats,
    cmd_web,
)
from .options import OptionError
from .parser import UsageError, build_parser
from .running import cmd_crawl, cmd_retry_failed, resume_command

__all__ = ["COMMANDS", "UsageError", "build_parser", "entry", "main"]


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
        from ..logs import setup

        setup(logging.INFO if args.verbose else logging.WARNING)
        return COMMANDS[args.command](args)
    except ServiceDown as exc:
        print(f"crawltasks: error: {exc}", file=sys.stderr)
        return 3
    except StateLost as exc:  # the command that rebuilds it, with this command's --data-dir
        print(f"crawltasks: error: {StateLost(exc.crawl_id, resume_command(args, exc.crawl_id))}", file=sys.stderr)
        return 4
    except (UsageError, OptionError, FeedError) as exc:
        from ..urls import redact

        print(f"crawltasks: error: {redact(str(exc))}", file=sys.stderr)  # a bad seed's password stays unseen
        return 2
    except KeyboardInterrupt:
        print("\ncrawltasks: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # services down, bad spider, ...: one line, not a traceback
        if os.environ.get("CRAWLTASKS_DEBUG"):
            raise
        from ..urls import redact

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
