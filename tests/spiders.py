"""Spiders used by the tests; workers find them by name through CRAWLTASKS_SPIDER_MODULES."""

from crawltasks.spiders import Spider


class TitleSpider(Spider):
    """Yields one item per page with its title and h1 (from the lazily built soup), follows links."""

    name = "test-titles"

    def parse(self, response):
        h1 = response.soup.find("h1")
        yield {"title": response.title, "h1": h1.get_text() if h1 else None}
        yield from response.follow_all()
