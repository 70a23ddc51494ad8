"""Who a request says it is: User-Agent (fixed, rotating or from a provider), default headers and
cookies, and a proxy from a provider. Providers are ``module:callable`` names in the crawl options,
called with the Request, so they can be shared by every worker."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..errors import FetchError
from ..models import Request
from ..settings import CrawlOptions
from ..urls import without_userinfo

BROWSER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 "
    "Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
)
ACCEPT = "text/html,application/xhtml+xml,*/*;q=0.8"


class ProviderError(FetchError, ValueError):
    """A provider named in the crawl options cannot be imported or is not callable."""


@lru_cache(maxsize=64)
def provider(ref: str) -> Callable[[Request], Any]:
    """Import a ``module:callable`` provider once per process."""
    module_name, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ProviderError(f"cannot import provider {ref!r}: {exc}") from None
    if isinstance(obj, type):
        obj = obj()  # a class: one instance per process, called per request
    if not callable(obj):
        raise ProviderError(f"provider {ref!r} is not callable")
    return obj


def user_agent(request: Request, options: CrawlOptions) -> str:
    if options.user_agent_provider:
        return str(provider(options.user_agent_provider)(request))
    if options.user_agent == "random":
        return random.choice(BROWSER_AGENTS)
    return options.user_agent


def for_request(request: Request, options: CrawlOptions) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(headers, cookies, proxies) for one request; the request's own headers and cookies win."""
    headers = {"Accept": ACCEPT, **options.headers, "User-Agent": user_agent(request, options), **request.headers}
    if request.referer:  # never a password in it, however the request was built
        headers.setdefault("Referer", without_userinfo(request.referer))
    cookies = dict(options.cookies)
    if options.cookie_provider:
        cookies.update(provider(options.cookie_provider)(request) or {})
    cookies.update(request.cookies)  # the request's own win: it was built for this exchange
    proxies: dict[str, str] = {}
    if options.proxy_provider:
        proxy = provider(options.proxy_provider)(request)
        if proxy:
            proxies = {"http": proxy, "https": proxy}
    return headers, cookies, proxies
