"""The Transport contract: the pooled requests transport against a real HTTP server on 127.0.0.1, and
the in-memory MockTransport serving the same routes, answer alike; so a fetch test on the twin says
what a fetch on the wire does (tests/test_fetch_unit.py)."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator

import pytest
import requests
from requests.cookies import RequestsCookieJar, extract_cookies_to_jar

from crawltasks.backends.memory.transport import MockTransport, Reply
from crawltasks.http.fetch import fetch_one
from crawltasks.http.transport import PooledTransport, prepare
from crawltasks.models import Request
from crawltasks.settings import CrawlOptions

from .sites import SiteServer

HTML = b"<!doctype html><html><head><title>Home</title></head><body>" + b"x" * 300 + b"</body></html>"
LARGE = bytes(range(256)) * 800  # 200 KiB: several reads
TEXT = {"Content-Type": "text/html; charset=utf-8"}

# path -> (method, request headers (lowercase), request body) -> reply; served by both transports
Route = Callable[[str, dict[str, str], bytes], Reply]
ROUTES: dict[str, Route] = {
    "/": lambda m, h, b: (200, TEXT, HTML),
    "/large": lambda m, h, b: (200, {"Content-Type": "application/octet-stream"}, LARGE),
    "/moved": lambda m, h, b: (302, {**TEXT, "Location": "/target?x=1"}, b""),
    "/target": lambda m, h, b: (200, TEXT, b"target"),
    "/missing": lambda m, h, b: (404, TEXT, b"no such page"),
    "/echo": lambda m, h, b: (200, {"Content-Type": "text/plain"},
                              f"{m} {h.get('content-type')} {h.get('content-length')} ".encode() + b),
    "/gzip": lambda m, h, b: (200, {**TEXT, "Content-Encoding": "gzip"}, gzip.compress(HTML)),
    "/accept": lambda m, h, b: (200, {"Content-Type": "text/plain"}, h.get("accept-encoding", "").encode()),
    "/cookie": lambda m, h, b: (200, {**TEXT, "Set-Cookie": "session=abc; Path=/"}, b"ok"),
    "/unavailable": lambda m, h, b: (503, {**TEXT, "Retry-After": "7"}, b"later"),
}
OPTIONS = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"])
ARRIVALS: list[float] = []  # when "/arrival" was served: the request reached the server then


def _arrival(m: str, h: dict[str, str], b: bytes) -> Reply:
    ARRIVALS.append(time.monotonic())
    return 200, TEXT, HTML


ROUTES["/arrival"] = _arrival


def _real_route(route: Route):
    def serve(server: SiteServer, path: str) -> Reply:
        hit = server.current.hit
        return route(hit.method, hit.headers, hit.body)
    return serve


def _memory_route(route: Route):
    def serve(request: requests.PreparedRequest) -> Reply:
        headers = {k.lower(): v for k, v in request.headers.items()}
        return route(request.method or "GET", headers, request.body or b"")
    return serve


@pytest.fixture(scope="module")
def server() -> Iterator[SiteServer]:
    site = SiteServer({path: _real_route(route) for path, route in ROUTES.items()}).start()
    yield site
    site.stop()


@pytest.fixture(params=["requests", "memory"])
def at(request, server) -> tuple[object, str]:
    """(transport, base URL): the same site on the wire or in memory."""
    if request.param == "requests":
        return PooledTransport(), server.base
    return MockTransport.site({path: _memory_route(route) for path, route in ROUTES.items()}), server.base


def send(at, path: str, method: str = "GET", body: bytes = b"", headers: dict | None = None) -> requests.Response:
    transport, base = at
    return transport.send(prepare(method, base + path, headers or {}, {}, body), {}, (5.0, 5.0))


def test_status_headers_and_body(at):
    with send(at, "/") as resp:
        assert resp.status_code == 200 and resp.reason == "OK"
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        assert resp.headers["content-length"] == str(len(HTML))
        assert resp.url == at[1] + "/" and resp.encoding == "utf-8"
        assert b"".join(resp.iter_content(64 * 1024)) == HTML


def test_the_body_streams_unread_until_asked(at):
    with send(at, "/large") as resp:
        assert resp.raw.read(10) == LARGE[:10]  # nothing was read before: the body is still there
        chunks = list(resp.iter_content(64 * 1024))
        assert all(len(c) <= 64 * 1024 for c in chunks) and len(chunks) >= 3
        assert b"".join(chunks) == LARGE[10:]


def test_a_redirect_is_an_answer_not_followed(at):
    with send(at, "/moved") as resp:
        assert resp.status_code == 302 and resp.headers["Location"] == "/target?x=1"
        assert resp.url == at[1] + "/moved" and resp.history == []
        assert resp.is_redirect and resp.headers["Content-Length"] == "0"


def test_an_error_status_is_an_answer_with_its_body(at):
    with send(at, "/missing") as resp:
        assert (resp.status_code, resp.content) == (404, b"no such page")
    with send(at, "/unavailable") as resp:
        assert (resp.status_code, resp.headers["Retry-After"]) == (503, "7")


def test_a_post_body_arrives_intact(at):
    form = b"name=caf%C3%A9&bytes=\x00\xff"
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    with send(at, "/echo", "POST", form, headers) as resp:
        assert resp.content == f"POST application/x-www-form-urlencoded {len(form)} ".encode() + form


def test_head_has_the_headers_and_no_body(at):
    with send(at, "/", "HEAD") as resp:
        assert resp.status_code == 200 and resp.headers["Content-Length"] == str(len(HTML))
        assert resp.content == b""
    with send(at, "/") as resp:  # the connection (if any) is fine afterwards
        assert resp.content == HTML


def test_gzip_is_decoded_on_reading_and_raw_on_the_wire(at):
    with send(at, "/accept") as resp:
        assert resp.content.startswith(b"gzip, deflate")  # the base headers ask for it
    with send(at, "/gzip") as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert b"".join(resp.iter_content(1024)) == HTML
    with send(at, "/gzip") as resp:
        assert gzip.decompress(resp.raw.read(decode_content=False)) == HTML


def test_set_cookie_reaches_a_jar(at):
    with send(at, "/cookie") as resp:
        jar = RequestsCookieJar()
        extract_cookies_to_jar(jar, resp.request, resp.raw)  # what sessions.keep_cookies does
        assert jar.get("session") == "abc"


@pytest.mark.parametrize("path", ["/", "/moved", "/missing", "/unavailable", "/gzip", "/large"])
def test_fetch_one_classifies_alike(at, path):
    transport, base = at
    fetched, body = fetch_one(Request(url=base + path), OPTIONS, transport=transport)
    outcome = (fetched.error, fetched.status, fetched.url, fetched.content_type, fetched.size, fetched.retry_after)
    expected = {
        "/": (None, 200, base + "/", "text/html; charset=utf-8", len(HTML), None),
        "/moved": (None, 200, base + "/target?x=1", "text/html; charset=utf-8", 6, None),
        "/missing": ("http_404", 404, base + "/missing", "text/html; charset=utf-8", 12, None),
        "/unavailable": ("http_503", 503, base + "/unavailable", "text/html; charset=utf-8", 5, 7.0),
        "/gzip": (None, 200, base + "/gzip", "text/html; charset=utf-8", len(HTML), None),
        "/large": (None, 200, base + "/large", "application/octet-stream", len(LARGE), None),
    }[path]
    assert outcome == expected, fetched
    assert (body is None) == (fetched.error is not None)


def test_the_hook_before_sending_holds_the_request_until_it_returns(at):
    """The politeness gate's late start waits in this hook: nothing may reach the server before it ends."""
    transport, base = at
    ARRIVALS.clear()
    calls: list[tuple[bool, float]] = []

    def on_send(done: bool) -> None:
        if not done:
            time.sleep(0.1)
        calls.append((done, time.monotonic()))

    fetched, _ = fetch_one(Request(url=base + "/arrival"), OPTIONS, on_send, transport=transport)
    assert fetched.ok and [done for done, _ in calls] == [False, True]
    assert len(ARRIVALS) == 1 and calls[0][1] <= ARRIVALS[0]  # held until the hook returned
