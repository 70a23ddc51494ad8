"""Spiders used by the tests; workers find them by name through CRAWLTASKS_SPIDER_MODULES."""

import os

from crawltasks.spiders import Spider


class TitleSpider(Spider):
    """Yields one item per page with its title and h1 (from the lazily built soup), follows links."""

    name = "test-titles"

    def parse(self, response):
        h1 = response.soup.find("h1")
        yield {"title": response.title, "h1": h1.get_text() if h1 else None}
        yield from response.follow_all()


class ItemIdSpider(Spider):
    """Requests carry only an item id in meta; before_request completes the URL from it."""

    name = "test-item-ids"

    def before_request(self, request):
        if "item_id" in request.meta:
            base = request.url.rsplit("/", 1)[0]
            request.url = f"{base}/item/{request.meta['item_id']}"
        return request

    def parse(self, response):
        yield {"item_id": response.meta.get("item_id"), "title": response.title}


class SkippingSpider(Spider):
    """Skips /skip* requests and drops items whose title says so, through hooks."""

    name = "test-skipping"

    def before_request(self, request):
        return None if "/skip" in request.url else request

    def parse(self, response):
        yield {"title": response.title}
        yield from response.follow_all()

    def before_store(self, kind, doc):
        if kind == "item" and doc.get("title") == "drop me":
            return None
        return doc


def agent_provider(request):
    return "crawltasks-test-agent/1.0"


def cookie_provider(request):
    return {"session": f"s-{request.depth}"}


PROXY = {"url": None}


def proxy_provider(request):
    return PROXY["url"]


class PoisonSpider(Spider):
    """Kills its worker process (as a crashing parser would) on any URL with "/poison" in it."""

    name = "test-poison"

    def parse(self, response):
        if "/poison" in response.url:
            if os.environ.get("POISON_LOG"):  # the tests count the deaths
                with open(os.environ["POISON_LOG"], "a") as log:
                    log.write(f"{os.getpid()}\n")
            os._exit(1)
        yield from response.follow_all()


class FaultySpider(Spider):
    """Every hook and parse raise on a page of their own; each page yields an item of its title."""

    name = "test-faulty"

    def after_response(self, response):
        if response.url.endswith("/bad-after-response"):
            raise RuntimeError("after_response broke")
        return response

    def parse(self, response):
        if response.url.endswith("/bad-parse"):
            raise ValueError("parse broke")
        yield {"title": response.title}
        if response.url.endswith("/bad-item"):
            yield {"title": "bad item"}
        yield from response.follow_all()

    def before_store(self, kind, doc):
        if kind == "page" and doc["url"].endswith("/bad-before-store"):
            raise KeyError("before_store broke on a page")
        if kind == "item" and doc["title"] == "bad item":
            raise TypeError("before_store broke on an item")
        return doc

    def after_store(self, pages, items):
        if any(p["url"].endswith("/bad-after-store") for p in pages):
            raise RuntimeError("after_store broke")


class BrokenInitSpider(Spider):
    """Cannot be made on a worker: its constructor raises (as when a setting it needs is missing)."""

    name = "test-broken-init"

    def __init__(self, crawl_id: str = "", **kwargs):
        raise RuntimeError("SPIDER_API_KEY is not set")


class ProductSpider(Spider):
    """Product pages yield items (sku, title, price as the page says); some invalid, some repeated.
    Item processors: the validator from the class attribute, the dedupe filter from the crawl option."""

    name = "test-products"
    item_pipelines = [{"class": "crawltasks.items.Required", "fields": {"title": "str", "price": "float"}}]

    def parse(self, response):
        for row in response.soup.select("li.product"):
            price = row.get("data-price")
            yield {"sku": row.get("data-sku"), "title": row.get_text() or None,
                   "price": float(price) if price and price[0].isdigit() else price}
        yield from response.follow_all()


class Explode:
    """An item processor that fails on the items whose sku it is told, and tags the others."""

    name = "explode"

    def __init__(self, sku: str = "") -> None:
        self.sku = sku

    def process_item(self, item, spider):
        if item.get("sku") == self.sku:
            raise RuntimeError("processor broke")
        return {**item, "checked": True}


class SessionSpider(Spider):
    """Logs in through its seed and follows every link: it keeps the cookies the site sets."""

    name = "test-session"
    cookies = True


class EndlessSpider(Spider):
    """An incremental crawl fed by an endless source: /n/0, /n/1, ... for ever (base from spider_args)."""

    name = "test-endless"
    base = ""
    drawn = [0]  # how many seeds the generator handed out (the tests read it)

    def start_requests(self):
        from crawltasks.models import Request

        i = 0
        while True:
            self.drawn[0] = i + 1
            yield Request(url=f"{self.base}/n/{i}")
            i += 1
