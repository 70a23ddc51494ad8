"""Small helpers the tests share, written once: a free port, waiting for a condition instead of sleeping,
a redis-server of a test's own for the tests that must stop and start their Redis, and what the
contract suites of the ports share (time passing for Redis' TTLs, a port's methods compared, the Redis
side's clients and clean-up, the ``side`` fixture that runs each test on both sides)."""

from __future__ import annotations

import inspect
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
import redis

from crawltasks.local.embedded import free_port  # the embedded mode's own: the kernel picks the port

T = TypeVar("T")


def age_keys(client: redis.Redis, keys: list[str], seconds: float) -> None:
    """Time passing as Redis' TTLs see it, without waiting: each of ``keys`` that has a TTL loses
    ``seconds`` of it (gone at 0); keys without a TTL, or absent, stay as they are."""
    for key in keys:
        left = client.pttl(key)
        if left > 0:
            left -= int(seconds * 1000)
            client.pexpire(key, left) if left > 0 else client.delete(key)


def port_methods(port: type) -> list[str]:
    """The public methods a Protocol names."""
    return [n for n, v in vars(port).items() if inspect.isfunction(v) and not n.startswith("_")]


def assert_implements(port: type, *impls: type) -> None:
    """Each of ``impls`` has every method of ``port``, with the same parameters."""
    for name in port_methods(port):
        want = list(inspect.signature(getattr(port, name)).parameters)
        for impl in impls:
            assert list(inspect.signature(getattr(impl, name)).parameters) == want, (impl, name)


class Closing(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Closing)


class MemorySide:
    """The base of a port's in-memory twin in a contract suite: nothing to clean up."""

    def close(self) -> None:
        pass


class RedisSide:
    """The base of a port's Redis side in a contract suite: the client ``r`` on the test Redis, the
    further clients ``another_client()`` opens (another worker's), and ``close()``, which deletes
    ``test_keys()`` and closes every client."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.r = redis.Redis.from_url(url)
        self.clients: list[redis.Redis] = []

    def another_client(self) -> redis.Redis:
        """One more client on the same Redis, closed with the others."""
        self.clients.append(redis.Redis.from_url(self.url))
        return self.clients[-1]

    def test_keys(self) -> list[str]:
        """The keys the test made, deleted by ``close()``; each suite names its own."""
        return []

    def close(self) -> None:
        keys = self.test_keys()
        if keys:
            self.r.delete(*keys)
        for client in [self.r, *self.clients]:
            client.close()


def one_side(request: pytest.FixtureRequest, url: str, twin: Callable[[], S],
             on_redis: Callable[[str], S]) -> Iterator[S]:
    """The body of a contract suite's ``side`` fixture, parametrised ["memory", "redis"]: the twin or the
    Redis side on ``url``, closed after the test (``yield from one_side(...)``)."""
    impl = twin() if request.param == "memory" else on_redis(url)
    yield impl
    impl.close()


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; returns its last answer as a bool,
    so that callers write ``assert wait_for(...), <what was expected>``. Waiting for the event itself is
    both faster and sturdier than a sleep sized for a slow machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def settled(read: Callable[[], T], hold: float, timeout: float, what: str, interval: float = 0.1) -> T:
    """The value ``read()`` gives once it has not changed for ``hold`` seconds (work already under way,
    such as the batches a paused crawl was fetching, has landed). Raises AssertionError naming ``what``
    if it keeps changing for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= hold:
            return now
    raise AssertionError(f"{what} never held still for {hold}s within {timeout}s: last {last!r}")


class OwnRedis:
    """A redis-server of the test's own on a free port, for tests that stop and start their Redis (which
    nobody may do to the shared test Redis). ``persistent`` keeps an append-only file, so the data
    survives a restart; without it the server comes back empty."""

    def __init__(self, workdir: Path, persistent: bool = True) -> None:
        self.port = free_port()
        self.dir = workdir
        self.persistent = persistent
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        keep = (["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"]
                if self.persistent else ["--appendonly", "no"])
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--save", "", *keep], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(self.ping, timeout=10), f"redis-server on port {self.port} did not start"

    def ping(self) -> bool:
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): with ``persistent`` the append-only file is complete."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
