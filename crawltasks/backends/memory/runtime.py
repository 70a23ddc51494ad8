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
from .fleet import MemoryLeaderLock, MemoryOutages
from .frontier import MemoryFrontier
from .gate import MemoryGate
from .liveness import MemoryFleet, MemoryHeartbeat
from .records import MemoryItemKeys, MemoryValidators
from .registry import MemoryRegistry
from .sender import MemorySender
from .sites import MemoryCookieJars, MemoryRobots
from .storage import MemoryStorage
from .transport import MockTransport

NOWHERE = "memory://"  # the services a twin runtime names: none, so nothing can connect by mistake


def twin_runtime(transport: Transport | None = None, *, settings: Settings | None = None,
                 clock: Callable[[], float] = time.monotonic, capacity: int = 64,
                 options: Mapping[str, CrawlOptions] | None = None) -> Runtime:
    """A Runtime on the twins: registry sharing the frontier's counters and seen-sets, gate, bodies,
    storage, robots.txt texts, cookie jars, validators, item keys, outages, leader locks, a sender that
    records, ``transport`` (default: a site where every path is 404), and this process as the whole
    fleet offering ``capacity`` fetches. ``clock`` times the frontier, gate, bodies, robots.txt texts,
    validators and leader locks (a test's fake clock moves them; the registry and the outage table
    keep epoch seconds); ``options`` registers running crawls of those options."""
    frontier, gate = MemoryFrontier(clock), MemoryGate(clock)
    heartbeat, leader = MemoryHeartbeat(gate.beats, clock), MemoryLeaderLock(clock)
    heartbeat.offer(capacity)
    rt = Runtime(settings or Settings(redis_url=NOWHERE, mongo_url=NOWHERE, fetch_concurrency=capacity),
                 _state=MemoryRegistry(frontier=frontier), _storage=MemoryStorage(), _frontier=frontier,
                 _bodies=MemoryBodies(clock), _gate=gate, _sender=MemorySender(), _heartbeat=heartbeat,
                 _fleet=MemoryFleet(heartbeat, leader=leader), _transport=transport or MockTransport.site({}),
                 _robots=MemoryRobots(clock), _cookies=MemoryCookieJars(), _validators=MemoryValidators(clock),
                 _item_keys=MemoryItemKeys(), _outages=MemoryOutages(), _leader=leader)
    for crawl_id, opts in (options or {}).items():
        rt.state.create_crawl(crawl_id, opts.to_dict(), [])
    return rt
