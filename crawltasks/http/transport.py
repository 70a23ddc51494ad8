"""The HTTP transport of a fetch, on requests (``PooledTransport``, the real ``ports.Transport``):
one pooled session per process (``Runtime.transport``), whose sockets the total time cap can cut and
whose connections go to the addresses the SSRF guard checked; requests prepared and sent without the
per-request work of ``Session.request`` this crawler does not need. Its in-memory twin, which has no
sockets to cut or pin, is ``backends.memory.transport.MockTransport``.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from . import headers as httpheaders

_local = threading.local()
POOL_HOSTS = 2048  # hosts whose idle connections a process keeps (a broad crawl talks to many at once)
POOL_PER_HOST = 64  # idle connections kept per host; more may be open, they are closed when done


class Watch:
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
        # called with False just before the request's first bytes go out (it may wait there: the
        # politeness gate's late start), with True once it is out (then dropped)
        self.on_send: Callable[[bool], None] | None = None
        self.handshaking = False  # connected to an HTTPS server, TLS handshake not done (see fetch._classify)
        self._lock = threading.Lock()

    def sending(self, done: bool) -> None:
        hook = self.on_send
        if done:
            self.on_send = None
        if hook is not None:
            hook(done)

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
        self._heap: list[tuple[float, int, Watch]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._pid = 0

    def add(self, watch: Watch, deadline: float) -> None:
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


def pin(url: str, addresses: list[str]) -> None:
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
    it to the address the SSRF guard checked (see ``pin``)."""

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
        watch = getattr(_local, "watch", None)
        if watch is not None:
            watch.handshaking = False
        self._attach()

    def request(self, *args: Any, **kwargs: Any) -> None:
        self._attach()
        self._before_first_send = True
        super().request(*args, **kwargs)  # type: ignore[misc]
        watch = getattr(_local, "watch", None)
        if watch is not None:  # once the request is out: its start is known to be no later than now
            watch.sending(done=True)
        self._attach()

    def send(self, data: Any) -> None:
        """The request's first bytes: the hook runs here, after the request line and headers are built,
        so nothing but this call stands between the politeness gate's word and the wire."""
        if getattr(self, "_before_first_send", False):
            self._before_first_send = False
            watch = getattr(_local, "watch", None)
            if watch is not None:
                watch.sending(done=False)
        super().send(data)  # type: ignore[misc]

    def _attach(self) -> None:
        watch = getattr(_local, "watch", None)
        if watch is not None:
            watch.attach(getattr(self, "sock", None))


class _WatchedHTTPConnection(_WatchedMixin, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedMixin, HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        """The TCP connection; the TLS handshake comes next (``connect`` notes when it is done): a
        server that never completes it is most likely plain HTTP, not slow."""
        sock = super()._new_conn()
        watch = getattr(_local, "watch", None)
        if watch is not None and self._tunnel_host is None:  # through a proxy, the tunnel comes first
            watch.handshaking = True
        return sock


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


class PooledTransport:
    """The requests implementation of ``ports.Transport``: one pooled session, shared by the
    process's fetch threads, whose connections the total time cap can cut (``Watch``) and which go
    to the addresses the SSRF guard checked (``pin``). A host's connections are reused whichever
    thread fetches next from it (one session per thread made nearly every request a new connection
    in a broad crawl). Sharing is safe here: requests go straight to the adapter (see ``send``), whose
    pool manager is thread-safe, and no cookie jar is ever touched. It keeps no cookies: the process
    serves many crawls, and a request's cookies are its crawl's (see identity)."""

    def __init__(self) -> None:
        # a host above POOL_PER_HOST at once closes its extra connections: expected, not a warning
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        httpheaders.install()  # plain response headers read without the email package
        s = requests.Session()
        s.trust_env = False  # proxies come from the crawl's proxy_provider, not from each call's environment
        s.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        adapter = _Adapter(pool_connections=POOL_HOSTS, pool_maxsize=POOL_PER_HOST, max_retries=0)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
        self.session = s

    def send(self, request: requests.PreparedRequest, proxies: dict[str, str],
             timeout: tuple[float, float]) -> requests.Response:
        """Send through the session's adapter (its pooled connections), streaming, no redirect followed.
        ``Session.send`` would add response hooks this crawler has none of and copy cookies into a jar
        that keeps none: 5-10 % of a fetch's CPU, measured."""
        return self.session.get_adapter(request.url or "").send(
            request, stream=True, timeout=timeout, verify=True, cert=None, proxies=proxies)

    def close(self) -> None:
        """Close the idle connections (the runtime that owns this transport is done with it)."""
        self.session.close()


BASE_HEADERS = requests.utils.default_headers()  # Accept-Encoding and keep-alive; identity adds the rest


def prepare(method: str, url: str, headers: dict[str, str], cookies: dict[str, str],
            body: bytes = b"") -> requests.PreparedRequest:
    """The request as sent: the base headers, then the crawl's. Prepared here rather than by
    ``Session.request``, whose merging of session settings cost a quarter of a fetch's CPU (a
    typing-Protocol isinstance check per setting), for settings this crawler never puts on a session.
    The steps are ``PreparedRequest.prepare``'s, without a cookie jar when there is no cookie."""
    prepared = requests.PreparedRequest()
    prepared.prepare_method(method)
    prepared.prepare_url(url, None)
    prepared.prepare_headers({**BASE_HEADERS, **headers})
    if cookies:
        prepared.prepare_cookies(cookies)
    prepared.prepare_body(body or None, None)  # bytes as they are, with their Content-Length
    prepared.prepare_auth(None, url)  # user:password in the URL becomes an Authorization header
    prepared.prepare_hooks(None)
    return prepared


def sending(done: bool) -> None:
    """Tell the fetch this thread runs that its request goes out now (False) or is out (True): what a
    watched connection does, for a transport without one (the in-memory twin)."""
    watch = getattr(_local, "watch", None)
    if watch is not None:
        watch.sending(done)


def cut_at_deadline(stream: Any) -> None:
    """Hand the fetch this thread runs what its total-time cap must cut: anything with a socket's
    ``shutdown(how)`` (the in-memory twin's streamed body), as a watched connection hands its socket."""
    watch = getattr(_local, "watch", None)
    if watch is not None:
        watch.attach(stream)


def watching(watch: Watch | None) -> None:
    """The watch of the fetch this thread runs now (None when it is done)."""
    _local.watch = watch
