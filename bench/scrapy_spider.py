"""The Scrapy peer: follow every <a href> on the start URL's host and record url + title.

Run by the harness as ``scrapy runspider bench/scrapy_spider.py -a start_url=URL -o out.jsonl`` with
politeness lifted on the command line (see ``SETTINGS``), the same way crawltasks' is lifted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy

# Comparable to crawltasks' lifted politeness: many requests at once, no delay, no robots, no throttle.
SETTINGS = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 64,
    "CONCURRENT_REQUESTS_PER_IP": 0,
    "DOWNLOAD_DELAY": 0,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "ROBOTSTXT_OBEY": False,
    "AUTOTHROTTLE_ENABLED": False,
    "COOKIES_ENABLED": False,
    "TELNETCONSOLE_ENABLED": False,
    "LOG_LEVEL": "WARNING",
    "RETRY_TIMES": 2,
    "DOWNLOAD_TIMEOUT": 30,
    "DEPTH_LIMIT": 0,
}


class FollowAllSpider(scrapy.Spider):
    """Follows every link within the start URL's host:port; one item (url, title) per HTML page."""

    name = "followall"

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        self.netloc = urlsplit(start_url).netloc

    def parse(self, response: scrapy.http.Response) -> Iterator[Any]:
        if not isinstance(response, scrapy.http.TextResponse):
            return
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).netloc == self.netloc:
                yield scrapy.Request(url, callback=self.parse)
