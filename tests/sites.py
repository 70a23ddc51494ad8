"""Fixture web sites served by a real HTTP server on 127.0.0.1 (or a given address; port 0), with a log of
every request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawltasks.runtime import Runtime
    from crawltasks.settings import Settings

FAST = dict(host_delay=0.0, host_concurrency=8, retry_base=0.05, retry_cap=0.5, timeout=5.0)
"""Crawl options for local fixture sites: politeness lifted explicitly, retries quick."""

# A route returns (status, headers, body) for a request path.
Route = Callable[["SiteServer", str], tuple[int, dict[str, str], bytes]]


@dataclass
class Hit:
    path: str
    started: float
    ended: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    client: str = ""  # the peer's address: which machine asked (tests with hosts of their own)
    method: str = "GET"
    body: bytes = b""  # what a POST sent


class SiteServer:
    """A threaded HTTP server whose pages are Python callables; records each request with times."""

    def __init__(self, routes: dict[str, Route] | None = None, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.hits: list[Hit] = []
        self.counts: dict[str, int] = {}
        self.current = threading.local()  # .hit: the request this handler thread answers (routes read its headers)
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                sent = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else b""
                hit = Hit(self.path, time.monotonic(), headers={k.lower(): v for k, v in self.headers.items()},
                          client=self.client_address[0], method=self.command, body=sent)
                with owner._lock:
                    owner.hits.append(hit)
                    owner.counts[self.path] = owner.counts.get(self.path, 0) + 1
                owner.current.hit = hit
                route = owner.routes.get(self.path) or owner.routes.get(self.path.split("?")[0])
                status, headers, body = route(owner, self.path) if route else (404, {}, b"not found")
                self.send_response(status)
                headers = {"Content-Type": "text/html; charset=utf-8", **headers}
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                hit.ended = time.monotonic()

            do_HEAD = do_POST = do_GET  # routes see hit.method (and a POST's hit.body) in server.current

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return self.base + path

    def start(self) -> SiteServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def fetched_paths(self) -> list[str]:
        with self._lock:
            return [h.path for h in self.hits]


def html(title: str, links: list[str] = (), extra: str = "") -> bytes:
    anchors = "".join(f'<a href="{href}">link</a> ' for href in links)
    return f"<!doctype html><html><head><title>{title}</title></head><body>{anchors}{extra}</body></html>".encode()


def page(title: str, links: list[str] = (), extra: str = "") -> Route:
    body = html(title, links, extra)
    return lambda server, path: (200, {}, body)


def slow_page(title: str, links: list[str] = (), delay: float = 0.05) -> Route:
    """A page that takes `delay` seconds to answer, so a crawl of it lasts long enough to act on."""
    body = page(title, links)

    def route(server: SiteServer, path: str):
        time.sleep(delay)
        return body(server, path)
    return route


def redirect(location: str, status: int = 301) -> Route:
    return lambda server, path: (status, {"Location": location}, b"")


def status(code: int, headers: dict[str, str] | None = None) -> Route:
    return lambda server, path: (code, dict(headers or {}), f"status {code}".encode())


def flaky(failures: int, then: Route, code: int = 500) -> Route:
    """Fails with `code` for the first `failures` requests, then serves `then`."""
    def route(server: SiteServer, path: str):
        if server.counts.get(path, 0) <= failures:
            return code, {}, b"temporarily broken"
        return then(server, path)
    return route


PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def basic_site() -> dict[str, Route]:
    """A few dozen pages: cycles, duplicate links spelt differently, a redirect, 404, flaky and dead 500s,
    a PDF, off-site and unfollowable links."""
    routes: dict[str, Route] = {}
    n = 30
    for i in range(n):
        links = [f"/p/{(i + 1) % n}", f"/p/{(i * 7) % n}", "/"]
        routes[f"/p/{i}"] = page(f"Page {i}", links)
    routes["/"] = page("Home", [
        "/p/0", "/p/0#top", "/p/0?", "p/1", "./p/2", "/p/../p/3", "HTTP://127.0.0.1:{port}/p/4",
        "/moved", "/missing", "/flaky", "/dead", "/doc.pdf", "/q?b=2&a=1", "/q?a=1&b=2",
        "mailto:someone@example.com", "javascript:void(0)", "data:text/html,hi", "http://offsite.invalid/x",
    ])
    routes["/moved"] = redirect("/target")
    routes["/target"] = page("Target", ["/p/5"])
    routes["/flaky"] = flaky(2, page("Flaky recovered"))
    routes["/dead"] = status(500)
    routes["/doc.pdf"] = lambda s, p: (200, {"Content-Type": "application/pdf"}, PDF)
    routes["/q"] = page("Query", [])
    return routes


def expected_basic_paths() -> set[str]:
    """Paths the basic site stores as pages (final URLs)."""
    return {"/", *(f"/p/{i}" for i in range(30)), "/target", "/flaky", "/doc.pdf", "/q?a=1&b=2"}


def serve(routes: dict[str, Route], host: str = "127.0.0.1") -> SiteServer:
    """Start a server on host; a route body may contain '{port}', filled with the server's port."""
    server = SiteServer(host=host)
    for path, route in routes.items():
        server.routes[path] = _fill_port(route, server.port)
    return server.start()


