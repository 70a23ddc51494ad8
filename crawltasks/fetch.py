"""The fetch stage: HTTP with requests, classified outcomes, and a batch fetched concurrently under
the shared per-host gate. A host that is busy is not waited for long: its requests are deferred.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from . import identity
from .guard import Allowance, Refused, ResolutionFailed, check_url
from .models import Fetched, Request
from .settings import CrawlOptions
from .urls import InvalidURL, canonicalize, fingerprint, join

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})
CHUNK = 64 * 1024

_local = threading.local()


class _Watch:
    """The socket one fetch is using, so that the total time cap can cut it.

    A socket timeout bounds each read, not the response: a server that drips a byte every second
    (in the headers or the body) would hold a fetch for ever. At the deadline the watch shuts the
    socket down, which wakes the blocked read at once. The socket itself is kept, not the
    connection: http.client lets go of a connection's socket once the headers say "close".
    """

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.expired = False
        self.done = False
        self._lock = threading.Lock()

    def attach(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self.sock = sock
            expired = self.expired
        if expired:
            _shutdown(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self.sock
        if sock is not None:
            _shutdown(sock)


class _Watchdog:
    """One thread per process that expires the watches of fetches past their deadline (a timer
    thread per request cost more than the request)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Watch]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._pid = 0

    def add(self, watch: _Watch, deadline: float) -> None:
        with self._cv:
            if self._pid != os.getpid():  # first use, or a forked child: the thread is not here
                self._pid = os.getpid()
                self._heap = []
                threading.Thread(target=self._run, name="fetch-watchdog", daemon=True).start()
            heapq.heappush(self._heap, (deadline, next(self._seq), watch))
            if self._heap[0][2] is watch:
                self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cv.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                _, _, watch = heapq.heappop(self._heap)
            if not watch.done:
                watch.expire()


WATCHDOG = _Watchdog()


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing to cut
        sock.shutdown(socket.SHUT_RDWR)


def _pin(url: str, addresses: list[str]) -> None:
    """Connections to url's host made by this thread go to the addresses the guard checked (none:
    it checked nothing, the crawl allows the host). Resolving again at connect time would let a
    name answer public to the guard and private to the connection (DNS rebinding)."""
    if not addresses:
        _local.pinned = None
        return
    parts = urlsplit(url)
    _local.pinned = ((parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80), addresses)


class _WatchedMixin:
    """Hands the connection's socket to the calling thread's watch whenever it is used, and opens
    it to the address the SSRF guard checked (see ``_pin``)."""

    def _new_conn(self) -> socket.socket:
        pinned = getattr(_local, "pinned", None)
        if not pinned or (pinned[0], pinned[1]) != (self.host.lower(), self.port):  # type: ignore[attr-defined]
            return super()._new_conn()  # type: ignore[misc]
        name, failure = self._dns_host, None  # type: ignore[attr-defined]
        try:
            for address in pinned[2]:  # in the resolver's order, the next one when one does not answer
                self._dns_host = address  # what urllib3 connects to; the Host header and TLS name stay the name's
                try:
                    return super()._new_conn()  # type: ignore[misc]
                except (NewConnectionError, ConnectTimeoutError) as exc:
                    failure = exc
        finally:
            self._dns_host = name
        raise failure  # type: ignore[misc]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._attach()

    def request(self, *args: Any, **kwargs: Any) -> None:
        self._attach()
        super().request(*args, **kwargs)  # type: ignore[misc]
        self._attach()

    def _attach(self) -> None:
        watch = getattr(_local, "watch", None)
        if watch is not None:
            watch.attach(getattr(self, "sock", None))


