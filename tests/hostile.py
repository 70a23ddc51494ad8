"""A hostile web site on 127.0.0.1: one path per way a server or a page can misbehave.

The server speaks raw HTTP over sockets (not http.server) so that it can do what a well-behaved
server library never would: accept and never answer, drip bytes, lie about lengths and encodings,
stream without end. Every connection is closed when the server stops, sleepers included.

``CASES`` maps each path to the outcome a crawl must record for it: ("page", None) for a stored
page, ("failure", reason) for a failure document with that reason.
"""

from __future__ import annotations

import contextlib
import gzip
import random
import socket
import threading
import zlib
from collections.abc import Callable
from functools import lru_cache

Handler = Callable[["HostileServer", socket.socket, str], None]

N_DUP_TARGETS = 40  # distinct pages behind the duplicate spellings
BIG_LINKS = 100_000  # anchors on the enormous page
BOMB_SIZE = 256 * 1024 * 1024  # bytes a compression bomb inflates to
DRIP_INTERVAL = 0.5

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def _response(status: int, headers: dict[str, str], body: bytes, length: bool = True) -> bytes:
    reason = {200: "OK", 301: "Moved Permanently", 302: "Found", 307: "Temporary Redirect", 404: "Not Found",
              410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
              503: "Service Unavailable"}.get(status, "Status")
    head = {"Content-Type": "text/html; charset=utf-8", "Connection": "close", **headers}
    if length and "Content-Length" not in head:
        head["Content-Length"] = str(len(body))
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in head.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def fixed(status: int = 200, headers: dict[str, str] | None = None, body: bytes | Callable[[], bytes] = b"") -> Handler:
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        data = body() if callable(body) else body
        conn.sendall(_response(status, dict(headers or {}), server.fill(data)))
    return handle


def html(title: str, body: str = "") -> bytes:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def redirect(location: str, status: int = 302) -> Handler:
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        conn.sendall(_response(status, {"Location": server.fill(location.encode()).decode()}, b""))
    return handle


def counting(fail: int, status: int, headers: dict[str, str], then: Handler) -> Handler:
    """Answers `status` for the first `fail` requests of the path, then hands over to `then`."""
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        if server.count(path) <= fail:
            conn.sendall(_response(status, headers, b"come back later"))
        else:
            then(server, conn, path)
    return handle


def never_answer(server: HostileServer, conn: socket.socket, path: str) -> None:
    server.stopping.wait(120)


def drip_body(server: HostileServer, conn: socket.socket, path: str) -> None:
    conn.sendall(_response(200, {"Content-Length": "100000"}, b""))
    for _ in range(100_000):
        if server.stopping.wait(DRIP_INTERVAL):
            return
        conn.sendall(b"<")


def drip_headers(server: HostileServer, conn: socket.socket, path: str) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(100_000):
        if server.stopping.wait(DRIP_INTERVAL):
            return
        conn.sendall(b"X")


def endless(declare: bool) -> Handler:
    """A body far over any max size: declared (Content-Length) or not (read until close)."""
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        headers = {"Content-Length": str(200 * 1024 * 1024)} if declare else {}
        conn.sendall(_response(200, headers, b"", length=False))
        chunk = b"<p>" + b"a" * 65_533
        for _ in range(200 * 16):
            if server.stopping.is_set():
                return
            conn.sendall(chunk)
    return handle


