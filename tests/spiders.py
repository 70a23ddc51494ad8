"""Spiders used by the tests; workers find them by name through CRAWLTASKS_SPIDER_MODULES."""

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
