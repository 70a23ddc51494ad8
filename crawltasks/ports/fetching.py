"""The fetch stage's ports: ``Transport``, one HTTP hop; ``RobotsCache``, the robots.txt every worker
shares; ``CookieJars``, the cookies a crawl's sites set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import requests


class Transport(Protocol):
    """What the fetch stage needs of HTTP: one hop, nothing more. Redirects, the SSRF guard, the size
    and total-time caps and the classification of failures are the fetch's (``fetch.fetch_one``), so
    that they are the same whatever carries the bytes."""

    def send(self, request: requests.PreparedRequest, proxies: dict[str, str],
             timeout: tuple[float, float]) -> requests.Response:
        """Send ``request`` as it is (through ``proxies``; ``timeout`` is (connect, read) seconds)
        and return its response unread: the body streams from ``response.raw`` (``iter_content``
        decodes its Content-Encoding), no redirect is followed. A failure to get an answer raises
        what requests raises (``requests.ConnectionError``, ``requests.Timeout``, ...)."""
        ...


class RobotsCache(Protocol):
    """robots.txt texts shared by every worker, by origin (scheme://host:port), each kept for its own
    TTL; and a short lock per origin, so that one worker at a time downloads a missing file."""

    def text(self, origin: str) -> str | None:
        """The origin's robots.txt as stored ("" for one that allows everything), None when unknown
        or expired."""
        ...

    def put(self, origin: str, text: str, ttl: int) -> None:
        """Keep the origin's text for ``ttl`` seconds (> 0), replacing what was kept."""
        ...

    def lock(self, origin: str, ttl: int) -> bool:
        """Take the origin's download lock for ``ttl`` seconds; False if someone holds it."""
        ...

    def unlock(self, origin: str) -> None:
        """Let the lock go (whoever holds it: only its taker calls this, before its TTL runs out)."""
        ...


class CookieJars(Protocol):
    """Every crawl's cookie jar, shared by its workers: cookies by field ("domain<TAB>path<TAB>name")
    as JSON, and a version that every change bumps, so that a process reloads a jar only when it moved."""

    def version(self, crawl_id: str) -> str | None:
        """The jar's version now (None: the crawl never kept a cookie); one cheap read."""
        ...

    def load(self, crawl_id: str) -> tuple[str | None, dict[str, str]]:
        """The jar's version and cookies (field -> JSON), read together."""
        ...

    def save(self, crawl_id: str, cookies: dict[str, str], deleted: Sequence[str]) -> None:
        """Write ``cookies``, delete the ``deleted`` fields and bump the version, all at once (a
        reader sees all of it or none)."""
        ...
