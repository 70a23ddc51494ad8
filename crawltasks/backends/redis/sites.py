"""What every worker shares about the sites it fetches, in Redis: robots.txt texts with their fetch
lock (the ``RobotsCache`` port) and each crawl's cookie jar (``CookieJars``). Twins:
``backends.memory.sites``; contracts: ``tests/test_robots_contract.py``, ``tests/test_cookies_contract.py``."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from .keys import Keys

VERSION = "v"  # the jar hash's field that counts its changes (a cookie's field is "domain\tpath\tname")


class RedisRobots:
    """robots.txt texts as strings with a TTL (``Keys.robots``); the download lock is SET NX EX."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def text(self, origin: str) -> str | None:
        found = self.r.get(Keys.robots(origin))
        return None if found is None else found.decode("utf-8", "replace")

    def put(self, origin: str, text: str, ttl: int) -> None:
        self.r.set(Keys.robots(origin), text, ex=ttl)

    def lock(self, origin: str, ttl: int) -> bool:
        return bool(self.r.set(Keys.robots_lock(origin), "1", nx=True, ex=ttl))

    def unlock(self, origin: str) -> None:
        self.r.delete(Keys.robots_lock(origin))


class RedisCookieJars:
    """A crawl's jar is one hash (``Keys.cookies``): its cookies, and ``VERSION`` bumped by HINCRBY in
    the MULTI that writes them. Reading the version alone is one HGET; the jar, one HGETALL."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def version(self, crawl_id: str) -> str | None:
        found = self.r.hget(Keys.cookies(crawl_id), VERSION)
        return None if found is None else found.decode()

    def load(self, crawl_id: str) -> tuple[str | None, dict[str, str]]:
        fields = {k.decode(): v.decode() for k, v in self.r.hgetall(Keys.cookies(crawl_id)).items()}
        return fields.pop(VERSION, None), fields

    def save(self, crawl_id: str, cookies: dict[str, str], deleted: Sequence[str]) -> None:
        key = Keys.cookies(crawl_id)
        pipe = self.r.pipeline(transaction=True)
        if cookies:
            pipe.hset(key, mapping=cookies)
        if deleted:
            pipe.hdel(key, *deleted)
        pipe.hincrby(key, VERSION, 1)
        pipe.execute()
