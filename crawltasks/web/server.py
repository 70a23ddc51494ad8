"""The dashboard's server: the Tornado application, run by ``crawltasks web`` in the foreground, or by
``crawltasks crawl --web`` on a thread of the crawling command (for its embedded services, which no
other process can reach).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import socket
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tornado import netutil, web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop

from ..runtime import Runtime
from . import handlers
from .metrics import MetricsHandler, registry_for
from .security import refusal, users_from

DEFAULT_PORT = 8080
REFRESH = 2.0  # seconds between two polls of a page's JSON
FLOWER_URL = "http://127.0.0.1:5555"
ENV_FLOWER_URL = "CRAWLTASKS_FLOWER_URL"
HERE = Path(__file__).resolve().parent
T = TypeVar("T")


def make_app(rt: Runtime, users: dict[str, str] | None = None, flower_url: str | None = None,
             refresh: float = REFRESH, bound_host: str = "127.0.0.1") -> web.Application:
    """The dashboard for the crawls of ``rt``'s Redis and Mongo."""
    executor = ThreadPoolExecutor(4, thread_name_prefix="crawltasks-web")

    async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
        return await IOLoop.current().run_in_executor(executor, fn, *args)

    crawl = r"/crawl/([^/]+)"
    routes = [
        (r"/", handlers.ListPage), (r"/api/crawls", handlers.ListApi),
        (crawl, handlers.CrawlPage), (r"/api" + crawl, handlers.CrawlApi),
        (crawl + r"/failures", handlers.FailuresPage),
        (crawl + r"/(pause|resume|cancel|retry-failed)", handlers.Control),
        (r"/metrics", MetricsHandler), (r"/healthz", handlers.Health),
    ]
    return web.Application(
        routes, template_path=str(HERE / "templates"), static_path=str(HERE / "static"), compress_response=True,
        xsrf_cookies=True, xsrf_cookie_kwargs={"httponly": True, "samesite": "Strict"},
        runtime=rt, users=users or {}, refresh=refresh, run_blocking=run_blocking, bound_host=bound_host,
        flower_url=flower_url or os.environ.get(ENV_FLOWER_URL) or FLOWER_URL, metrics_registry=registry_for(rt))


def address(sockets: list[socket.socket], host: str) -> str:
    """The dashboard's URL as a browser on this machine would type it."""
    port = sockets[0].getsockname()[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/"


class Dashboard:
    """The dashboard served by a thread of this process (``crawl --web``); ``stop()`` ends it."""

    def __init__(self, app: web.Application, sockets: list[socket.socket], host: str) -> None:
        self.url = address(sockets, host)
        self._loop: IOLoop | None = None
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(asyncio.new_event_loop())
            self._loop = IOLoop.current()
            server = HTTPServer(app)
            server.add_sockets(sockets)
            ready.set()
            self._loop.start()
            server.stop()
            self._loop.close(all_fds=True)

        self._thread = threading.Thread(target=serve, name="crawltasks-web", daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.add_callback(self._loop.stop)
        self._thread.join(5)


def for_crawl(rt: Runtime, crawl_id: str, port: int = DEFAULT_PORT) -> Dashboard:
    """``crawl --web``: the dashboard on loopback (the port, or any free one if it is taken), its
    address printed with the crawl's page."""
    try:
        sockets = netutil.bind_sockets(port, address="127.0.0.1")
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        sockets = netutil.bind_sockets(0, address="127.0.0.1")
    board = Dashboard(make_app(rt), sockets, "127.0.0.1")
    print(f"dashboard: {board.url}crawl/{crawl_id}", file=sys.stderr, flush=True)
    return board


def listen(args: argparse.Namespace) -> tuple[dict[str, str], list[socket.socket]]:
    """``crawltasks web``'s checks, before any service is touched: its users, and its sockets bound
    (so a port in use is said at once). ValueError, one line, for a refusal or a mistake."""
    users = users_from(args.basic_auth)
    reason = refusal(args.host, users)
    if reason:
        raise ValueError(reason)
    try:
        return users, netutil.bind_sockets(args.port, address=args.host)
    except OSError as exc:
        raise ValueError(f"web: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None


def serve(args: argparse.Namespace, users: dict[str, str], sockets: list[socket.socket],
          services: Callable[[argparse.Namespace], Any]) -> int:
    """Serve the dashboard of the services the command names until interrupted."""
    with services(args):
        from ..runtime import current

        app = make_app(current(), users, args.flower_url, args.refresh, bound_host=args.host)
        print(f"dashboard: {address(sockets, args.host)} (Prometheus metrics at /metrics); Ctrl-C stops it",
              flush=True)
        asyncio.run(_serve(app, sockets))
    return 0


async def _serve(app: web.Application, sockets: list[socket.socket]) -> None:
    server = HTTPServer(app)
    server.add_sockets(sockets)
    try:
        await asyncio.Event().wait()
    finally:
        server.stop()
