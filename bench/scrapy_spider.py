"""The Scrapy peer: follow every <a href> on the start URL's host and record url + title.

Run by the harness as ``scrapy runspider bench/scrapy_spider.py -a start_url=URL -o out.jsonl`` with
politeness lifted on the command line (``SCRAPY_SETTINGS`` in bench/run.py), the same way crawltasks' is lifted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy


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
