"""Small helpers the tests share, written once: a free port, waiting for a condition instead of sleeping,
and a redis-server of a test's own for the tests that must stop and start their Redis."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import redis

from crawltasks.local.embedded import free_port  # the embedded mode's own: the kernel picks the port

T = TypeVar("T")


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
