"""Per-request callbacks and errbacks, and what a callback yields made into requests and items.

A request names its callback and errback by method name (``Request(url, callback="parse_item")``), so
they survive the JSON between stages; the parse stage looks the name up on the crawl's spider. An
errback gets a ``Failure`` for a request that ends failed and may yield items and requests; the
request's record still counts it failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import logs
from ..errors import SpiderError
from ..models import Request
from ..spiders import Response, Spider, StopCrawl
from ..urls import without_userinfo
from .html import is_html

JSON_TYPES = ("application/json",)


class NoSuchCallback(SpiderError, AttributeError):
    """A request names a method its spider does not have."""


@dataclass
class Failure:
    """Why a request ended failed, as its errback sees it."""

    request: Request
    reason: str  # the recorded reason, e.g. "http_404", "timeout"
    status: int | None = None
    message: str | None = None
    url: str | None = None  # the final URL, when the failure came after redirects

    @property
    def meta(self) -> dict[str, Any]:
        return self.request.meta


def method_of(spider: Spider, name: str | None, default: str = "parse") -> Callable[..., Any]:
    """The spider's method called ``name`` (``default`` when the request names none)."""
    method = getattr(spider, name or default, None)
    if not callable(method) or (name or default).startswith("_"):
        raise NoSuchCallback(f"{type(spider).__name__} has no method {name or default!r}")
    return method


def wants(spider: Spider, request: Request, content_type: str | None, body: bytes) -> bool:
    """Whether the response goes to the spider: HTML always, another type when the spider lists it in
    ``parse_types`` or the request names a callback."""
    if request.callback or is_html(content_type, body):
        return True
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return bool(kind) and any(kind == t.lower() for t in spider.parse_types)


def call(spider: Spider, response: Response) -> list[Any]:
    """The request's callback (else ``parse``) on the response: what it yields, as a list."""
    return list(method_of(spider, response.request.callback)(response) or ())


def resolve(produced: Iterable[Any], parent: Request, page_url: str) -> tuple[list[Request], list[dict[str, Any]]]:
    """Requests and items of what a callback yielded. A request without a depth is one level below its
    page, and gets the page as its referer (no password in it); other values are ignored."""
    requests, items = [], []
    for thing in produced:
        if isinstance(thing, Request):
            if thing.depth is None:
                thing.depth = (parent.depth or 0) + 1
                if thing.referer is None:
                    thing.referer = without_userinfo(page_url)
            requests.append(thing)
        elif isinstance(thing, dict):
            items.append(thing)
    return requests, items


def errback(spider: Spider | None, failure: Failure, crawl_id: str) -> tuple[list[Request], list[dict[str, Any]]]:
    """Run the failed request's errback, if it names one. Its exception is logged and costs only what it
    would have yielded (the request is failed already); StopCrawl goes on to the caller."""
    name = failure.request.errback
    if not name or spider is None:
        return [], []
    try:
        produced = list(method_of(spider, name)(failure) or ())
    except StopCrawl:
        raise
    except Exception as exc:  # user code: the request is failed anyway
        logs.event("spider.errback_error", logging.WARNING, crawl_id=crawl_id, url=failure.request.url,
                   errback=name, message=f"{type(exc).__name__}: {exc}")
        return [], []
    return resolve(produced, failure.request, failure.url or failure.request.url)
