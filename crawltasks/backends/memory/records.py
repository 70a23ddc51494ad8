"""What the store stage remembers besides the registry, in memory: the twins of
``backends.redis.records`` (``ValidatorStore``, ``ItemKeys``; contracts:
``tests/test_validators_contract.py``, ``tests/test_itemkeys_contract.py``). Validators expire on
``clock`` (seconds). A crawl's item keys stay for the process's life (Redis retires them with the
crawl's working state: nothing reads them after). Thread-safe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ...ports import Validators


class MemoryValidators:
    """Spider -> (fp -> validators, expiry of them all)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.spiders: dict[str, tuple[dict[str, Validators], float]] = {}
        self._lock = threading.Lock()

    def _rows(self, spider: str) -> dict[str, Validators]:
        rows, until = self.spiders.get(spider, ({}, 0.0))
        if self.clock() >= until:
            self.spiders.pop(spider, None)
            return {}
        return rows

    def get(self, spider: str, fps: Sequence[str]) -> list[Validators | None]:
        with self._lock:
            rows = self._rows(spider)
            return [rows.get(fp) for fp in fps]

    def put(self, spider: str, pages: Mapping[str, Validators], keep: int) -> None:
        if not pages:
            return
        if keep <= 0:  # Redis would let the hash go at once
            raise ValueError(f"invalid keep {keep!r}")
        with self._lock:
            rows = {**self._rows(spider), **{fp: Validators(*row) for fp, row in pages.items()}}
            self.spiders[spider] = (rows, self.clock() + keep)


class MemoryItemKeys:
    """Crawl -> (key -> owner)."""

    def __init__(self) -> None:
        self.crawls: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def claim(self, crawl_id: str, key: str, owner: str) -> str | None:
        with self._lock:
            keys = self.crawls.setdefault(crawl_id, {})
            if key in keys:
                return keys[key]
            keys[key] = owner
            return None

    def count(self, crawl_id: str) -> int:
        with self._lock:
            return len(self.crawls.get(crawl_id, {}))
