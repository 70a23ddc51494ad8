"""What the store stage remembers in Redis besides the registry: each spider's page validators for
conditional re-crawls (the ``ValidatorStore`` port) and each crawl's claimed item keys (``ItemKeys``).
Twins: ``backends.memory.records``; contracts: ``tests/test_validators_contract.py``,
``tests/test_itemkeys_contract.py``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import redis

from ...ports import Validators
from .keys import Keys


class RedisValidators:
    """One hash per spider (``Keys.validators``): fp -> JSON [crawl id, ETag, Last-Modified, content
    hash]; each write restarts the hash's expiry."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def get(self, spider: str, fps: Sequence[str]) -> list[Validators | None]:
        if not fps:
            return []
        rows = self.r.hmget(Keys.validators(spider), list(fps))
        return [None if row is None else Validators(*json.loads(row)) for row in rows]

    def put(self, spider: str, pages: Mapping[str, Validators], keep: int) -> None:
        if not pages:
            return
        key = Keys.validators(spider)
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping={fp: json.dumps(list(row)) for fp, row in pages.items()})
        pipe.expire(key, keep)
        pipe.execute()


class RedisItemKeys:
    """One hash per crawl (``Keys.item_keys``, retired with the crawl's working state): key -> the
    owner that claimed it, set with HSETNX."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def claim(self, crawl_id: str, key: str, owner: str) -> str | None:
        name = Keys.item_keys(crawl_id)
        if self.r.hsetnx(name, key, owner):
            return None
        first = self.r.hget(name, key)
        return "" if first is None else first.decode()  # None: the crawl's keys expired meanwhile

    def count(self, crawl_id: str) -> int:
        return int(self.r.hlen(Keys.item_keys(crawl_id)))
