"""The crawl registry's ports: ``CrawlRegistry``, every crawl's record, state and counters,
``SeenFilter``, a crawl's Bloom-filter seen-set, and ``CrawlActivity``, the monitor's reads of what
completion records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..monitor.series import Window


class SeenFilter(Protocol):
    """A crawl's seen-set when it dedupes with a Bloom filter (``dedupe="bloom"``): no false
    negatives, so nothing is fetched twice. Real: ``bloom.BloomFilter``."""

    def check_and_add(self, fingerprints: Sequence[str], dont_filter: Sequence[bool] | None = None,
                      stats_key: str | None = None) -> list[bool]:
        """Add fingerprints atomically: True for each that was new (or dont_filter). With
        ``stats_key`` it counts scheduled, pending and duplicates as ``Frontier.add`` does."""
        ...

    def contains(self, fingerprints: Sequence[str]) -> list[bool]:
        """True for each fingerprint probably added (never False for an added one)."""
        ...

    def add(self, fingerprint: str) -> bool:
        """Add one fingerprint; True if it was new."""
        ...


class CrawlRegistry(Protocol):
    """Every crawl's record (options, seeds, state, start and finish times) and counters, and the
    transitions between its states, each atomic across workers (Redis: one Lua script each).

    Completion: ``finish`` counts each ticket's outcome once, whatever the replays, and takes
    ``pending`` down; the crawl is finished, once, when ``pending`` reaches 0 and nothing holds it
    open (``hold_open``: its seeds may still come) or it is being cancelled (then it ends
    ``cancelled``). A crawl whose record is gone or whose ``pending`` went below 0 is never called
    finished: its state becomes ``lost``. A finished crawl is retired (it leaves ``active_crawls``
    and its state expires after its ``retention``); ``reopen`` and ``redrive`` make it run again.

    The counters are also written outside this port, in the same place (Redis: ``Keys.stats``):
    ``Frontier.add`` counts scheduled, pending, duplicates and the max_pages filters in the script
    that marks requests seen (``frontier_lua.SCHEDULE``), ``Frontier.drop_queued`` counts what a
    cancel drops as skipped (``DROP_QUEUED``); with ``dedupe="bloom"`` the same script sets and reads
    the filter's bits instead of the exact set. Whatever writes them,
    ``scheduled == stored + failed + skipped + pending``.

    The monitor's reads of what ``finish`` and ``Frontier.add`` record are ``CrawlActivity``, which
    both registries implement too (``Runtime.activity``). Left out, Redis-only: ``retention_of``.
    """

    # the registry
    def create_crawl(self, crawl_id: str, options: dict[str, Any], seeds: Sequence[str]) -> bool:
        """Register a running crawl; False if the id is taken (the crawl continues instead)."""
        ...

    def crawl_options(self, crawl_id: str) -> dict[str, Any] | None:
        """The options it was created with, or None."""
        ...

    def crawl_meta(self, crawl_id: str) -> dict[str, str]:
        """Its record as strings (options and seeds as JSON; empty: no such crawl)."""
        ...

    def crawl_ids(self) -> list[str]:
        """Every crawl whose record is still kept, oldest first."""
        ...

    def reopen(self, crawl_id: str) -> None:
        """A finished crawl runs again (more seeds, continued by id); its state no longer expires."""
        ...

    def is_finished(self, crawl_id: str) -> bool:
        ...

    # counters and completion
    def incr(self, crawl_id: str, **counts: int) -> None:
        """Add to counters (any name; zeros are no call)."""
        ...

    def stats(self, crawl_id: str) -> dict[str, int]:
        """Every counter (those never written: 0), with the extra ones written (filtered_*, ...)."""
        ...

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str, str]]) -> tuple[int, bool]:
        """Record final outcomes (ticket, stored|failed|skipped, lease) and end their claims; returns
        (newly counted, the crawl finished now). An unknown outcome raises ValueError, before anything."""
        ...

    def check_finished(self, crawl_id: str) -> bool:
        """Fire completion if nothing is pending (``finish`` of nothing)."""
        ...

    def outcome_of(self, crawl_id: str, ticket: str) -> str | None:
        ...

    def hold_open(self, crawl_id: str, why: str) -> None:
        """The crawl does not finish at pending 0 while its seeds may still come ("seeds", "feed")."""
        ...

    def drop_hold(self, crawl_id: str) -> bool:
        """No more seeds; True if it was held. Completion is the caller's ``check_finished``."""
        ...

    def held_open(self, crawl_id: str) -> str | None:
        ...

    # dedupe (the writes are ``Frontier.add``'s)
    def seen_already(self, crawl_id: str, fps: Sequence[str]) -> list[bool]:
        """Which fingerprints the exact seen-set has (it only grows)."""
        ...

    def claim_seen(self, crawl_id: str, fp: str, bloom: SeenFilter | None = None) -> bool:
        """Mark a fingerprint seen (a redirect target), in ``bloom`` when the crawl has one; True if new."""
        ...

    def bloom_filter(self, crawl_id: str, capacity: int, error_rate: float) -> SeenFilter:
        """The crawl's Bloom filter, sized for ``capacity`` at ``error_rate`` (a size other than the
        first one's is an error when used)."""
        ...

    # crawls not finished, retries, retention
    def active_crawls(self) -> list[str]:
        """The crawls not finished (what the reclaimer and dispatcher look at), sorted."""
        ...

    def forget_active(self, crawl_id: str) -> None:
        ...

    def redrive(self, crawl_id: str, tickets: Sequence[str]) -> list[bool]:
        """Failed tickets become pending again and the crawl runs; True for each that was failed."""
        ...

    def retire(self, crawl_id: str) -> bool:
        """A finished crawl leaves the active crawls and its state starts to expire; False if it is
        not finished (reopened meanwhile). Harmless to repeat."""
        ...

    def prune_crawls(self, limit: int = 100) -> int:
        """Forget the oldest ``limit`` crawls' registry entries whose record expired; how many."""
        ...

    # pages stored across crawls of a spider (visit_ttl)
    def mark_visited(self, spider: str, fps: Sequence[str], ttl: float) -> None:
        ...

    def visited_at(self, spider: str, fps: Sequence[str]) -> list[float | None]:
        """When each page was last stored (epoch seconds; None: not within the last ttl)."""
        ...

    # notification marks (crawltasks.monitor.notify)
    def mark_once(self, crawl_id: str, event: str, value: str, ttl: float) -> bool:
        """Claim ``event`` for ``ttl`` seconds; False if claimed before."""
        ...

    def update_mark(self, crawl_id: str, event: str, value: str) -> None:
        ...

    def mark_of(self, crawl_id: str, event: str) -> str | None:
        ...

    # control
    def control(self, crawl_id: str, from_states: Sequence[str], to_state: str) -> bool:
        """Move the crawl's state to ``to_state`` if it is one of ``from_states``; True if it did."""
        ...

    def state_of(self, crawl_id: str) -> str:
        """Its state ("" when there is no such crawl)."""
        ...

    def states_of(self, crawl_ids: Sequence[str]) -> list[str]:
        ...

    def state_and_generation(self, crawl_id: str) -> tuple[str, str]:
        """Its state and generation ("" each when unset; a crawl rebuilt after its state was lost has
        a new generation, and with it a new seen-set in each process's ``KnownSeen``)."""
        ...

    def finished_times(self, crawl_ids: Sequence[str]) -> list[float | None]:
        ...

    def delete_crawl(self, crawl_id: str) -> None:
        """Forget every piece of the crawl (its ids are never reused)."""
        ...

    # the rebuild of a crawl whose state was lost (storage.recovery), after create_crawl
    def mark_rebuilt(self, crawl_id: str, started_at: float | None) -> None:
        """A new generation (now), so every process's cached seen-set is dropped, and the start time
        the crawl's record kept (None: the new record's stays)."""
        ...

    def restore_outcomes(self, crawl_id: str, outcomes: Sequence[tuple[str, str]], seen: Sequence[str]) -> None:
        """Tickets' outcomes (ticket, outcome) as they were, counted nowhere, and fingerprints added
        to the exact seen-set (none for a crawl deduping with a Bloom filter)."""
        ...

    def restore_counts(self, crawl_id: str, counts: dict[str, int]) -> None:
        """These counters set to these values (the others stay)."""
        ...


