"""The CookieJars port's contract: every test runs on RedisCookieJars (the test Redis, crawls of its own)
and on MemoryCookieJars, its twin. Pinned here: no jar until a save, a version that every save bumps
(concurrent ones too), cookies replaced and deleted by field, jars of crawls apart."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from crawltasks.backends.memory.sites import MemoryCookieJars
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.sites import RedisCookieJars
from crawltasks.ports import CookieJars

from .helpers import MemorySide, RedisSide, assert_implements, one_side

A, B, C = "a.test\t/\tsession", "a.test\t/members\tarea", "b.test\t/\tsession"


class Twin(MemorySide):
    def __init__(self) -> None:
        self.jars: CookieJars = MemoryCookieJars()
        self.crawl_ids = [f"cj-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> CookieJars:
        return self.jars


class OnRedis(RedisSide):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.jars: CookieJars = RedisCookieJars(self.r)
        self.crawl_ids = [f"cj-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def handle(self) -> CookieJars:
        return RedisCookieJars(self.another_client())

    def test_keys(self) -> list[str]:
        return [Keys.cookies(c) for c in self.crawl_ids]


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def test_both_implement_every_method_of_the_port():
    assert_implements(CookieJars, RedisCookieJars, MemoryCookieJars)


def test_a_crawl_that_never_kept_a_cookie_has_no_jar(side):
    crawl = side.crawl_ids[0]
    assert side.jars.version(crawl) is None
    assert side.jars.load(crawl) == (None, {})


def test_saved_cookies_are_every_workers_with_a_new_version(side):
    crawl = side.crawl_ids[0]
    side.jars.save(crawl, {A: '{"name": "session"}', B: '{"name": "area"}'}, [])
    version, cookies = side.handle().load(crawl)
    assert cookies == {A: '{"name": "session"}', B: '{"name": "area"}'}
    assert version is not None and side.handle().version(crawl) == version


def test_every_save_moves_the_version_a_deletion_too(side):
    crawl = side.crawl_ids[0]
    seen = set()
    side.jars.save(crawl, {A: "1", B: "2"}, [])
    seen.add(side.jars.version(crawl))
    side.jars.save(crawl, {A: "1 again"}, [])  # replaced: the same field
    seen.add(side.jars.version(crawl))
    side.jars.save(crawl, {}, [B, "never.test\t/\tx"])  # an unknown field: ignored
    seen.add(side.jars.version(crawl))
    assert len(seen) == 3
    assert side.jars.load(crawl)[1] == {A: "1 again"}


def test_a_jar_emptied_by_deletions_still_has_its_version(side):
    crawl = side.crawl_ids[0]
    side.jars.save(crawl, {A: "1"}, [])
    side.jars.save(crawl, {}, [A])
    version, cookies = side.jars.load(crawl)
    assert cookies == {} and version is not None and version == side.jars.version(crawl)


def test_the_versions_count_the_saves_from_one(side):
    crawl = side.crawl_ids[0]
    side.jars.save(crawl, {A: "1"}, [])
    assert side.jars.version(crawl) == "1"
    side.jars.save(crawl, {}, [A])
    assert side.jars.version(crawl) == "2"


def test_concurrent_saves_each_count(side):
    crawl, handles = side.crawl_ids[0], [side.handle() for _ in range(8)]
    start = threading.Barrier(len(handles))

    def save(i: int, jars: CookieJars) -> None:
        start.wait()
        for j in range(5):
            jars.save(crawl, {f"h{i}.test\t/\tc{j}": str(j)}, [])

    threads = [threading.Thread(target=save, args=(i, h)) for i, h in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    version, cookies = side.jars.load(crawl)
    assert version == "40" and len(cookies) == 40


def test_jars_of_two_crawls_are_apart(side):
    mine, theirs = side.crawl_ids
    side.jars.save(mine, {A: "mine"}, [])
    side.jars.save(theirs, {A: "theirs", C: "theirs too"}, [])
    side.jars.save(theirs, {}, [A])
    assert side.jars.load(mine) == ("1", {A: "mine"})
    assert side.jars.load(theirs) == ("2", {C: "theirs too"})
