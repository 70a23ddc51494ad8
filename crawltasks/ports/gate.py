"""The politeness gate's port: ``HostGate``, every worker's slots of a host, and what one asks and gets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol


@dataclass(frozen=True)
class SlotRequest:
    """Up to ``want`` slots of ``host`` under its limits: at most ``limit`` in flight, ``delay``
    seconds between starts; a slot not given back is freed after ``lease`` seconds."""

    host: str
    want: int
    limit: int
    delay: float
    lease: float = 120.0


class Grant(NamedTuple):
    """The answer to one ``SlotRequest``."""

    tokens: list[str]  # the slots granted: give each back with its host
    wait: float  # seconds to wait before asking again, when none was granted
    backoff: float  # the host's extra delay in seconds (only a backed-off host is told of good answers)
    next_start: float = 0.0  # with a delay: the host's next start this grant set (gate's clock, seconds)


class HostLoad(NamedTuple):
    """How a host's gate looks now (the monitor's hosts table)."""

    in_flight: int  # slots held and not expired
    wait: float  # seconds until the next start may be granted (0: now)
    backoff: float  # extra seconds between starts after 429/503 answers


class HostGate(Protocol):
    """The politeness gate of every host, shared by every worker and crawl: a start needs a slot.

    A host has at most ``limit`` slots held; with a delay (the request's, plus the back-off) one slot
    at a time is granted and the next not before ``delay`` later. A slot ends when given back, when
    its lease runs out, or, taken for an ``owner`` (tokens "<owner>|..."), when the host is full and
    that owner has not beaten its heartbeat for ``dead_after`` seconds. A slow answer (429/503)
    doubles the host's back-off (1 s to 5 min) and holds the host for it (or the Retry-After); good
    answers halve it, it is gone under 0.1 s and ten times its length (10 s at least) after the last
    slow answer. Times are the gate's own clock. The convenience methods below are built on
    ``exchange``; implementations inherit them."""

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest],
                 owner: str = "", dead_after: float = 10.0,
                 started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        """Tell of (host, delay) starts that happened only now (each as ``started``), give back (host,
        token) slots, then answer each request in turn, all in one call: a start told here holds back
        every grant of its host from this call on."""
        ...

    def feedback(self, host: str, slow: bool, wait: float = 0.0) -> float:
        """How the host answered (slow: 429/503, ``wait`` its Retry-After); returns its back-off in s."""
        ...

    def started(self, host: str, delay: float) -> None:
        """A request of the host started only now: its next start waits ``delay`` from now, at least."""
        ...

    def late_start(self, host: str, delay: float, mine: float) -> tuple[float, float]:
        """A request reaches the wire late, its grant having set the host's next start to ``mine``: it
        starts now if no start was granted after its own, else when that one's delay ends; the next
        start waits ``delay`` after it. Returns (seconds to wait before starting, the host's next
        start now set: the ``mine`` of a later call for the same request)."""
        ...

    def view(self, hosts: Sequence[str]) -> list[HostLoad]:
        """How each of ``hosts`` looks now, in order."""
        ...

    def acquire(self, host: str, want: int, limit: int, delay: float,
                lease: float = 120.0) -> tuple[list[str], float]:
        """Up to ``want`` of host's slots: (tokens granted, seconds to wait if none)."""
        [(tokens, wait, _, _)] = self.exchange([], [SlotRequest(host, want, limit, delay, lease)])
        return tokens, wait

    def acquire_one(self, host: str, limit: int, delay: float, lease: float = 120.0) -> tuple[str | None, float]:
        """One of host's slots: (token, 0), else (None, seconds to wait)."""
        tokens, wait = self.acquire(host, 1, limit, delay, lease)
        return (tokens[0], 0.0) if tokens else (None, wait)

    def release(self, slots: Iterable[tuple[str, str]]) -> None:
        """Give back (host, token) slots in one call."""
        self.exchange(list(slots), [])
