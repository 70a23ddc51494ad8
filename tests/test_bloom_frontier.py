"""A crawl that dedupes with a Bloom filter schedules through the same one script as the exact set:
the filter is checked and set where the request is queued and counted, so the max_pages caps hold,
the counters are made once, and a crash cannot leave a request seen and never queued."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import RedisState
from crawltasks.frontier.queues import DUPLICATE, NEW, OVER_HOST_CAP, OVER_MAX_PAGES, Caps

from .test_bodies_contract import round_trips
from .test_hostqueues import req


class BloomCrawl:
    """A crawl of its own on the test Redis, deduped by a small Bloom filter."""

    def __init__(self, url: str) -> None:
        self.state = RedisState.from_url(url)
        self.frontier = RedisFrontier(self.state.r)
        self.crawl_id = f"bf-{uuid.uuid4().hex[:8]}"  # not registered: no dispatcher looks at it
        self.bloom = self.state.bloom_filter(self.crawl_id, capacity=10_000, error_rate=0.001)

    def add(self, urls: list[str], caps: Caps | None = None) -> list[int]:
        return self.frontier.add(self.crawl_id, [req(u) for u in urls], caps, bloom=self.bloom)

    def close(self) -> None:
        self.state.delete_crawl(self.crawl_id)
        self.state.r.close()


@pytest.fixture
def crawl(redis_url: str) -> Iterator[BloomCrawl]:
    c = BloomCrawl(redis_url)
    yield c
    c.close()


def test_new_requests_are_queued_once_and_counted_once(crawl):
    assert crawl.add(["http://a.test/1", "http://a.test/2", "http://a.test/1"]) == [NEW, NEW, DUPLICATE]
    assert crawl.add(["http://a.test/2"]) == [DUPLICATE]
    stats = crawl.state.stats(crawl.crawl_id)
    assert (stats["scheduled"], stats["pending"], stats["duplicates"]) == (2, 2, 2)
    assert crawl.frontier.sizes(crawl.crawl_id).queued == 2
    assert crawl.bloom.contains([req("http://a.test/1").fp]) == [True]
    assert not crawl.state.r.exists(Keys.seen(crawl.crawl_id))  # the filter is the seen-set, not a set beside it


def test_max_pages_caps_what_is_queued(crawl):
    flags = crawl.add([f"http://a.test/{i}" for i in range(8)], Caps(max_pages=5))
    assert flags == [NEW] * 5 + [OVER_MAX_PAGES] * 3
    stats = crawl.state.stats(crawl.crawl_id)
    assert (stats["scheduled"], stats["filtered_max_pages"]) == (5, 3)
    assert crawl.frontier.sizes(crawl.crawl_id).queued == 5
    # a page filtered by the cap was not marked seen: it is filtered again, not a duplicate
    assert crawl.add(["http://a.test/7"], Caps(max_pages=5)) == [OVER_MAX_PAGES]


def test_max_pages_per_host_caps_each_host(crawl):
    urls = [f"http://{host}.test/{i}" for host in ("a", "b") for i in range(3)]
    flags = crawl.add(urls, Caps(max_per_host=2))
    assert flags == [NEW, NEW, OVER_HOST_CAP, NEW, NEW, OVER_HOST_CAP]
    assert crawl.state.stats(crawl.crawl_id)["filtered_max_pages_per_host"] == 2


def test_a_dont_filter_request_is_queued_again(crawl):
    crawl.add(["http://a.test/1"])
    again = req("http://a.test/1", dont_filter=True)
    assert crawl.frontier.add(crawl.crawl_id, [again], bloom=crawl.bloom) == [NEW]
    assert crawl.frontier.sizes(crawl.crawl_id).queued == 2


def test_a_filter_made_with_other_parameters_is_refused(crawl):
    crawl.add(["http://a.test/1"])
    other = crawl.state.bloom_filter(crawl.crawl_id, capacity=99_000, error_rate=0.001)
    with pytest.raises(Exception, match="bloom filter"):
        crawl.frontier.add(crawl.crawl_id, [req("http://a.test/2")], bloom=other)


def test_scheduling_is_one_round_trip(crawl, monkeypatch):
    crawl.state.r.ping()  # the connection is made first (its handshake is not counted)
    crawl.add(["http://a.test/0"])  # the script is loaded
    sent = round_trips(monkeypatch)
    crawl.add([f"http://a.test/{i}" for i in range(1, 50)], Caps(max_pages=30, max_per_host=40))
    assert sent() == 1
