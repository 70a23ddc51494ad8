"""The ValidatorStore port's contract: every test runs on RedisValidators (the test Redis, spiders of its
own) and on MemoryValidators, its twin, with a clock the test moves. Pinned here: validators by
fingerprint in the order asked, replaced per page, spiders apart, and the expiry every write restarts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from crawltasks.backends.memory.records import MemoryValidators
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.records import RedisValidators
from crawltasks.ports import Validators, ValidatorStore

from .helpers import MemorySide, RedisSide, age_keys, assert_implements, one_side
from .test_hostqueues import FakeClock

PAGE1 = Validators("crawl-1", '"etag-1"', "Wed, 21 Oct 2015 07:28:00 GMT", "sha1-1")
PAGE2 = Validators("crawl-1", None, None, "sha1-2")  # a server that sends no validators


class Twin(MemorySide):
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store: ValidatorStore = MemoryValidators(self.clock)
        self.spiders = [f"vs-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds


class OnRedis(RedisSide):
    """RedisValidators on the test Redis; time passing is the TTLs of the test's spiders running down."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.store: ValidatorStore = RedisValidators(self.r)
        self.spiders = [f"vs-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def advance(self, seconds: float) -> None:
        age_keys(self.r, self.test_keys(), seconds)

    def test_keys(self) -> list[str]:
        return [Keys.validators(s) for s in self.spiders]


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, redis_url, Twin, OnRedis)


def test_both_implement_every_method_of_the_port():
    assert_implements(ValidatorStore, RedisValidators, MemoryValidators)


def test_validators_come_back_in_the_order_asked_none_where_unknown(side):
    spider = side.spiders[0]
    assert side.store.get(spider, []) == []
    assert side.store.get(spider, ["fp1"]) == [None]
    side.store.put(spider, {"fp1": PAGE1, "fp2": PAGE2}, keep=3600)
    got = side.store.get(spider, ["fp2", "nope", "fp1"])
    assert got == [PAGE2, None, PAGE1]
    assert isinstance(got[0], Validators) and got[2].etag == '"etag-1"' and got[0].last_modified is None


def test_a_page_written_again_is_replaced_the_others_stay(side):
    spider = side.spiders[0]
    side.store.put(spider, {"fp1": PAGE1, "fp2": PAGE2}, keep=3600)
    newer = PAGE1._replace(crawl_id="crawl-2", etag='"etag-1b"')
    side.store.put(spider, {"fp1": newer}, keep=3600)
    assert side.store.get(spider, ["fp1", "fp2"]) == [newer, PAGE2]


def test_nothing_to_write_is_no_call(side):
    side.store.put(side.spiders[0], {}, keep=3600)
    assert side.store.get(side.spiders[0], ["fp1"]) == [None]


def test_spiders_are_apart(side):
    mine, theirs = side.spiders
    side.store.put(mine, {"fp1": PAGE1}, keep=3600)
    assert side.store.get(theirs, ["fp1"]) == [None]


def test_a_spiders_validators_expire_together_keep_seconds_after_their_last_write(side):
    spider = side.spiders[0]
    side.store.put(spider, {"fp1": PAGE1}, keep=100)
    side.advance(90)
    side.store.put(spider, {"fp2": PAGE2}, keep=100)  # restarts the expiry of all of them
    side.advance(90)
    assert side.store.get(spider, ["fp1", "fp2"]) == [PAGE1, PAGE2]
    side.advance(11)
    assert side.store.get(spider, ["fp1", "fp2"]) == [None, None]


def test_redis_keeps_them_as_json_rows_under_the_spiders_key(redis_url):
    r, spider = redis.Redis.from_url(redis_url), f"vs-{uuid.uuid4().hex[:8]}"
    try:
        RedisValidators(r).put(spider, {"fp1": PAGE1}, keep=3600)
        assert Keys.validators(spider) == f"ct:visited:{spider}:validators"
        assert json.loads(r.hget(Keys.validators(spider), "fp1")) == list(PAGE1)
        assert 3_599_000 < r.pttl(Keys.validators(spider)) <= 3_600_000
    finally:
        r.delete(Keys.validators(spider))
        r.close()
