"""Fetching one request: redirects followed hop by hop under the SSRF guard, size and total-time
caps, and every outcome classified with a reason. The HTTP itself goes through a ``ports.Transport``:
the process's pooled requests session (``Runtime.transport``) unless the caller gives another (a test's
``MockTransport``); a batch is fetched concurrently under the shared per-host gate in ``politeness``.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import requests
from requests.utils import to_native_string
from urllib3.exceptions import InvalidChunkLength

from .. import runtime
from ..errors import FetchError
from ..models import Fetched, Request
from ..reasons import Reason
from ..settings import CrawlOptions
from ..urls import InvalidURL, canonicalize, fingerprint, join
from . import identity, sessions
from .guard import Allowance, Refused, ResolutionFailed, check_url
from .transport import WATCHDOG, Watch, pin, prepare, watching

if TYPE_CHECKING:
    from ..ports import Transport

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})
CHUNK = 64 * 1024

@dataclass
class Body:
    """A response body read under the size and time caps."""

    data: bytes
    truncated: bool


class TooSlow(FetchError):
    """The response did not complete within the total time cap."""


class BadFraming(FetchError):
    """The body does not follow its own framing (a negative chunk size): no retry mends that."""


def _read_capped(resp: requests.Response, max_size: int, deadline: float) -> Body:
    """Stream the decoded body, stopping at max_size: a compression bomb is never inflated past it
    (urllib3 2 decompresses at most one chunk's worth of output per read)."""
    chunks, size = [], 0
    try:
        for chunk in resp.iter_content(CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_size:
                return Body(b"".join(chunks)[:max_size], True)
            if time.monotonic() > deadline:
                raise TooSlow("response took longer than the total time cap")
    except ValueError as exc:  # urllib3 takes a negative chunk size for a length, and read() refuses it
        raise BadFraming(f"malformed body framing: {exc}") from exc
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
CONDITIONAL_HEADERS = frozenset({"if-none-match", "if-modified-since"})
DROPPED_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server",
                             "content-encoding", "accept-ranges", "vary"})
HEADERS_CAP = 4096  # characters of response headers carried to parse, at most


def _not_a_page(request: Request, status: int, final: str, common: dict[str, Any]) -> Fetched | None:
    """The failure of a final answer below 400 that is no page: an interim 1xx, a 304 to a request
    that was not conditional, a 3xx whose Location is missing or empty; None for a 2xx. A 304 to a
    conditional request (a re-crawl, see ``revisit``) ends ``not_modified``: the stored page stands."""
    if status == 304 and is_conditional(request):
        return _failure(request, Reason.NOT_MODIFIED, f"HTTP 304: {final} did not change", **common)
    if status < 200 or status == 304:
        return _failure(request, Reason.BAD_RESPONSE, f"HTTP {status} is not a final answer to a GET ({final})",
                        **common)
    if status >= 300:
        return _failure(request, Reason.BAD_REDIRECT, f"HTTP {status} without a Location to follow ({final})", **common)
    return None


def fetch_one(request: Request, options: CrawlOptions, on_send: Callable[[bool], None] | None = None,
              transport: Transport | None = None, rt: runtime.Runtime | None = None) -> tuple[Fetched, bytes | None]:
    """Fetch one request. Never raises: every outcome is a Fetched (and the body when there is one).

    Redirects are followed here, hop by hop, so that each hop is canonicalized, checked for loops
    and checked by the SSRF guard before anything connects to it. ``options.timeout`` caps the whole
    fetch, every hop and every byte included. ``on_send`` is called with False just before the
    first request's bytes go out (it may hold them there: a late start waits for its turn at the host)
    and with True once it is out (the politeness gate learns when it really started).

    ``rt`` is the process's runtime (by default ``runtime.current()``, which opens nothing until
    used): its transport and caches serve the fetch.
    ``transport`` carries each hop: by default the runtime's pooled one, whose connections go to the
    addresses the guard checked and whose sockets the total-time cap cuts. Another transport (a test's
    ``MockTransport``) is judged by the same guard, caps and classification, but has no connection
    to pin to the checked addresses, and the cap cuts only what it hands the watch (see its module).
    """
    rt = rt or runtime.current()
    watch = Watch()
    watch.on_send = on_send
    watching(watch)
    WATCHDOG.add(watch, time.monotonic() + options.timeout)
    try:
        return _fetch(request, options, watch, transport or rt.transport, rt.caches.allowances)
    finally:
        watch.done = True
        watching(None)