@runtime_checkable
class CrawlActivity(Protocol):
    """What the monitor reads of a crawl's progress (dashboard, metrics, watch, alerts): the time
    series and per-host outcomes ``CrawlRegistry.finish`` records, the hosts ``Frontier.add`` saw,
    and the clock those times come from. Real: ``RedisState``; twin: ``MemoryRegistry``; contract:
    ``tests/test_activity_contract.py``."""

    def series(self, crawl_id: str) -> dict[str, str]:
        """The crawl's whole time-series hash (its shape: ``crawltasks.monitor.series``)."""
        ...

    def recent(self, crawl_ids: Sequence[str], seconds: float,
               starts: Sequence[float | None] | None = None) -> tuple[float, list[Window]]:
        """``now()`` and each crawl's outcomes over the last ``seconds`` (at most the ring's span),
        counted from its start in ``starts`` when later."""
        ...

    def now(self) -> float:
        """The clock every recorded time comes from (epoch seconds)."""
        ...

    def host_done(self, crawl_id: str, hosts: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
        """Host -> (stored, failed) there: of ``hosts`` (0s for a host without any), or of every host."""
        ...

    def crawl_hosts(self, crawl_id: str, limit: int = 500) -> list[str]:
        """Hosts ("name:port") of the crawl's requests, sorted; a sample of ``limit`` when there are more."""
        ...
