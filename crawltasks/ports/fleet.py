"""The ports of the workers working together: ``Sender``, how work reaches the stage workers;
``Outages``, the services some worker cannot reach; ``LeaderLock``, one process leading (the dispatcher);
``Heartbeat`` and ``Fleet``, which workers are alive (their claims and slots are theirs while they are)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self

from ..frontier.queues import Entry
from ..models import Fetched


class Sender(Protocol):
    """How work leaves a process for the stage workers: one broker message a call, on the queue the
    routes of ``celeryconfig`` give its task. JSON only: what Celery's JSON cannot carry raises
    ``kombu.exceptions.EncodeError`` and nothing is sent; what arrives is what JSON makes of it."""

    def send_batch(self, crawl_id: str, priority: str, batch: Sequence[Entry]) -> None:
        """One fetch task for requests taken from the frontier, on the fetch queue of ``priority``;
        the entries travel as the frontier keeps them (lease and encoded request)."""
        ...

    def send_results(self, crawl_id: str, results: Sequence[Fetched]) -> None:
        """One parse -> store chain for fetched requests of a crawl (their bodies stay parked)."""
        ...


class Outages(Protocol):
    """Which services some worker cannot reach now, and since when (epoch seconds), shared by the
    fleet: ``stats``, ``list`` and the progress line say what a crawl waits for. Services are named
    as people read them ("MongoDB")."""

    def record(self, service: str) -> None:
        """A worker could not reach ``service``: it is down since now, unless known down already."""
        ...

    def clear(self, service: str) -> None:
        """``service`` answers again."""
        ...

    def current(self) -> dict[str, float]:
        """Service -> since when it is down, for every service known down."""
        ...

    def ping(self) -> None:
        """Raise if the store that keeps this table does not answer (the dashboard's /healthz)."""
        ...


class LeaderLock(Protocol):
    """Named locks held by one process at a time for a short TTL, renewed while it leads (the
    dispatcher): a holder that dies is replaced once its TTL runs out, one that stops lets go."""

    def hold(self, name: str, holder: str, ttl: float) -> bool:
        """Take the lock if it is free or ``holder``'s already, and (re)start its TTL of ``ttl``
        seconds, atomically; True if ``holder`` holds it now."""
        ...

    def release(self, name: str, holder: str) -> bool:
        """Let the lock go if ``holder`` holds it, atomically; True if it did."""
        ...

    def holder(self, name: str) -> str | None:
        """Who holds the lock now (None: nobody)."""
        ...


class Heartbeat(Protocol):
    """This process in the workers' table: its id (what its claims and host slots are held under) and
    the fetch capacity it offers (0: it fetches nothing)."""

    id: str
    capacity: int

    def start(self) -> Self:
        """Be in the table from now on (once per process: later calls do nothing)."""
        ...

    def offer(self, capacity: int) -> None:
        """Announce how many requests this process's fetch engine takes at once."""
        ...

    def beat(self) -> None:
        """Say now that this process is alive."""
        ...

    def stop(self) -> None:
        """Leave the table at once (a clean shutdown): nothing of this process is held any more."""
        ...


class Fleet(Protocol):
    """What the heartbeats say, and the supervisor's word on processes it knows are dead."""

    def read(self) -> tuple[set[str], int]:
        """The ids of the live workers, and the fetch capacity they offer together."""
        ...

    def forget_process(self, pid: int) -> list[str]:
        """The worker process ``pid`` of this machine is dead (its supervisor reaped it): its ids leave
        the table, and the dispatcher's lock if one of them held it. Returns those ids."""
        ...

    def forget_all(self) -> None:
        """Every worker in the table is dead (a private Redis whose command died): the table and the
        dispatcher's lock are emptied at once."""
        ...
