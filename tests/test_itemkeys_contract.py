"""The ItemKeys port's contract: every test runs on RedisItemKeys (the test Redis, crawls of its own) and
on MemoryItemKeys, its twin. Pinned here: the first claim of a key wins and later ones are told its
owner (a replay of the same owner recognises itself), across threads; counts; crawls apart."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from crawltasks.backends.memory.records import MemoryItemKeys
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.records import RedisItemKeys
from crawltasks.ports import ItemKeys

from .helpers import MemorySide, RedisSide, assert_implements, one_side


class Twin(MemorySide):
    def __init__(self) -> None:
        self.keys: ItemKeys = MemoryItemKeys()
        self.crawl_ids = [f"ik-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> ItemKeys:
        return self.keys


class OnRedis(RedisSide):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.keys: ItemKeys = RedisItemKeys(self.r)
        self.crawl_ids = [f"ik-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> ItemKeys:
        return RedisItemKeys(self.another_client())

    def test_keys(self) -> list[str]:
        return [Keys.item_keys(c) for c in self.crawl_ids]


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def test_both_implement_every_method_of_the_port():
    assert_implements(ItemKeys, RedisItemKeys, MemoryItemKeys)


def test_the_first_claim_wins_and_later_ones_learn_its_owner(side):
    crawl = side.crawl_ids[0]
    assert side.keys.claim(crawl, "k1", "fp-a") is None
    assert side.handle().claim(crawl, "k1", "fp-b") == "fp-a"
    assert side.keys.claim(crawl, "k1", "fp-a") == "fp-a"  # the same item delivered again
    assert side.keys.claim(crawl, "k2", "fp-b") is None


def test_an_owner_without_fingerprint_is_told_as_empty(side):
    crawl = side.crawl_ids[0]
    assert side.keys.claim(crawl, "k1", "") is None
    assert side.keys.claim(crawl, "k1", "fp-a") == ""


def test_claims_are_counted_per_crawl(side):
    mine, theirs = side.crawl_ids
    assert side.keys.count(mine) == 0
    for key, owner in (("k1", "a"), ("k2", "b"), ("k1", "c")):
        side.keys.claim(mine, key, owner)
    assert side.keys.claim(theirs, "k1", "z") is None  # another crawl's key of the same name
    assert side.keys.count(mine) == 2 and side.keys.count(theirs) == 1


def test_of_many_threads_one_claims_a_key(side):
    crawl, handles = side.crawl_ids[0], [side.handle() for _ in range(8)]
    start, answers = threading.Barrier(len(handles)), {}

    def claim(i: int, keys: ItemKeys) -> None:
        start.wait()
        answers[i] = keys.claim(crawl, "k", f"fp-{i}")

    threads = [threading.Thread(target=claim, args=(i, h)) for i, h in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [winner] = [i for i, first in answers.items() if first is None]
    assert all(first == f"fp-{winner}" for i, first in answers.items() if i != winner)
    assert side.keys.count(crawl) == 1
