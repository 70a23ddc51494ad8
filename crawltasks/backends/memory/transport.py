"""The transport in memory: the twin of ``transport.PooledTransport`` for tests of the fetch stage in
milliseconds, without a server. Both pass the same contract tests (``tests/test_transport_contract.py``).

A handler answers each prepared request with a real ``requests.Response`` whose body streams from a
``urllib3.HTTPResponse`` over memory, so the fetch reads it with the code it uses on a socket:
``iter_content`` decodes gzip/deflate by Content-Encoding (bombs included, chunk by chunk), a body
shorter than its Content-Length ends in ``ChunkedEncodingError``, ``raw.close()`` works.

What the twin does not do: there is no socket, so nothing is pinned to the guard's addresses (the
guard still decides, on the URL: use IP literals or hosts the crawl allows, or DNS is asked); the
watchdog cuts a streamed body between its chunks, as it shuts a socket, but a handler (or a chunk)
that blocks holds the fetch until it returns; ``timeout`` and ``proxies`` are recorded, not applied;
no wire framing exists (chunk sizes, interim 1xx lines before the answer, malformed status lines,
TLS need the real server: tests/test_hostile.py, tests/test_protocol.py).
"""

from __future__ import annotations

import http.client
import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers
from urllib3 import HTTPHeaderDict, HTTPResponse

from ...http.transport import cut_at_deadline, sending

Headers = Mapping[str, str] | Iterable[tuple[str, str]]
Body = bytes | Iterable[bytes]
Reply = tuple[int, Headers, Body]
"""(status, headers, body) as a server sends them: a bytes body gets its Content-Length unless the
headers give one (or Transfer-Encoding); an iterable of chunks streams without one, until it ends."""
Handler = Callable[[requests.PreparedRequest], "requests.Response | Reply"]
Route = Reply | Handler


def response(request: requests.PreparedRequest, status: int = 200, headers: Headers | None = None,
             body: Body = b"", reason: str | None = None) -> requests.Response:
    """A real, unread ``requests.Response`` to ``request``, as the requests adapter builds one from a
    socket. The body is the bytes on the wire: give it gzipped with ``Content-Encoding: gzip`` and it
    is decoded on reading. No body for HEAD, 1xx, 204 or 304, as on the wire."""
    head = HTTPHeaderDict(headers or {})
    bodiless_status = status < 200 or status in (204, 304)
    no_body = bodiless_status or request.method == "HEAD"  # a HEAD answer keeps the GET's length
    if isinstance(body, bytes | bytearray):
        if not bodiless_status and "content-length" not in head and "transfer-encoding" not in head:
            head["Content-Length"] = str(len(body))
        stream: io.RawIOBase = io.BytesIO(b"" if no_body else bytes(body))
    else:
        stream = io.BytesIO(b"") if no_body else _Chunks(iter(body))
        cut_at_deadline(stream)  # the fetch's total-time cap ends it as it shuts a socket
    reason = reason or http.client.responses.get(status, "")
    raw = HTTPResponse(body=stream, headers=head, status=status, reason=reason, preload_content=False,
                       decode_content=False, original_response=_Origin(head, request.method or "GET"),
                       enforce_content_length=True, request_method=request.method, request_url=request.url)
    resp = requests.Response()  # the fields ``HTTPAdapter.build_response`` sets
    resp.status_code, resp.reason, resp.raw = status, reason, raw
    resp.headers = CaseInsensitiveDict(head)
    resp.encoding = get_encoding_from_headers(resp.headers)
    resp.url, resp.request = request.url or "", request
    return resp


class _Chunks(io.RawIOBase):
    """A body read chunk by chunk from an iterable, produced only as it is read (an endless one is
    fine). Like a socket, it can be shut down from another thread (the watchdog): it then reads as ended."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._left, self._shut = chunks, b"", False

    def readable(self) -> bool:
        return True

    def shutdown(self, how: int) -> None:
        self._shut = True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._left:
            if self._shut:
                return 0
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = chunk
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n


class _Origin:
    """What urllib3 and requests' cookie code read of ``http.client.HTTPResponse``: the headers as
    a message (Set-Cookie reaches the crawl's jar), the method, open or closed."""

    def __init__(self, headers: HTTPHeaderDict, method: str) -> None:
        self.msg = http.client.HTTPMessage()
        for name, value in headers.iteritems():
            self.msg[name] = value
        self._method, self._closed = method, False

    def isclosed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True


@dataclass
class Sent:
    """One request the twin was asked to send, with what the real transport would have applied."""

    request: requests.PreparedRequest
    proxies: dict[str, str]
    timeout: tuple[float, float]


@dataclass
class MockTransport:
    """A ``ports.Transport`` whose answers come from ``handler(prepared)``: a ``requests.Response``
    (see ``response``) or a (status, headers, body) reply. A handler may raise what requests raises
    (``requests.ConnectionError``, ``requests.ReadTimeout``) to play a network failure. Every request
    is kept in ``sent``, in order."""

    handler: Handler
    sent: list[Sent] = field(default_factory=list)

    def send(self, request: requests.PreparedRequest, proxies: dict[str, str],
             timeout: tuple[float, float]) -> requests.Response:
        """Answer ``request`` from the handler, streaming; redirects are answers like any other."""
        self.sent.append(Sent(request, dict(proxies or {}), timeout))
        sending(done=False)  # the politeness gate learns the start, as from a connection
        answer = self.handler(request)  # the request reaches the "server" between the two calls
        sending(done=True)
        return answer if isinstance(answer, requests.Response) else response(request, *answer)

    @classmethod
    def site(cls, routes: Mapping[str, Route], default: Route = (404, {}, b"not found")) -> MockTransport:
        """A site scripted as routes: a full URL, a path with its query, or a path -> a reply or a
        handler, looked up in that order (``default`` otherwise)."""
        def handle(request: requests.PreparedRequest) -> requests.Response | Reply:
            url = request.url or ""
            parts = urlsplit(url)
            path = parts.path or "/"
            keys = (url, f"{path}?{parts.query}" if parts.query else path, path)
            route = next((routes[k] for k in keys if k in routes), default)
            return route(request) if callable(route) else route
        return cls(handle)

    def urls(self) -> list[str]:
        """The URLs sent, in order."""
        return [s.request.url or "" for s in self.sent]
