"""Which requests a parse or store task holds, and which one it is working on: so that a page that
kills its worker process is the one that pays for it, not the pages beside it.

A task first takes up its requests' claims (``Frontier.take_up``). A claim that is gone means this
delivery is stale (the request finished, or went back to the frontier when its worker was taken for
dead): the request is left to whoever has it now, and a message redelivered after a crash cannot run
the page that caused it again. While a task works on a request, the request's claim is *hot*; if
the worker dies, the reclaimer counts a loss only against hot claims (and those being fetched), and
a redelivered message that finds its claims still hot counts the loss itself. A request lost before
is a *suspect*: it is worked on alone, after the others, so a page that kills every worker it reaches
runs up ``max_worker_lost`` by itself and ends ``worker_lost``, while its batch goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from ..runtime import Runtime


class Custody:
    """The claims one delivery of a parse or store task holds, and how often each request was lost."""

    def __init__(self, rt: Runtime, crawl_id: str, leases: Iterable[str]) -> None:
        self.frontier, self.crawl_id = rt.frontier, crawl_id
        self.owner = rt.heartbeat.start().id
        wanted = [lease for lease in dict.fromkeys(leases) if lease]
        self.losses = dict(zip(wanted, self.frontier.take_up(crawl_id, wanted, self.owner), strict=True))

    def holds(self, lease: str) -> bool:
        """True unless the request's claim is gone (a request without a lease is always held)."""
        return not lease or self.losses.get(lease) is not None

    def lost(self, lease: str) -> int:
        """How many deliveries of the request died with their worker."""
        return self.losses.get(lease) or 0

    def parts(self, leases: Iterable[str]) -> list[list[str]]:
        """The held leases in the order to work on them: all those never lost together (hot since
        take-up), then each suspect alone."""
        held = [lease for lease in dict.fromkeys(leases) if self.holds(lease)]
        suspects = [[lease] for lease in held if self.lost(lease)]
        clean = [lease for lease in held if not self.lost(lease)]
        return [clean, *suspects] if clean else suspects

    @contextmanager
    def working(self, part: Sequence[str], cool: bool = True) -> Iterator[None]:
        """Work on ``part`` with its claims hot; cold again afterwards (``cool``; a store that
        finished its requests has no claims left to cool), and whenever the work raises, so that
        a retry elsewhere does not take the failure for a death."""
        suspects = [lease for lease in part if self.lost(lease)]
        if suspects:
            self.frontier.mark(self.crawl_id, suspects, self.owner, True)
        try:
            yield
        except Exception:
            self.frontier.mark(self.crawl_id, [lease for lease in part if lease], self.owner, False)
            raise
        if cool:
            self.frontier.mark(self.crawl_id, [lease for lease in part if lease], self.owner, False)
