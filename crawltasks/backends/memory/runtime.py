"""A whole process context on the twins: ``twin_runtime()`` assembles a ``Runtime`` whose ports are
the in-memory twins (as Scrapy's ``get_crawler(settings)`` does for its object graph), so the real
start_crawl, stages and frontier code runs with no Redis, no MongoDB, no broker and no socket."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from ...ports import Transport
from ...runtime import Runtime
from ...settings import CrawlOptions, Settings
from .bodies import MemoryBodies
from .frontier import MemoryFrontier
from .gate import MemoryGate
from .liveness import MemoryFleet, MemoryHeartbeat
from .registry import MemoryRegistry
from .sender import MemorySender
from .storage import MemoryStorage
from .transport import MockTransport

NOWHERE = "memory://"  # the services a twin runtime names: none, so nothing can connect by mistake


def twin_runtime(transport: Transport | None = None, *, settings: Settings | None = None,
                 clock: Callable[[], float] = time.monotonic, capacity: int = 64,
                 options: Mapping[str, CrawlOptions] | None = None) -> Runtime:
    """A Runtime on the twins: registry sharing the frontier's counters and seen-sets, gate, bodies,
    storage, a sender that records, ``transport`` (default: a site where every path is 404), and this
    process as the whole fleet offering ``capacity`` fetches. ``clock`` times the frontier, gate and
    bodies (a test's fake clock moves them); ``options`` registers running crawls of those options."""
    frontier, gate = MemoryFrontier(clock), MemoryGate(clock)
    heartbeat = MemoryHeartbeat(gate.beats, clock)
    heartbeat.offer(capacity)
    rt = Runtime(settings or Settings(redis_url=NOWHERE, mongo_url=NOWHERE, fetch_concurrency=capacity),
                 _state=MemoryRegistry(frontier=frontier), _storage=MemoryStorage(), _frontier=frontier,
                 _bodies=MemoryBodies(clock), _gate=gate, _sender=MemorySender(), _heartbeat=heartbeat,
                 _fleet=MemoryFleet(heartbeat), _transport=transport or MockTransport.site({}))
    for crawl_id, opts in (options or {}).items():
        rt.state.create_crawl(crawl_id, opts.to_dict(), [])
    return rt
