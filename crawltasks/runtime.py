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

from .backends.wiring import Wiring
from .frontier.known import KnownSeen
from .ports import (
    BodyStore,
    CookieJars,
    CrawlActivity,
    CrawlRegistry,
    Fleet,
    Frontier,
    Heartbeat,
    HostGate,
    ItemKeys,
    LeaderLock,
    Outages,
    RobotsCache,
    Sender,
    Storage,
    Transport,
    ValidatorStore,
)
from .settings import CrawlOptions, Settings
from .spiders import Spider, SpiderNotFound, resolve_spider

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
    known: KnownSeen = field(default_factory=KnownSeen)  # links known seen (crawltasks.frontier.known)


@dataclass
class Runtime:
    """The process's ports, each made on first use by ``Wiring`` (Redis, MongoDB, requests, Celery),
    unless a twin was put in its field beforehand (tests: ``backends.memory.runtime.twin_runtime``)."""

    settings: Settings
    pid: int = field(default_factory=os.getpid)
    _state: CrawlRegistry | None = None
    _storage: Storage | None = None
    _options: dict[str, CrawlOptions] = field(default_factory=dict)
    _spiders: dict[str, Spider] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _frontier: Frontier | None = None
    _bodies: BodyStore | None = None
    _gate: HostGate | None = None
    _sender: Sender | None = None
    _heartbeat: Heartbeat | None = None  # a twin may be put here (tests), with one of the fleet:
    _fleet: Fleet | None = None
    _transport: Transport | None = None
    _robots: RobotsCache | None = None
    _cookies: CookieJars | None = None
    _validators: ValidatorStore | None = None
    _item_keys: ItemKeys | None = None
    _outages: Outages | None = None
    _leader: LeaderLock | None = None
    _wiring: Wiring | None = None  # the real ports' maker, once one was needed
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
    def wiring(self) -> Wiring:
        """Where this process's real ports are made (the services its settings name)."""
        return self._wiring or self._once("_wiring", lambda: Wiring(self.settings))

    @property
    def state(self) -> CrawlRegistry:
        """Every crawl's record, state and counters."""
        return self._state or self._once("_state", lambda: self.wiring.registry())

    @property
    def activity(self) -> CrawlActivity:
        """The monitor's reads of the crawls' progress (time series, per-host outcomes, hosts, the
        clock they keep): the registry's own, Redis' or the twin's."""
        state = self.state
        if not isinstance(state, CrawlActivity):
            raise TypeError(f"the crawl registry {type(state).__name__} keeps no activity")
        return state

    @property
    def frontier(self) -> Frontier:
        return self._frontier or self._once("_frontier", lambda: self.wiring.frontier())

    @property
    def bodies(self) -> BodyStore:
        """Where fetched bodies wait for parse and store."""
        return self._bodies or self._once("_bodies", lambda: self.wiring.bodies())

    @property
    def gate(self) -> HostGate:
        """The per-host gate every worker shares."""
        return self._gate or self._once("_gate", lambda: self.wiring.gate())

    @property
    def sender(self) -> Sender:
        """Where this process's work goes to the stage workers; the dispatcher and the fetch engine
        send through it."""
        return self._sender or self._once("_sender", lambda: self.wiring.sender())

    @property
    def heartbeat(self) -> Heartbeat:
        """This process's heartbeat (started by whoever first claims work here)."""
        return self._heartbeat or self._once("_heartbeat", lambda: self.wiring.heartbeat())

    @property
    def transport(self) -> Transport:
        """This process's HTTP transport: one pooled session shared by its fetch threads."""
        return self._transport or self._once("_transport", lambda: self.wiring.transport())

    def fleet(self) -> Fleet:
        """What every worker's heartbeat says (read anew each call)."""
        return self._fleet or self.wiring.fleet()

    @property
    def storage(self) -> Storage:
        return self._storage or self._once("_storage", lambda: self.wiring.storage())

    @property
    def robots(self) -> RobotsCache:
        """robots.txt texts every worker shares, and their download locks (``http.robots``)."""
        return self._robots or self._once("_robots", lambda: self.wiring.robots())

    @property
    def cookies(self) -> CookieJars:
        """Every crawl's cookie jar (``http.sessions``)."""
        return self._cookies or self._once("_cookies", lambda: self.wiring.cookies())

    @property
    def validators(self) -> ValidatorStore:
        """Page validators for conditional re-crawls (``frontier.revisit``)."""
        return self._validators or self._once("_validators", lambda: self.wiring.validators())

    @property
    def item_keys(self) -> ItemKeys:
        """The item keys each crawl's ``Dedupe`` claimed (``items``)."""
        return self._item_keys or self._once("_item_keys", lambda: self.wiring.item_keys())

    @property
    def outages(self) -> Outages:
        """Services some worker cannot reach now (``monitor.health``)."""
        return self._outages or self._once("_outages", lambda: self.wiring.outages())

    @property
    def leader(self) -> LeaderLock:
        """Leader locks: the dispatcher's (``frontier.dispatcher``)."""
        return self._leader or self._once("_leader", lambda: self.wiring.leader())

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
        if self._wiring is not None:
            self._wiring.close()


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