def _fill_port(route: Route, port: int) -> Route:
    def filled(server: SiteServer, path: str):
        code, headers, body = route(server, path)
        return code, headers, body.replace(b"{port}", str(port).encode())
    return filled


class TwinSite(SiteServer):
    """The same routes and log as a ``SiteServer``, answered in memory through a ``MockTransport``
    (``transport``) instead of a socket: for crawls on a twin runtime. Its address is never listened on."""

    def __init__(self, routes: dict[str, Route] | None = None, host: str = "127.0.0.1", port: int = 8080) -> None:
        from crawltasks.backends.memory.transport import MockTransport

        self.routes = dict(routes or {})
        self.hits, self.counts = [], {}
        self.current = threading.local()
        self._lock = threading.Lock()
        self.port, self.base = port, f"http://{host}:{port}"
        self.transport = MockTransport(self._answer)

    def _answer(self, prepared) -> tuple[int, dict[str, str], bytes]:
        """One request, as the server's handler takes it: logged, routed, answered as HTML by default."""
        parts = prepared.path_url
        body = prepared.body or b""
        hit = Hit(parts, time.monotonic(), headers={k.lower(): v for k, v in prepared.headers.items()},
                  method=prepared.method, body=body.encode() if isinstance(body, str) else body, client="127.0.0.1")
        with self._lock:
            self.hits.append(hit)
            self.counts[parts] = self.counts.get(parts, 0) + 1
        self.current.hit = hit
        route = self.routes.get(parts) or self.routes.get(parts.split("?")[0])
        status, headers, content = route(self, parts) if route else (404, {}, b"not found")
        hit.ended = time.monotonic()
        return status, {"Content-Type": "text/html; charset=utf-8", **headers}, content

    def start(self) -> TwinSite:
        return self

    def stop(self) -> None:
        """Nothing listens."""


def twin_site(routes: dict[str, Route], host: str = "127.0.0.1", port: int = 8080) -> TwinSite:
    """``serve`` for a twin runtime: the same routes ('{port}' filled in), answered in memory. Sites
    one runtime serves together (``on_twins(a, b)``) need addresses of their own: give each a port."""
    site = TwinSite(host=host, port=port)
    for path, route in routes.items():
        site.routes[path] = _fill_port(route, site.port)
    return site


def on_twins(site: TwinSite, *more: TwinSite, **settings: object) -> Runtime:
    """A twin runtime whose transport is ``site`` (spiders of tests.spiders known by name); with
    ``more`` sites, each request goes to the site of its address (host and port)."""
    from urllib.parse import urlsplit

    from crawltasks.backends.memory.runtime import NOWHERE, twin_runtime
    from crawltasks.backends.memory.transport import MockTransport
    from crawltasks.settings import Settings

    transport = site.transport
    if more:
        by_address = {urlsplit(s.base).netloc: s for s in (site, *more)}
        assert len(by_address) == 1 + len(more), "sites served together need addresses of their own"

        def answer(prepared):
            found = by_address.get(urlsplit(prepared.url).netloc)
            if found is None:  # nothing listens there
                import requests
                raise requests.ConnectionError(f"no twin site at {prepared.url}")
            return found._answer(prepared)
        transport = MockTransport(answer)
    given = {"redis_url": NOWHERE, "mongo_url": NOWHERE, "spider_modules": ["tests.spiders"],
             "fetch_concurrency": 64, **settings}
    return twin_runtime(transport, settings=Settings(**given))


def on_stores(site: TwinSite, settings: Settings) -> Runtime:
    """A runtime on the real stores of ``settings`` (Redis, MongoDB) whose transport is ``site`` and
    whose sender records, for a ``TwinDriver`` to deliver: whole crawls in this process, with no Celery
    and no worker, that leave in Redis and MongoDB what a fleet leaves (time series, per-host counts,
    host states), for what reads them (the dashboard, metrics, ``stats --watch``). Its dispatcher
    rounds take every running crawl of that Redis: give it a database no other test leaves crawls in."""
    from crawltasks.backends.memory.sender import MemorySender
    from crawltasks.runtime import Runtime

    rt = Runtime(settings, _sender=MemorySender(), _transport=site.transport)
    rt.heartbeat.offer(64)
    return rt