class _WatchedHTTPConnection(_WatchedMixin, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedMixin, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _Adapter(HTTPAdapter):
    """HTTPAdapter whose connections (direct or through a proxy) can be cut by the time cap."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_WATCHED_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if proxy.lower().startswith("http"):
            manager.pool_classes_by_scheme = dict(_WATCHED_POOLS)
        return manager


def session() -> requests.Session:
    """One pooled session per thread: connections are reused, sessions are not shared. It keeps no
    cookies: a thread serves many crawls, and a request's cookies are its crawl's (see identity)."""
    s = getattr(_local, "session", None)
    if s is None:
        s = requests.Session()
        s.trust_env = False  # proxies come from the crawl's proxy_provider, not from each call's environment
        s.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        adapter = _Adapter(pool_connections=32, pool_maxsize=32, max_retries=0)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
        _local.session = s
    return s


BASE_HEADERS = requests.utils.default_headers()  # Accept-Encoding and keep-alive; identity adds the rest


def prepare(method: str, url: str, headers: dict[str, str], cookies: dict[str, str]) -> requests.PreparedRequest:
    """The request as sent: the base headers, then the crawl's. Prepared here rather than by
    ``Session.request``, whose merging of session settings cost a quarter of a fetch's CPU (a
    typing-Protocol isinstance check per setting), for settings this crawler never puts on a session."""
    prepared = requests.PreparedRequest()
    prepared.prepare(method=method, url=url, headers={**BASE_HEADERS, **headers}, cookies=cookies or None)
    return prepared


@dataclass
class Body:
    """A response body read under the size and time caps."""

    data: bytes
    truncated: bool


class TooSlow(Exception):
    """The response did not complete within the total time cap."""


def _read_capped(resp: requests.Response, max_size: int, deadline: float) -> Body:
    """Stream the decoded body, stopping at max_size: a compression bomb is never inflated past it
    (urllib3 2 decompresses at most one chunk's worth of output per read)."""
    chunks, size = [], 0
    for chunk in resp.iter_content(CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_size:
            return Body(b"".join(chunks)[:max_size], True)
        if time.monotonic() > deadline:
            raise TooSlow("response took longer than the total time cap")
    return Body(b"".join(chunks), False)


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _failure(request: Request, error: str, message: str, transient: bool = False, **extra) -> Fetched:
    return Fetched(request=request, error=error, message=message[:500], transient=transient,
                   fetched_at=_now(), **extra)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def fetch_one(request: Request, options: CrawlOptions) -> tuple[Fetched, bytes | None]:
    """Fetch one request. Never raises: every outcome is a Fetched (and the body when there is one).

    Redirects are followed here, hop by hop, so that each hop is canonicalized, checked for loops
    and checked by the SSRF guard before anything connects to it. ``options.timeout`` caps the whole
    fetch, every hop and every byte included.
    """
    watch = _Watch()
    _local.watch = watch
    WATCHDOG.add(watch, time.monotonic() + options.timeout)
    try:
        return _fetch(request, options, watch)
    finally:
        watch.done = True
        _local.watch = None


def _fetch(request: Request, options: CrawlOptions, watch: _Watch) -> tuple[Fetched, bytes | None]:
    started = time.monotonic()
    deadline = started + options.timeout
    s = session()
    try:
        headers, cookies, proxies = identity.for_request(request, options)
    except Exception as exc:  # noqa: BLE001 - a provider's failure is this request's, not the worker's
        return _failure(request, "provider_error", f"{type(exc).__name__}: {exc}"), None
    allowance = Allowance.of(options)
    url, method, visited = request.url, request.method, []
    try:
        while True:
            hop = len(visited)
            where = f"redirect {hop} to " if hop else ""
            try:
                canonical = canonicalize(url)
            except InvalidURL as exc:
                return _failure(request, "invalid_url", f"{where}{url!r}: {exc}", url=_safe(url)), None
            if canonical in visited:
                chain = " -> ".join([*visited[visited.index(canonical):], canonical])
                return _failure(request, "redirect_loop", f"redirect loop: {chain}", url=canonical), None
            if hop > options.max_redirects:
                return _failure(request, "too_many_redirects",
                                f"more than {options.max_redirects} redirects (last: {canonical})",
                                url=canonical), None
            visited.append(canonical)
            try:
                _pin(canonical, check_url(canonical, allowance))
            except Refused as exc:
                return _failure(request, "ssrf_blocked", f"{where}{canonical}: {exc}", url=canonical), None
            except ResolutionFailed as exc:
                return _failure(request, "dns_error", str(exc), transient=True, url=canonical), None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TooSlow(f"no complete response within the total time cap ({options.timeout}s)")
            with s.send(prepare(method, url, headers, cookies), proxies=proxies, stream=True,
                        allow_redirects=False, timeout=(min(10.0, remaining), remaining)) as resp:
                target = s.get_redirect_target(resp) if resp.status_code in REDIRECT_STATUSES else None
                if target:
                    url = join(resp.url, target) or target
                    if resp.status_code == 303 or (resp.status_code in (301, 302) and method == "POST"):
                        method = "GET"
                    continue
                status = resp.status_code
                content_type = resp.headers.get("Content-Type", "")
                retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
                declared = _content_length(resp)
                if status < 400 and declared is not None and declared > options.max_size:
                    body = Body(b"", True)  # refused on the declared length, nothing read
                else:
                    body = _read_capped(resp, options.max_size, deadline)
                final_url = resp.url
            if watch.expired:  # a close-delimited body cut by the cap looks complete: it is not
                raise TooSlow("response took longer than the total time cap")
            break
    except Exception as exc:  # noqa: BLE001 - every outcome becomes a recorded reason
        return _classify(request, exc, watch, options), None

    elapsed = time.monotonic() - started
    try:
        final = canonicalize(final_url)
    except InvalidURL as exc:
        return _failure(request, "invalid_url", f"redirected to an invalid URL: {exc}"), None
    final_fp = request.fp if final == canonicalize(request.url) else fingerprint(final, request.method)
    common = dict(status=status, url=final, fp=final_fp, content_type=content_type or None, size=len(body.data),
                  elapsed=round(elapsed, 4), retry_after=retry_after)
    if status >= 400:
        return _failure(request, f"http_{status}", f"HTTP {status} from {final}",
                        transient=status in TRANSIENT_STATUSES, **common), None
    if body.truncated:
        size = f"{declared} bytes declared" if declared and declared > options.max_size else "cut while streaming"
        return _failure(request, "too_large", f"body larger than max_size ({options.max_size} bytes; {size})",
                        **common), None
    return Fetched(request=request, fetched_at=_now(), truncated=False, **common), body.data


def _content_length(resp: requests.Response) -> int | None:
    """The declared Content-Length of the (encoded) body, if it is one number."""
    value = resp.headers.get("Content-Length", "").strip()
    return int(value) if value.isdigit() else None


def _safe(url: str) -> str:
    return url if len(url) <= 2000 else url[:2000] + "..."


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error behind requests' and urllib3's wrappers."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = next((a for a in getattr(exc, "args", ()) if isinstance(a, BaseException)), None)
        inner = inner or getattr(exc, "reason", None) or exc.__cause__ or exc.__context__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def _classify(request: Request, exc: Exception, watch: _Watch, options: CrawlOptions) -> Fetched:
    """A failure with a clear reason for whatever the fetch raised."""
    if watch.expired or isinstance(exc, TooSlow):
        return _failure(request, "too_slow", f"no complete response within the total time cap "
                        f"({options.timeout}s): {exc}", transient=True)
    if isinstance(exc, requests.TooManyRedirects):
        return _failure(request, "too_many_redirects", str(exc))
    if isinstance(exc, (InvalidURL, requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                        requests.exceptions.InvalidSchema, UnicodeError)):
        return _failure(request, "invalid_url", str(exc))
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return _failure(request, "bad_response", f"invalid header: {exc}")
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        return _failure(request, "decoding_error", str(exc))
    if isinstance(exc, (requests.Timeout, TimeoutError)):
        return _failure(request, "timeout", str(exc) or "timed out", transient=True)
    if isinstance(exc, requests.exceptions.SSLError):
        return _failure(request, "ssl_error", str(exc))
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return _failure(request, "incomplete_body", f"the connection ended inside the body: {exc}", transient=True)
    cause = _root_cause(exc)
    if isinstance(cause, http.client.HTTPException) and not isinstance(cause, ConnectionError):
        return _failure(request, "bad_response", f"not a valid HTTP response: {type(cause).__name__}: {cause}")
    if isinstance(exc, requests.ConnectionError):
        return _failure(request, "connection_error", str(exc), transient=True)
    if isinstance(exc, requests.RequestException):
        return _failure(request, "request_error", f"{type(exc).__name__}: {exc}")
    return _failure(request, "fetch_error", f"{type(exc).__name__}: {exc}")
