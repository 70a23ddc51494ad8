"""Who a crawl says it is (``http.identity``): headers, cookies and User-Agent from the crawl options
or from providers (``module:callable``), as the site receives them in crawls on the twins. A proxy
only a real transport applies: that one is tests/test_control.py's, on a real worker."""

from __future__ import annotations

import random

import pytest

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.http import identity
from crawltasks.http.identity import BROWSER_AGENTS, ProviderError, for_request, provider
from crawltasks.models import Request
from crawltasks.settings import CrawlOptions

from .sites import FAST, on_twins, page, twin_site


class AgentPerDepth:
    """A provider class: one instance per process, called per request."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Request) -> str:
        self.calls += 1
        return f"depth-{request.depth}-agent"


def proxy_for_b(request: Request) -> str | None:
    return "http://proxy.test:3128" if request.url.endswith("/b") else None


NOT_CALLABLE = {"url": None}


def crawl_hits(crawl_id: str, **options) -> dict[str, dict[str, str]]:
    """The headers the site received for each path, in a crawl of a home page and two links."""
    site = twin_site({"/": page("Home", ["/a", "/b"]), "/a": page("A"), "/b": page("B")})
    rt = on_twins(site)
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, rt=rt, obey_robots=False, **{**FAST, **options})
        assert run_crawl(rt, crawl, timeout=20), crawl.stats()
        assert crawl.stats()["stored"] == 3
    finally:
        rt.close()
    return {hit.path: hit.headers for hit in site.hits}


def test_providers_name_the_agent_and_the_cookies_of_each_request(crawl_id):
    identity.provider.cache_clear()
    hits = crawl_hits(crawl_id, user_agent_provider="tests.test_identity:AgentPerDepth",
                      cookie_provider="tests.spiders:cookie_provider", cookies={"fixed": "1", "session": "x"},
                      headers={"X-Team": "crawl"})
    assert hits["/"]["user-agent"] == "depth-0-agent" and hits["/a"]["user-agent"] == "depth-1-agent"
    assert hits["/a"]["cookie"] == "fixed=1; session=s-1"  # the provider's cookie wins over the option's
    assert hits["/"]["x-team"] == "crawl" and hits["/a"]["referer"] == "http://127.0.0.1:8080/"
    assert provider("tests.test_identity:AgentPerDepth").calls == 3  # one instance, called per request


def test_random_agents_are_browser_agents(crawl_id):
    random.seed(11)
    hits = crawl_hits(crawl_id, user_agent="random")
    assert {h["user-agent"] for h in hits.values()} <= set(BROWSER_AGENTS)


def test_the_requests_own_headers_and_cookies_win_and_a_referer_has_no_password():
    options = CrawlOptions(headers={"X-A": "option", "Accept": "text/plain"}, cookies={"c": "option"},
                           proxy_provider="tests.test_identity:proxy_for_b")
    request = Request(url="http://a.test/b", headers={"X-A": "request"}, cookies={"c": "request"},
                      referer="http://user:secret@a.test/")
    headers, cookies, proxies = for_request(request, options)
    assert (headers["X-A"], headers["Accept"], cookies) == ("request", "text/plain", {"c": "request"})
    assert headers["Referer"] == "http://a.test/" and headers["User-Agent"] == options.user_agent
    assert proxies == {"http": "http://proxy.test:3128", "https": "http://proxy.test:3128"}
    assert for_request(Request(url="http://a.test/a"), options)[2] == {}


@pytest.mark.parametrize(("ref", "says"), [
    ("no_such_module_here:agent", "cannot import provider 'no_such_module_here:agent'"),
    ("tests.spiders:no_such_callable", "cannot import provider"),
    ("tests.test_identity:NOT_CALLABLE", "provider 'tests.test_identity:NOT_CALLABLE' is not callable"),
])
def test_a_provider_that_cannot_be_used_is_said(ref, says):
    with pytest.raises(ProviderError, match=says):
        provider(ref)
