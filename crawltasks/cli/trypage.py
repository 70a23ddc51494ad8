"""``crawltasks fetch URL``: what a spider makes of one page, as ``scrapy parse`` shows it.

The page is fetched here with the crawl's own fetcher (redirects, the SSRF guard, the caps) and given to
the spider's ``parse``; items are printed as JSON lines, follow-up requests as their URLs. Nothing is
stored and no service is needed, so a spider can be tried before any crawl.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from ..errors import SpiderError
from ..http.guard import private_seed_hosts
from ..models import Request
from ..settings import CrawlOptions
from ..spiders import Response, SiteSpider, Spider


class PageError(SpiderError, RuntimeError):
    """The page could not be fetched; the message is one line."""


def try_page(url: str, spider_cls: type[Spider] | None, options: dict[str, Any],
             out: IO[str] | None = None) -> tuple[int, int]:
    """Fetch ``url``, parse it with the spider and print what it yields (to ``out``, by default the
    standard output of the moment); returns (items, requests)."""
    from ..http.fetch import fetch_one

    out = out or sys.stdout

    cls = spider_cls or SiteSpider
    opts = CrawlOptions(**{"private_hosts": private_seed_hosts([url]), **options})
    spider = cls(crawl_id="fetch", **opts.spider_args)
    fetched, body = fetch_one(Request(url=url, depth=0), opts)  # a seed
    if not fetched.ok:
        raise PageError(f"{fetched.error}: {fetched.message}")
    response = Response(fetched.url or url, fetched.status or 0, body or b"", fetched.request,
                        fetched.content_type, crawl_id="fetch")
    items = requests = 0
    for result in spider.parse(response) or ():
        if isinstance(result, Request):
            print(result.url, file=out)
            requests += 1
        else:
            print(json.dumps(result, ensure_ascii=False, default=str), file=out)
            items += 1
    return items, requests