def _fetch(request: Request, options: CrawlOptions, watch: Watch, transport: Transport,
           allowances: dict[int, tuple[object, Allowance]]) -> tuple[Fetched, bytes | None]:
    started = time.monotonic()
    deadline = started + options.timeout
    try:
        headers, cookies, proxies = identity.for_request(request, options)
    except Exception as exc:  # noqa: BLE001 - a provider's failure is this request's, not the worker's
        return _failure(request, Reason.PROVIDER_ERROR, f"{type(exc).__name__}: {exc}"), None
    allowance = Allowance.of(options, allowances)
    url, method, visited, body_out = request.url, request.method, [], request.body
    try:
        while True:
            hop = len(visited)
            where = f"redirect {hop} to " if hop else ""
            try:
                canonical = canonicalize(url)
            except InvalidURL as exc:
                return _failure(request, Reason.INVALID_URL, f"{where}{url!r}: {exc}", url=_safe(url)), None
            if canonical in visited:
                chain = " -> ".join([*visited[visited.index(canonical):], canonical])
                return _failure(request, Reason.REDIRECT_LOOP, f"redirect loop: {chain}", url=canonical), None
            if hop > options.max_redirects:
                return _failure(request, Reason.TOO_MANY_REDIRECTS,
                                f"more than {options.max_redirects} redirects (last: {canonical})",
                                url=canonical), None
            visited.append(canonical)
            try:
                pin(canonical, check_url(canonical, allowance))
            except Refused as exc:
                return _failure(request, Reason.SSRF_BLOCKED, f"{where}{canonical}: {exc}", url=canonical), None
            except ResolutionFailed as exc:
                return _failure(request, Reason.DNS_ERROR, str(exc), transient=True, url=canonical), None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TooSlow(f"no complete response within the total time cap ({options.timeout}s)")
            prepared = prepare(method, url, headers, cookies, body_out)
            sessions.send_cookies(prepared)  # the crawl's session cookies for this hop, if it keeps them
            with transport.send(prepared, proxies, (min(10.0, remaining), remaining)) as resp:
                sessions.keep_cookies(prepared, resp)
                target = _redirect_target(resp) if resp.status_code in REDIRECT_STATUSES else None
                if target:
                    url = join(resp.url, target) or target
                    if resp.status_code == 303 or (resp.status_code in (301, 302) and method == "POST"):
                        method, body_out = "GET", b""  # the browsers' rule: the form is not sent again
                        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
                    continue
                status = resp.status_code
                content_type = resp.headers.get("Content-Type", "")
                retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
                declared = _content_length(resp)
                if status < 200:  # an interim answer taken for the final one: close, read nothing after it
                    resp.raw.close()
                    body = Body(b"", False)
                elif status < 400 and declared is not None and declared > options.max_size:
                    body = Body(b"", True)  # refused on the declared length, nothing read
                else:
                    body = _read_capped(resp, options.max_size, deadline)
                final_url = resp.url
                kept_headers = carried_headers(resp.headers)
            if watch.expired:  # a close-delimited body cut by the cap looks complete: it is not
                raise TooSlow("response took longer than the total time cap")
            break
    except Exception as exc:  # noqa: BLE001 - every outcome becomes a recorded reason
        return _classify(request, exc, watch, options), None

    elapsed = time.monotonic() - started
    try:
        final = canonicalize(final_url)
    except InvalidURL as exc:
        return _failure(request, Reason.INVALID_URL, f"redirected to an invalid URL: {exc}"), None
    final_fp = request.fp if final == canonicalize(request.url) else fingerprint(final, request.method)
    common = dict(status=status, url=final, fp=final_fp, content_type=content_type or None, size=len(body.data),
                  elapsed=round(elapsed, 4), retry_after=retry_after, headers=kept_headers)
    if status >= 400 and status not in options.handle_statuses:
        return _failure(request, f"http_{status}", f"HTTP {status} from {final}",
                        transient=status in TRANSIENT_STATUSES, **common), None
    if status < 400 and (refused := _not_a_page(request, status, final, common)) is not None:
        return refused, None
    if body.truncated:
        size = f"{declared} bytes declared" if declared and declared > options.max_size else "cut while streaming"
        return _failure(request, Reason.TOO_LARGE, f"body larger than max_size ({options.max_size} bytes; {size})",
                        **common), None
    return Fetched(request=request, fetched_at=_now(), truncated=False, **common), body.data


