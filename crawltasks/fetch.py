"""The fetch stage: HTTP with requests, classified outcomes, and a batch fetched concurrently under
the shared per-host gate. A host that is busy is not waited for long: its requests are deferred.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import requests
from requests.adapters import HTTPAdapter

from .models import Fetched, Request
from .redisstate import RedisState
from .settings import CrawlOptions
from .urls import InvalidURL, canonicalize, fingerprint, host_key

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})
MAX_GATE_WAIT = 2.0  # seconds a fetch task waits for busy hosts before it defers their requests
CHUNK = 64 * 1024

_local = threading.local()


def session() -> requests.Session:
    """One pooled session per thread: connections are reused, sessions are not shared."""
    s = getattr(_local, "session", None)
    if s is None:
        s = requests.Session()
        adapter = HTTPAdapter(pool_connections=32, pool_maxsize=32, max_retries=0)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
        _local.session = s
    return s


@dataclass
class Body:
    """A response body read under the size and time caps."""

    data: bytes
    truncated: bool


def _read_capped(resp: requests.Response, max_size: int, deadline: float) -> Body:
    chunks, size = [], 0
    for chunk in resp.iter_content(CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_size:
            return Body(b"".join(chunks)[:max_size], True)
        if time.monotonic() > deadline:
            raise TimeoutError("response took longer than the total time cap")
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


def fetch_one(request: Request, options: CrawlOptions) -> tuple[Fetched, bytes | None]:
    """Fetch one request. Never raises: every outcome is a Fetched (and the body when there is one)."""
    started = time.monotonic()
    deadline = started + options.timeout
    s = session()
    s.max_redirects = options.max_redirects
    headers = {"User-Agent": options.user_agent, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    if request.referer:
        headers["Referer"] = request.referer
    try:
        canonicalize(request.url)
        with s.request(request.method, request.url, headers=headers, stream=True,
                       timeout=(min(10.0, options.timeout), options.timeout), allow_redirects=True) as resp:
            body = _read_capped(resp, options.max_size, deadline)
            final_url = resp.url
            status = resp.status_code
            content_type = resp.headers.get("Content-Type", "")
            retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
    except InvalidURL as exc:
        return _failure(request, "invalid_url", str(exc)), None
    except requests.TooManyRedirects as exc:
        return _failure(request, "too_many_redirects", str(exc)), None
    except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema, requests.exceptions.InvalidHeader, UnicodeError) as exc:
        return _failure(request, "invalid_url", str(exc)), None
    except requests.exceptions.ContentDecodingError as exc:
        return _failure(request, "decoding_error", str(exc)), None
    except (requests.Timeout, TimeoutError) as exc:
        return _failure(request, "timeout", str(exc) or "timed out", transient=True), None
    except requests.exceptions.SSLError as exc:
        return _failure(request, "ssl_error", str(exc)), None
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
        return _failure(request, "connection_error", str(exc), transient=True), None
    except requests.RequestException as exc:
        return _failure(request, "request_error", f"{type(exc).__name__}: {exc}"), None

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
        return _failure(request, "too_large", f"body larger than max_size ({options.max_size} bytes)",
                        **common), None
    return Fetched(request=request, fetched_at=_now(), truncated=False, **common), body.data


@dataclass
class BatchResult:
    fetched: list[tuple[Fetched, bytes | None]]
    deferred: list[Request]  # hosts were busy: to be fetched later
    wait: float  # seconds until the busiest deferred host may be asked again


def fetch_batch(state: RedisState, requests_: list[Request], options: CrawlOptions,
                max_gate_wait: float = MAX_GATE_WAIT) -> BatchResult:
    """Fetch a batch concurrently, each request under its host's shared slot and delay.

    Requests whose host stays busy past ``max_gate_wait`` are returned as deferred, so the
    worker slot is not held asleep waiting for a slow or throttled host.
    """
    waiting = list(requests_)
    results: list[tuple[Fetched, bytes | None]] = []
    gate_deadline = time.monotonic() + max_gate_wait
    running: set[Future] = set()
    min_wait = 0.0

    def run(req: Request, host: str, token: str) -> tuple[Fetched, bytes | None]:
        try:
            return fetch_one(req, options)
        finally:
            state.release_host(host, token)

    with ThreadPoolExecutor(max_workers=min(options.fetch_threads, len(requests_) or 1)) as pool:
        while waiting or running:
            still_waiting, waits = [], []
            gate_open = time.monotonic() < gate_deadline
            for req in waiting:
                if not gate_open or len(running) >= options.fetch_threads:
                    still_waiting.append(req)
                    continue
                host = host_key(req.url)
                token, wait_s = state.acquire_host(host, options.host_concurrency, options.host_delay,
                                                   lease=options.timeout + 30)
                if token is None:
                    still_waiting.append(req)
                    waits.append(wait_s)
                    continue
                running.add(pool.submit(run, req, host, token))
            waiting = still_waiting
            min_wait = min(waits) if waits else min_wait
            if waiting and not gate_open and not running:
                break
            if running:
                done, running = wait(running, timeout=min(max(min_wait, 0.01), 0.25) if waiting else None,
                                     return_when=FIRST_COMPLETED)
                results.extend(f.result() for f in done)
            elif waiting:
                time.sleep(min(max(min_wait, 0.01), 0.25, max(0.0, gate_deadline - time.monotonic()) + 0.01))
    return BatchResult(fetched=results, deferred=waiting, wait=min_wait)
