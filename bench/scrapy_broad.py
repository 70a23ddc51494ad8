"""The Scrapy peer of the broad crawl: start at every lab host's root, follow every link to any lab host.

Run by bench/broad.py as ``scrapy runspider bench/scrapy_broad.py -a seeds=FILE -O out.jsonl:jsonlines``
with the same politeness as crawltasks' defaults on the command line (``scrapy_settings`` there). Scrapy
keys its per-domain slots by host name; each lab host is its own address, so each is its own slot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import scrapy


class BroadSpider(scrapy.Spider):
    """One item (url, status) per page; links followed when their host:port is one of the seeds'."""

    name = "broad"

    def __init__(self, seeds: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seed_urls = Path(seeds).read_text().split()
        self.netlocs = {urlsplit(u).netloc for u in self.seed_urls}

    async def start(self) -> AsyncIterator[Any]:  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:
        # Through the dupe filter, like every other request: a link back to a root is not fetched twice.
        for url in self.seed_urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: scrapy.http.Response) -> Iterator[Any]:
        if not isinstance(response, scrapy.http.TextResponse):
            return
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).netloc in self.netlocs:
                yield scrapy.Request(url, callback=self.parse)
