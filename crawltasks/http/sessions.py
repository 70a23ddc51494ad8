"""Sessions: the cookies sites set, kept per crawl for every worker (the runtime's ``CookieJars``:
Redis) and sent back by each.

A crawl with ``cookie_jar`` on (a spider with ``cookies = True``, or the crawl option ``cookies=True``)
has one jar: each cookie a JSON field, plus a version bumped at every change. Matching is
http.cookiejar's, as browsers do it (domain, path, secure, expiry). Each process keeps the jar as a
CookieJar (in ``ProcessCaches.jars``) and reloads it only when the version moved; what a request
costs is one read of that version (Redis: one HGET). Set-Cookie answers of every hop, redirects
included, are written back at once (one MULTI). The fetch thread learns its crawl's jar from
``using`` (the fetch engine sets it).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.cookiejar import Cookie, CookieJar
from typing import TYPE_CHECKING, Any

import requests
from requests.cookies import extract_cookies_to_jar, get_cookie_header

from ..ports import CookieJars

if TYPE_CHECKING:
    from ..runtime import Runtime

ATTRS = ("version", "name", "value", "port", "port_specified", "domain", "domain_specified", "domain_initial_dot",
         "path", "path_specified", "secure", "expires", "discard", "comment", "comment_url", "rfc2109")
_local = threading.local()


def to_json(cookie: Cookie) -> str:
    return json.dumps({**{a: getattr(cookie, a) for a in ATTRS}, "rest": dict(cookie._rest)})  # noqa: SLF001


def from_json(text: str | bytes) -> Cookie:
    return Cookie(**json.loads(text))


def field_of(domain: str, path: str, name: str) -> str:
    return f"{domain}\t{path}\t{name}"


class _Recorder(CookieJar):
    """A jar that remembers the cookies a response asked to delete (an expiry in the past)."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    def clear(self, domain: str | None = None, path: str | None = None, name: str | None = None) -> None:
        if domain is not None and path is not None and name is not None:
            self.deleted.append(field_of(domain, path, name))
        with contextlib.suppress(KeyError):
            super().clear(domain, path, name)


class SharedJar:
    """One crawl's cookie jar in this process, kept in step with the shared one in ``jars``."""

    def __init__(self, jars: CookieJars, crawl_id: str) -> None:
        self.jars, self.crawl_id = jars, crawl_id
        self.version: str | None = None
        self.jar = CookieJar()
        self._lock = threading.Lock()

    def current(self) -> CookieJar:
        """The jar as shared now: its version read, and the whole jar when that moved."""
        version = self.jars.version(self.crawl_id)
        if version != self.version:
            with self._lock:
                version, cookies = self.jars.load(self.crawl_id)
                jar = CookieJar()
                for value in cookies.values():
                    jar.set_cookie(from_json(value))
                self.jar, self.version = jar, version
        return self.jar

    def apply(self, prepared: requests.PreparedRequest) -> None:
        """Add the cookies that match the request's URL to its Cookie header."""
        header = get_cookie_header(self.current(), prepared)
        if header:
            given = prepared.headers.get("Cookie")
            prepared.headers["Cookie"] = f"{given}; {header}" if given else header

    def keep(self, prepared: requests.PreparedRequest, resp: requests.Response) -> None:
        """Write the cookies the answer set (or deleted) to the crawl's jar."""
        if "set-cookie" not in resp.headers:
            return
        found = _Recorder()
        extract_cookies_to_jar(found, prepared, resp.raw)
        cookies = list(found)
        if not cookies and not found.deleted:
            return
        self.jars.save(self.crawl_id, {field_of(c.domain, c.path, c.name): to_json(c) for c in cookies}, found.deleted)


def jar_of(rt: Runtime, crawl_id: str) -> SharedJar:
    """The crawl's jar in this process, on its runtime's jars (made on first use; a forked child,
    which has a runtime of its own, makes its own)."""
    jars = rt.caches.jars
    with rt.caches.jars_lock:
        jar = jars.get(crawl_id)
        if jar is None:
            if len(jars) > 256:
                jars.clear()
            jar = jars[crawl_id] = SharedJar(rt.cookies, crawl_id)
        return jar


@contextlib.contextmanager
def using(jar: SharedJar | None) -> Iterator[None]:
    """The jar of the fetch this thread runs now (None: the crawl keeps no cookies)."""
    _local.jar = jar
    try:
        yield
    finally:
        _local.jar = None


def send_cookies(prepared: requests.PreparedRequest) -> None:
    """Before a hop is sent: the crawl's matching cookies, if it keeps a jar."""
    jar: Any = getattr(_local, "jar", None)
    if jar is not None:
        jar.apply(prepared)


def keep_cookies(prepared: requests.PreparedRequest, resp: requests.Response) -> None:
    """After a hop's answer: what it set goes into the crawl's jar, if it keeps one."""
    jar: Any = getattr(_local, "jar", None)
    if jar is not None:
        jar.keep(prepared, resp)
