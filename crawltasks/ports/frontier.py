"""The frontier's port: where scheduled requests wait for their host, and the claims of those taken.

Its values (``HostPolicy``, ``Caps``, ``Taken``, ``Sizes``, ``HostQueue``) and the verdicts of ``add``
are in ``crawltasks.frontier.queues``, with the policy both implementations follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..frontier.queues import Caps, HostPolicy, HostQueue, Sizes, Taken
from ..models import Request
from .registry import SeenFilter


class Frontier(Protocol):
    """Where scheduled requests wait for their host, and the claims of those taken."""

    def add(self, crawl_id: str, requests: Sequence[Request], caps: Caps | None = None,
            bloom: SeenFilter | None = None, counted: bool = False) -> list[int]:
        """Mark fingerprints seen and queue the new requests, atomically: a verdict per request
        (NEW, DUPLICATE, OVER_MAX_PAGES, OVER_HOST_CAP); counts scheduled, pending and duplicates.
        With ``bloom`` (the registry's ``bloom_filter``) the filter is the seen-set; ``counted``
        queues requests that are pending already (retry-failed)."""
        ...

    def take(self, crawl_id: str, limit: int, policy: HostPolicy, high_only: bool = False,
             lead: float = 0.0) -> Taken:
        """Up to ``limit`` requests of hosts that may be fetched now, each with a claim (its lease);
        with ``high_only``, high-priority ones only. ``lead``: a host is handed out again this much
        (at most half its delay) before its delay is over; the shared gate makes the start exact."""
        ...

    def claim(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[bool]:
        """The worker ``owner`` takes these claims up; False for one that is no longer current."""
        ...

    def take_up(self, crawl_id: str, leases: Sequence[str], owner: str) -> list[int | None]:
        """A parse or store task of ``owner`` takes these claims up: per lease None when it is gone
        (this delivery is stale), else how many deliveries of the request died with their worker.
        A claim another owner held *hot* (working on it) counts one more: that delivery died.
        Claims never lost become hot; the others stay cold until ``mark``."""
        ...

    def mark(self, crawl_id: str, leases: Sequence[str], owner: str, hot: bool) -> None:
        """``owner`` starts (hot) or stops working on these requests. A worker that dies costs a
        loss only to the requests it was fetching or working on; those merely waiting in its hands
        go back unmarked."""
        ...

    def fetched(self, crawl_id: str, leases: Sequence[str]) -> None:
        """These requests are no longer in flight at their host: its slot is free (once per claim)."""
        ...

    def give_back(self, crawl_id: str, requests: Sequence[Request], hold: float = 0.0) -> None:
        """Claimed requests go back to the front of their host's queue; the host waits ``hold`` s."""
        ...

    def hold(self, crawl_id: str, host: str, seconds: float) -> None:
        """The host may not be fetched for ``seconds`` (back-off, Retry-After)."""
        ...

    def set_limits(self, crawl_id: str, host: str, policy: HostPolicy) -> None:
        """Limits of one host that differ from the crawl's (host rules, robots.txt Crawl-delay)."""
        ...

    def release(self, crawl_id: str, leases: Sequence[str]) -> None:
        """Finished requests' claims end (the Redis one does it inside the finish script)."""
        ...

    def reclaim(self, crawl_id: str, live: set[str], dispatch_lease: float, lease_time: float,
                renew_within: float = 0.0, handoff_within: float = 0.0) -> int:
        """Put back claims whose owner is not in ``live``, unowned ones older than ``dispatch_lease``,
        those a live owner holds to fetch but has not claimed again within ``renew_within`` (0: no
        such check; the owner lost track of them), those handed on between two stages (neither
        fetching nor hot) that no stage took up within ``handoff_within`` (0: no such check; the
        caller asks only when no stage message waits in the broker, so the message was lost) and any
        older than ``lease_time``; returns how many.
        A loss is counted in the request only when its dead owner was fetching or working on it."""
        ...

    def drop_queued(self, crawl_id: str) -> int:
        """Remove every queued request of a cancelled crawl, counted as skipped; returns how many."""
        ...

    def sizes(self, crawl_id: str) -> Sizes:
        ...

    def outstanding(self, crawl_ids: Sequence[str]) -> tuple[int, list[str]]:
        """Requests taken and not yet fetched over these crawls (the dispatcher's budget), and the
        crawls with high-priority requests waiting."""
        ...

    def host_queues(self, crawl_id: str, hosts: Sequence[str]) -> dict[str, HostQueue]:
        """What waits for each of these hosts, how much is in flight, and when the next may start."""
        ...