def _redirect_target(resp: requests.Response) -> str | None:
    """The Location of a redirect answer, read as requests reads it (latin-1 on the wire, taken as UTF-8)."""
    if "location" not in resp.headers:
        return None
    return to_native_string(resp.headers["location"].encode("latin1"), "utf8")


def is_conditional(request: Request) -> bool:
    """True when the request asks for a 304 if nothing changed (If-None-Match / If-Modified-Since)."""
    return any(k.lower() in CONDITIONAL_HEADERS for k in request.headers)


def carried_headers(headers: Any) -> dict[str, str]:
    """The response headers that travel to the parse stage: lowercased, without those of the
    connection, and no more than HEADERS_CAP characters (spiders read them; the store keeps validators)."""
    out, size = {}, 0
    for name, value in headers.items():
        name = name.lower()
        if name in DROPPED_HEADERS:
            continue
        size += len(name) + len(value)
        if size > HEADERS_CAP:
            break
        out[name] = value
    return out


def _content_length(resp: requests.Response) -> int | None:
    """The declared Content-Length of the (encoded) body, if it is one number."""
    value = resp.headers.get("Content-Length", "").strip()
    return int(value) if value.isdigit() else None


def _safe(url: str) -> str:
    return url if len(url) <= 2000 else url[:2000] + "..."


def _causes(exc: BaseException) -> list[BaseException]:
    """The error and those behind it, through requests' and urllib3's wrappers, innermost last."""
    chain: list[BaseException] = [exc]
    while True:
        inner = next((a for a in getattr(exc, "args", ()) if isinstance(a, BaseException)), None)
        inner = inner or getattr(exc, "reason", None) or exc.__cause__ or exc.__context__
        if not isinstance(inner, BaseException) or any(inner is seen for seen in chain):
            return chain
        chain.append(inner)
        exc = inner


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error behind requests' and urllib3's wrappers."""
    return _causes(exc)[-1]


def _classify(request: Request, exc: Exception, watch: Watch, options: CrawlOptions) -> Fetched:
    """A failure with a clear reason for whatever the fetch raised."""
    if watch.handshaking and (watch.expired or isinstance(exc, (requests.Timeout, TimeoutError))):
        # connected, and the server never answered the TLS hello: it waits for an HTTP request line
        return _failure(request, Reason.SSL_ERROR, f"no TLS handshake from the server (a plain HTTP port?): {exc}")
    if any(isinstance(e, (BadFraming, InvalidChunkLength)) for e in _causes(exc)):
        return _failure(request, Reason.BAD_RESPONSE, f"not a valid HTTP body: {exc}")
    if watch.expired or isinstance(exc, TooSlow):
        return _failure(request, Reason.TOO_SLOW, f"no complete response within the total time cap "
                        f"({options.timeout}s): {exc}", transient=True)
    if isinstance(exc, requests.TooManyRedirects):
        return _failure(request, Reason.TOO_MANY_REDIRECTS, str(exc))
    if isinstance(exc, (InvalidURL, requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                        requests.exceptions.InvalidSchema, UnicodeError)):
        return _failure(request, Reason.INVALID_URL, str(exc))
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return _failure(request, Reason.BAD_RESPONSE, f"invalid header: {exc}")
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        return _failure(request, Reason.DECODING_ERROR, str(exc))
    if isinstance(exc, (requests.Timeout, TimeoutError)):
        return _failure(request, Reason.TIMEOUT, str(exc) or "timed out", transient=True)
    if isinstance(exc, requests.exceptions.SSLError):
        return _failure(request, Reason.SSL_ERROR, str(exc))
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return _failure(request, Reason.INCOMPLETE_BODY, f"the connection ended inside the body: {exc}", transient=True)
    cause = _root_cause(exc)
    if isinstance(cause, http.client.HTTPException) and not isinstance(cause, ConnectionError):
        return _failure(request, Reason.BAD_RESPONSE, f"not a valid HTTP response: {type(cause).__name__}: {cause}")
    if isinstance(exc, requests.ConnectionError):
        return _failure(request, Reason.CONNECTION_ERROR, str(exc), transient=True)
    if isinstance(exc, requests.RequestException):
        return _failure(request, Reason.REQUEST_ERROR, f"{type(exc).__name__}: {exc}")
    return _failure(request, Reason.FETCH_ERROR, f"{type(exc).__name__}: {exc}")
