"""An example spider for the compose setup: one item per page with its title, following links.

Files in docker/spiders/ are mounted at /app/spiders; name them in CRAWLTASKS_SPIDER_MODULES
(here: spiders.titles) and start a crawl with `crawltasks crawl --spider titles URL`.
"""

from crawltasks import Spider


class TitleSpider(Spider):
    name = "titles"

    def parse(self, response):
        yield {"title": response.title}
        yield from response.follow_all()
