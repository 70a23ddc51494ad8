"""The ports: what the stages need from the world, as small Protocols, one module per concern.

Each has its shared implementation (Redis, MongoDB, requests) and an in-memory twin in
``crawltasks.backends.memory``; one contract suite per port runs against both, so a test of a
policy on the twin says what the real thing does. Every name is importable from here.

- ``Frontier`` (``frontier.py``): scheduled requests per host, readiness, claims. Real:
  ``backends.redis.frontier.RedisFrontier``; twin: ``backends.memory.frontier.MemoryFrontier``; contract:
  ``tests/test_hostqueues.py``.
- ``Transport`` (``fetching.py``): one prepared request sent, its response back. Real:
  ``transport.PooledTransport``; twin: ``backends.memory.transport.MockTransport``; contract:
  ``tests/test_transport_contract.py``.
- ``Storage`` (``storing.py``): pages, items and failure records, one document per (crawl_id, fp), and
  one record per crawl. Real: ``store.MongoStorage``; twin: ``backends.memory.storage.MemoryStorage``;
  contract: ``tests/test_storage_contract.py``.
- ``BodyStore`` (``storing.py``): fetched bodies parked for their parse and store tasks, with a TTL.
  Real: ``backends.redis.bodies.RedisBodies``; twin: ``backends.memory.bodies.MemoryBodies``;
  contract: ``tests/test_bodies_contract.py``.
- ``HostGate`` (``gate.py``): every worker's slots of a host, its delay and back-off. Real:
  ``backends.redis.gate.RedisGate``; twin: ``backends.memory.gate.MemoryGate``; contract:
  ``tests/test_gate_contract.py``. (``politeness.CrawlGate`` is one crawl's use of it.)
- ``CrawlRegistry`` (``registry.py``): every crawl's record, state, counters, completion, dedupe
  reads, retention, visits and notification marks. Real: ``backends.redis.registry.RedisState``;
  twin: ``backends.memory.registry.MemoryRegistry``; contract: ``tests/test_registry_contract.py``.
- ``CrawlActivity`` (``registry.py``): the monitor's reads of what completion records (time series,
  per-host outcomes, hosts). Both registries implement it (``Runtime.activity``); contract:
  ``tests/test_activity_contract.py``.
- ``Sender`` (``fleet.py``): work handed to the stage workers: fetch batches, parse -> store chains.
  Real: ``sending.CelerySender``; twin: ``backends.memory.sender.MemorySender``; contract:
  ``tests/test_sender_contract.py``. A process has one (``Runtime.sender``).

What workers share besides: ``RobotsCache`` and ``CookieJars`` (``fetching.py``), ``ValidatorStore`` and
``ItemKeys`` (``storing.py``), ``Outages``, ``LeaderLock``, ``Heartbeat`` and ``Fleet`` (``fleet.py``).
Real: in ``backends.redis.sites``, ``backends.redis.records``, ``backends.redis.fleet`` and
``backends.redis.liveness``; twins: the modules of the same names in ``backends.memory``; contracts:
``tests/test_<port>_contract.py`` (robots, cookies, validators, itemkeys, outages, leader, liveness).
A process reaches each through its ``Runtime`` (``rt.robots``, ``rt.cookies``, ``rt.validators``,
``rt.item_keys``, ``rt.outages``, ``rt.leader``, ``rt.heartbeat``, ``rt.fleet()``).
"""

from __future__ import annotations

from .fetching import CookieJars, RobotsCache, Transport
from .fleet import Fleet, Heartbeat, LeaderLock, Outages, Sender
from .frontier import Frontier
from .gate import Grant, HostGate, HostLoad, SlotRequest
from .registry import CrawlActivity, CrawlRegistry, SeenFilter
from .storing import BodyStore, ItemKeys, Storage, Validators, ValidatorStore

__all__ = ["BodyStore", "CookieJars", "CrawlActivity", "CrawlRegistry", "Fleet", "Frontier", "Grant", "Heartbeat",
           "HostGate", "HostLoad", "ItemKeys", "LeaderLock", "Outages", "RobotsCache", "SeenFilter", "Sender",
           "SlotRequest", "Storage", "Transport", "ValidatorStore", "Validators"]