@lru_cache(maxsize=2)
def bomb(kind: str) -> bytes:
    """BOMB_SIZE zero bytes compressed as gzip or zlib (deflate): about 260 KB on the wire."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31 if kind == "gzip" else 15)
    block = b"\0" * (1024 * 1024)
    out = [comp.compress(block) for _ in range(BOMB_SIZE // len(block))]
    out.append(comp.flush())
    return b"".join(out)


def compressed(kind: str, payload: bytes | None = None) -> Handler:
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        data = bomb(kind) if payload is None else payload
        conn.sendall(_response(200, {"Content-Encoding": kind}, data))
    return handle


def cut_body(server: HostileServer, conn: socket.socket, path: str) -> None:
    """Promises 10,000 bytes, sends 200 and hangs up."""
    conn.sendall(_response(200, {"Content-Length": "10000"}, html("Cut", "x" * 120)))


def hang_up(server: HostileServer, conn: socket.socket, path: str) -> None:
    """Closes without a byte of response."""


def not_http(server: HostileServer, conn: socket.socket, path: str) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nthis is not HTTP at all\r\n")


def early_hints(server: HostileServer, conn: socket.socket, path: str) -> None:
    """A 103 Early Hints, then the real answer on the same connection."""
    conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                 + _response(200, {}, html("After the hints")))


def chunked(size_line: bytes) -> Handler:
    """A chunked body whose first chunk declares ``size_line`` (negative, not hexadecimal)."""
    def handle(server: HostileServer, conn: socket.socket, path: str) -> None:
        head = _response(200, {"Transfer-Encoding": "chunked"}, b"", length=False)
        conn.sendall(head + size_line + b"\r\nhello\r\n0\r\n\r\n")
    return handle


def header_flood(server: HostileServer, conn: socket.socket, path: str) -> None:
    headers = {f"X-Flood-{i}": "x" for i in range(500)}
    conn.sendall(_response(200, headers, html("Flood")))


def big_links_page() -> bytes:
    """BIG_LINKS anchors: half off-site (filtered without a DNS lookup), half duplicate spellings."""
    rnd = random.Random(7)
    parts = []
    for i in range(BIG_LINKS):
        if i % 2:
            parts.append(f'<a href="http://h{i}.offsite.invalid/p">o</a>')
        else:
            parts.append(f'<a href="{_spelling(i // 2, rnd)}">d</a>')
    return html("Big", "\n".join(parts))


def _spelling(i: int, rnd: random.Random) -> str:
    n = i % N_DUP_TARGETS
    forms = [f"/dup/{n}", f"/dup/{n}#frag{i}", f"{{base}}/dup/{n}", f"/dup/./{n}", f"/x/../dup/{n}",
             f"HTTP://127.0.0.1:{{port}}/dup/{n}", f"  /dup/{n}  ", f"/dup/{n}?", f"/%64up/{n}"]
    return rnd.choice(forms)


def dup_page() -> bytes:
    rnd = random.Random(3)
    links = [_spelling(i, rnd) for i in range(N_DUP_TARGETS * 10)]
    links += [f"/dup/{n}" for n in range(N_DUP_TARGETS)]  # every target at least once, plainly
    links += ["/query?b=2&a=1", "/query?a=1&b=2", "/query?a=1&b=2#x", "/query?a=1&b=2&"]
    return html("Duplicates", " ".join(f'<a href="{h}">d</a>' for h in links))


INVALID_LINKS = [
    "http://127.0.0.1:99999/bad-port", "http://127.0.0.1:port/bad-port", "http://127.0.0.1:-1/neg",
    "http://exa mple.com/space-in-host", "http://[::1/unclosed", "http://\u2603\u200b.\u0000/",
    "http://xn--/punycode-nothing", "http:///no-host", "http://" + "a" * 300 + ".com/long-label",
    "javascript:alert(1)", "mailto:a@b.c", "data:text/html,<b>x</b>", "ftp://127.0.0.1/file",
    "JavaScript:void(0)", " javascript:void(0)", "tel:+100", "file:///etc/passwd",
]


def invalid_links_page() -> bytes:
    return html("Invalid links", " ".join(f'<a href="{h}">i</a>' for h in INVALID_LINKS)
                + '<a href="/a page with spaces">s</a> <a href="/\u00fcnicode-path">u</a>')


MALFORMED = (b"<html><head><title>Malformed</title><body><div><p><a href='/ok/1'>one<table><tr><td>"
             b"<a href=/ok/2>two</td></tr><b><i>nested</b></i></span></div></div></html></html>"
             b"<a href=\"/ok/3\">after html</a><<<>>> <!-- unterminated comment")
TRUNCATED = b"<!doctype html><html><head><title>Truncated</title></head><body><a href='/ok/4'>ok</a><a hre"
LATIN1 = "<html><head><title>Caf\u00e9 cr\u00e8me</title></head><body><a href='/ok/5'>x</a></body></html>"
SJIS = ("<html><head><meta charset='shift_jis'><title>\u65e5\u672c\u8a9e</title></head>"
        "<body><a href='/ok/6'>x</a></body></html>")


def _garbage() -> bytes:
    return random.Random(11).randbytes(300_000)


# path -> (handler, expected outcome)
CASES: dict[str, tuple[Handler, tuple[str, str | None]]] = {
    # malformed HTML and truncated documents are pages; a cut connection is not
    "/malformed": (fixed(body=MALFORMED), ("page", None)),
    "/truncated-html": (fixed(body=TRUNCATED), ("page", None)),
    "/cut-body": (cut_body, ("failure", "incomplete_body")),
    "/hang-up": (hang_up, ("failure", "connection_error")),
    "/not-http": (not_http, ("failure", "bad_response")),
    "/header-flood": (header_flood, ("failure", "bad_response")),
    "/early-hints": (early_hints, ("failure", "bad_response")),
    "/not-modified": (fixed(304), ("failure", "bad_response")),
    "/negative-chunk": (chunked(b"-5"), ("failure", "bad_response")),
    "/bad-chunk-size": (chunked(b"zz"), ("failure", "bad_response")),
    "/empty": (fixed(body=b""), ("page", None)),
    # far over max_size, declared or streamed; compression bombs
    "/huge-declared": (endless(True), ("failure", "too_large")),
    "/huge-streamed": (endless(False), ("failure", "too_large")),
    "/gzip-bomb": (compressed("gzip"), ("failure", "too_large")),
    "/deflate-bomb": (compressed("deflate"), ("failure", "too_large")),
    "/bad-gzip": (compressed("gzip", b"this is not gzip data at all" * 10), ("failure", "decoding_error")),
    "/small-gzip": (compressed("gzip", gzip.compress(html("Gzipped", "<a href='/ok/7'>x</a>"))), ("page", None)),
    # redirects
    "/redirect-loop/a": (redirect("/redirect-loop/b"), ("failure", "redirect_loop")),
    "/redirect-loop/b": (redirect("/redirect-loop/a"), ("failure", "redirect_loop")),
    "/redirect-self": (redirect("{base}/redirect-self", 301), ("failure", "redirect_loop")),
    "/redirect-chain/0": (redirect("/redirect-chain/1"), ("failure", "too_many_redirects")),
    "/redirect-ok": (redirect("/redirect-ok/2", 307), ("page", None)),
    "/redirect-empty": (fixed(302, {"Location": ""}), ("failure", "bad_redirect")),
    "/redirect-nowhere": (fixed(301), ("failure", "bad_redirect")),
    "/redirect-ok/2": (redirect("/ok/8", 301), ("page", None)),
    "/redirect-bad-port": (redirect("http://127.0.0.1:99999/x"), ("failure", "invalid_url")),
    "/redirect-javascript": (redirect("javascript:alert(1)"), ("failure", "invalid_url")),
    "/redirect-metadata": (redirect("http://169.254.169.254/latest/meta-data/"), ("failure", "ssrf_blocked")),
    "/redirect-ten": (redirect("http://10.1.2.3:8080/admin"), ("failure", "ssrf_blocked")),
    "/redirect-loopback-other": (redirect("http://127.0.0.2:{port}/canary/r1"), ("failure", "ssrf_blocked")),
    "/redirect-localhost": (redirect("http://localhost:{port}/canary/r2"), ("failure", "ssrf_blocked")),
    "/redirect-decimal-ip": (redirect("http://2130706433:{port}/canary/r3"), ("failure", "ssrf_blocked")),
    "/redirect-ipv6-loopback": (redirect("http://[::1]:{port}/canary/r4"), ("failure", "ssrf_blocked")),
    "/redirect-mapped-v6": (redirect("http://[::ffff:10.0.0.1]/"), ("failure", "ssrf_blocked")),
    # servers that never finish
    "/never": (never_answer, ("failure", "timeout")),
    "/drip": (drip_body, ("failure", "too_slow")),
    "/drip-headers": (drip_headers, ("failure", "too_slow")),
    # encodings and content types
    "/wrong-charset": (fixed(body=LATIN1.encode("latin-1")), ("page", None)),
    "/bogus-charset": (fixed(200, {"Content-Type": "text/html; charset=x-no-such-charset"}, html("Bogus charset")),
                       ("page", None)),
    "/meta-charset": (fixed(200, {"Content-Type": "text/html"}, SJIS.encode("shift_jis")), ("page", None)),
    "/no-content-type": (fixed(200, {"Content-Type": None}, html("Sniffed", "<a href='/ok/9'>x</a>")), ("page", None)),
    "/garbage": (fixed(body=_garbage), ("page", None)),
    "/nul-bytes": (fixed(body=b"<html><head><title>N\0ul</title></head><body>\0\0<a href='/ok/10'>x</a>\0"),
                   ("page", None)),
    "/doc.pdf": (fixed(200, {"Content-Type": "application/pdf"}, PDF), ("page", None)),
    "/image.png": (fixed(200, {"Content-Type": "image/png"}, PNG), ("page", None)),
    "/image-as-html": (fixed(200, {"Content-Type": "text/html"}, PNG), ("page", None)),
    # statuses
    "/missing": (fixed(404, body=b"no"), ("failure", "http_404")),
    "/gone": (fixed(410, body=b"gone"), ("failure", "http_410")),
    "/e500": (fixed(500, body=b"oops"), ("failure", "http_500")),
    "/e502": (fixed(502, body=b"bad gateway"), ("failure", "http_502")),
    "/e503": (fixed(503, {"Retry-After": "0"}, b"unavailable"), ("failure", "http_503")),
    "/flaky-503": (counting(2, 503, {}, fixed(body=html("Recovered"))), ("page", None)),
    "/throttled": (counting(1, 429, {"Retry-After": "1"}, fixed(body=html("Throttled then served"))),
                   ("page", None)),
    "/throttled-forever": (fixed(429, {"Retry-After": "1"}, b"slow down"), ("failure", "http_429")),
    "/throttled-past-date": (fixed(429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"later"),
                             ("failure", "http_429")),
    "/throttled-bogus": (fixed(503, {"Retry-After": "soon-ish"}, b"later"), ("failure", "http_503")),
    # links: enormous pages, duplicate spellings, invalid URLs
    "/big-links": (fixed(body=big_links_page), ("page", None)),
    "/dups": (fixed(body=dup_page), ("page", None)),
    "/invalid-links": (fixed(body=invalid_links_page), ("page", None)),
    "/ssrf-links": (fixed(body=lambda: ssrf_links_page()), ("page", None)),
}
for _i in range(1, 16):
    CASES[f"/redirect-chain/{_i}"] = (redirect(f"/redirect-chain/{_i + 1}"), ("failure", "too_many_redirects"))
for _n in range(N_DUP_TARGETS):
    CASES[f"/dup/{_n}"] = (fixed(body=html(f"Dup target {_n}")), ("page", None))
for _n in range(1, 11):
    CASES[f"/ok/{_n}"] = (fixed(body=html(f"Ok {_n}")), ("page", None))
CASES["/query"] = (fixed(body=html("Query")), ("page", None))

# Linked from the index; the others are reached through these pages or redirects.
ENTRY_POINTS = [p for p in CASES if not p.startswith(("/dup/", "/ok/", "/redirect-chain/", "/redirect-ok/",
                                                      "/redirect-loop/b", "/query"))]
ENTRY_POINTS.append("/redirect-chain/0")


# Links to addresses a crawl of 127.0.0.1 must not reach (the crawl allows only its own host):
# the metadata endpoint, RFC 1918, other loopback addresses and spellings of 127.0.0.1 itself.
# Paths under /canary/ are never linked otherwise: a hit on one means the guard let a request through.
SSRF_LINKS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://10.0.0.1/admin", "http://192.168.1.1/", "http://172.16.0.1/",
    "http://127.0.0.2:{port}/canary/l1", "http://localhost:{port}/canary/l2", "http://[::1]:{port}/canary/l3",
    "http://0x7f.0.0.1:{port}/canary/l4", "http://2130706433:{port}/canary/l5", "http://0177.0.0.1:{port}/canary/l6",
    "http://[::ffff:127.0.0.1]:{port}/canary/l7", "http://0.0.0.0:{port}/canary/l8",
]
SSRF_HOSTS = ["169.254.169.254", "10.0.0.1", "192.168.1.1", "172.16.0.1", "127.0.0.2", "localhost", "::1",
              "[::1]", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "::ffff:7f00:1", "[::ffff:7f00:1]", "0.0.0.0"]


def ssrf_links_page() -> bytes:
    return html("SSRF links", " ".join(f'<a href="{h}">s</a>' for h in SSRF_LINKS))


# Answers that slow a whole host down (429/503: the crawl backs off the host for every worker). Each is
# served from a host (port) of its own, so that one case's back-off does not hold up the others.
SLOW_CASES = ["/e503", "/flaky-503", "/throttled", "/throttled-forever", "/throttled-past-date", "/throttled-bogus"]
# Retry-After values a hostile server may send: an hour, and a date years ahead.
HUGE_RETRY_AFTER = {
    "/retry-after-hour": fixed(429, {"Retry-After": "3600"}, b"come back in an hour"),
    "/retry-after-2037": fixed(429, {"Retry-After": "Wed, 21 Oct 2037 07:28:00 GMT"}, b"come back in 2037"),
}


class HostileServer:
    """A threaded raw-socket HTTP server on 127.0.0.1 serving routes (by default CASES and an index)."""

    def __init__(self, routes: dict[str, Handler] | None = None) -> None:
        self.routes: dict[str, Handler] = (dict(routes) if routes is not None
                                           else {p: h for p, (h, _) in CASES.items()})
        self.counts: dict[str, int] = {}
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, daemon=True, name="hostile-accept")

    def url(self, path: str) -> str:
        return self.base + path

    def fill(self, data: bytes) -> bytes:
        """Fill the {base} and {port} placeholders of a body or a Location."""
        return data.replace(b"{base}", self.base.encode()).replace(b"{port}", str(self.port).encode())

    def canary_hits(self) -> dict[str, int]:
        """Requests that reached a path only an SSRF guard failure could reach."""
        with self._lock:
            return {p: n for p, n in self.counts.items() if p.startswith("/canary/")}

    def count(self, path: str) -> int:
        with self._lock:
            return self.counts.get(path, 0)

    def start(self) -> HostileServer:
        bomb("gzip"), bomb("deflate")  # built before the crawl starts
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(5)
        self.sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)  # so that stop() is noticed: closing does not wake accept()
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            path = target.split("?", 1)[0] if target.split("?", 1)[0] != "/query" else "/query"
            with self._lock:
                self.counts[target] = self.counts.get(target, 0) + 1
                if target != path:
                    self.counts[path] = self.counts.get(path, 0) + 1
            handler = self.routes.get(path) or fixed(404, body=b"not found")
            handler(self, conn, target)
        except (OSError, IndexError):
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()




class HostileSite:
    """The hostile site: one server for most cases, one more per SLOW_CASES path, and an index
    linking every entry point on whichever server has it."""

    def __init__(self) -> None:
        main = {p: h for p, (h, _) in CASES.items() if p not in SLOW_CASES}
        self.main = HostileServer(main)
        self.satellites = {p: HostileServer({p: CASES[p][0]}) for p in SLOW_CASES}
        self.main.routes["/"] = fixed(body=lambda: html("Hostile index", " ".join(
            f'<a href="{self.url(p)}">{p}</a>' for p in dict.fromkeys(ENTRY_POINTS))))
        self.base = self.main.base
        self.bases = [self.main.base, *(s.base for s in self.satellites.values())]

    def url(self, path: str) -> str:
        server = self.satellites.get(path, self.main)
        return server.url(path)

    def count(self, path: str) -> int:
        return self.satellites.get(path, self.main).count(path)

    def fill(self, data: bytes) -> bytes:
        return self.main.fill(data)

    def canary_hits(self) -> dict[str, int]:
        return self.main.canary_hits()

    def start(self) -> HostileSite:
        for server in (self.main, *self.satellites.values()):
            server.start()
        return self

    def stop(self) -> None:
        for server in (self.main, *self.satellites.values()):
            server.stop()
