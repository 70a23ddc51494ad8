"""Per-process connections and caches, created on first use (so after a prefork worker forks).

Everything a process keeps between tasks hangs off its one ``Runtime``: a forked child, whose
``current()`` is a new one, never uses its parent's sockets, pools or caches. Tests and the
embedded mode point a process at other services with ``configure(settings)``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .backends.redis.bodies import RedisBodies
from .backends.redis.frontier import RedisFrontier
from .backends.redis.gate import RedisGate
from .backends.redis.registry import RedisState
from .frontier.schedule import KnownSeen
from .http.transport import PooledTransport
from .ports import BodyStore, HostGate, Sender, Transport
from .settings import CrawlOptions, Settings
from .spiders import Spider, SpiderNotFound, resolve_spider
from .storage.mongo import MongoStorage
from .worker.liveness import Fleet, Heartbeat

if TYPE_CHECKING:
    from protego import Protego

    from .http.guard import Allowance
    from .http.sessions import SharedJar
    from .stages.itempipes import Chain


@dataclass
class ProcessCaches:
    """What the process keeps in memory between tasks besides its connections, each bounded by the
    module that fills it. A runtime's: a forked child starts with none of its parent's (whose cookie
    jars hold the parent's Redis connections, whose item processors its open files), and a process
    pointed at other services (``configure``) starts afresh, what it learnt from one Redis being
    nothing to another."""

    robots: dict[str, tuple[float, Protego]] = field(default_factory=dict)  # origin -> (expires, rules)
    allowances: dict[int, tuple[object, Allowance]] = field(default_factory=dict)  # id(options) -> allowance
    chains: dict[str, Chain] = field(default_factory=dict)  # crawl -> its item processors, opened here
    chains_lock: threading.Lock = field(default_factory=threading.Lock)
    jars: dict[str, SharedJar] = field(default_factory=dict)  # crawl -> its cookie jar (crawltasks.http.sessions)
    jars_lock: threading.Lock = field(default_factory=threading.Lock)
    known: KnownSeen = field(default_factory=KnownSeen)  # links known seen (crawltasks.frontier.schedule)


@dataclass
class Runtime:
    settings: Settings
    pid: int = field(default_factory=os.getpid)
    _state: RedisState | None = None
    _storage: MongoStorage | None = None
    _options: dict[str, CrawlOptions] = field(default_factory=dict)
    _spiders: dict[str, Spider] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _frontier: RedisFrontier | None = None
    _bodies: BodyStore | None = None  # a twin may be put here (tests)
    _gate: HostGate | None = None
    _sender: Sender | None = None
    _heartbeat: Heartbeat | None = None  # a twin may be put here (tests), with one of the fleet:
    _fleet: Fleet | None = None
    _transport: Transport | None = None  # a twin may be put here (tests)
    caches: ProcessCaches = field(default_factory=ProcessCaches)  # robots rules, cookie jars, item chains, ...
    engine: Any = None  # this process's fetch engine, once a fetch task has come (crawltasks.stages.engine)

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        """The process's one ``name`` (a ``_name`` field), made on first use by one thread only; a
        twin put there beforehand (tests) stays. Callers try the field first: the hot path is one read."""
        with self._lock:
            if getattr(self, name) is None:
                setattr(self, name, make())
            return getattr(self, name)

    @property
    def state(self) -> RedisState:
        return self._state or self._once("_state", lambda: RedisState.from_url(self.settings.redis_url))

    @property
    def frontier(self) -> RedisFrontier:
        return self._frontier or self._once("_frontier", lambda: RedisFrontier(self.state.r))

    @property
    def bodies(self) -> BodyStore:
        """Where fetched bodies wait for parse and store (Redis, on the state's connections)."""
        return self._bodies or self._once("_bodies", lambda: RedisBodies(self.state.r))

    @property
    def gate(self) -> HostGate:
        """The per-host gate every worker shares (Redis, on the state's connections)."""
        return self._gate or self._once("_gate", lambda: RedisGate(self.state.r))

    @property
    def sender(self) -> Sender:
        """Where this process's work goes to the stage workers (Celery, on this process's broker
        connections); the dispatcher and the fetch engine send through it."""
        if self._sender is None:
            from .worker.sending import CelerySender  # the Celery side: loaded by a process that sends

            self._once("_sender", CelerySender)
        return self._sender

    @property
    def heartbeat(self) -> Heartbeat:
        """This process's heartbeat (started by whoever first claims work here)."""
        return self._heartbeat or self._once("_heartbeat", lambda: Heartbeat(self.state.r))

    @property
    def transport(self) -> Transport:
        """This process's HTTP transport: one pooled session shared by its fetch threads."""
        return self._transport or self._once("_transport", PooledTransport)

    def fleet(self) -> Fleet:
        """What every worker's heartbeat says (read anew each call)."""
        return self._fleet or Fleet(self.state.r)

    @property
    def storage(self) -> MongoStorage:
        return self._storage or self._once(
            "_storage", lambda: MongoStorage.from_url(self.settings.mongo_url, self.settings.mongo_db))

    def options(self, crawl_id: str) -> CrawlOptions:
        """A crawl's options, read from Redis once per process (they do not change during a crawl)."""
        opts = self._options.get(crawl_id)
        if opts is None:
            raw = self.state.crawl_options(crawl_id)
            if raw is None:
                raise LookupError(f"unknown crawl {crawl_id!r}")
            opts = CrawlOptions.from_dict(raw)
            if len(self._options) > 256:
                self._options.clear()
            self._options[crawl_id] = opts
        return opts

    def forget_options(self, crawl_id: str) -> CrawlOptions:
        """The crawl's options read again (its Redis state was rebuilt: ``crawltasks.storage.recovery``)."""
        self._options.pop(crawl_id, None)
        return self.options(crawl_id)

    def spider(self, crawl_id: str) -> Spider:
        """The crawl's spider, made once per process. SpiderNotFound when it cannot be imported or
        made (its constructor raised): the stages fail its requests ``spider_not_found``."""
        spider = self._spiders.get(crawl_id)
        if spider is None:
            opts = self.options(crawl_id)
            ref = opts.spider
            cls = resolve_spider(ref, self.settings.spider_modules, opts.spider_path)
            try:
                spider = cls(crawl_id=crawl_id, **opts.spider_args)
            except Exception as exc:  # noqa: BLE001 - user code
                raise SpiderNotFound(f"cannot make spider {ref!r}: {type(exc).__name__}: {exc}") from None
            if len(self._spiders) > 256:
                self._spiders.clear()
            self._spiders[crawl_id] = spider
        return spider

    def close(self) -> None:
        if self.engine is not None:
            self.engine.stop()
            self.engine = None
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._storage is not None:
            self._storage.close()
        if self._state is not None:
            self._state.r.close()
        if isinstance(self._transport, PooledTransport):
            self._transport.close()


_current: Runtime | None = None


def current() -> Runtime:
    """This process's runtime; rebuilt after a fork, since sockets cannot be shared."""
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = Runtime(Settings.from_env())
    return _current


def configure(settings: Settings) -> Runtime:
    """Point this process at other services (tests, embedded mode)."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = Runtime(settings)
    return _current
