"""Counters and completion in the memory registry: FINISH (outcomes once per ticket, the crawl's end),
REDRIVE of failed tickets, and RETIRE (the retention after which a finished crawl's keys expire)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...monitor import series
from ...settings import retention_option
from ...states import CrawlState
from ..redis.registry import COUNTERS, HOLD, OUTCOMES, PRUNE_BATCH, SUMMARY_FACTOR
from .crawls import CrawlKeys, CrawlRecords


class CrawlCompletion(CrawlRecords):
    """The steps that count a crawl's requests and decide when it is done."""

    def incr(self, crawl_id: str, **counts: int) -> None:
        with self._lock:
            self._crawl(crawl_id)
            self._count(crawl_id, **counts)

    def stats(self, crawl_id: str) -> dict[str, int]:
        with self._lock:
            self._crawl(crawl_id)
            return {**dict.fromkeys(COUNTERS, 0), **self._counters.get(crawl_id, {})}

    def finish(self, crawl_id: str, outcomes: Iterable[tuple[str, str, str]]) -> tuple[int, bool]:
        """FINISH, then ``retire`` when the crawl finished now."""
        outcomes = list(outcomes)
        for _, outcome, _ in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            c, done, n = self._crawl(crawl_id), 0, dict.fromkeys(OUTCOMES, 0)
            for ticket, outcome, lease in outcomes:
                host = None
                if lease and self.frontier is not None:
                    host = self.frontier.host_of(crawl_id, lease)
                    self.frontier.release(crawl_id, [lease])
                if ticket not in c.outcomes:
                    c.outcomes[ticket] = outcome
                    self._count(crawl_id, **{outcome: 1})
                    done += 1
                    n[outcome] += 1
                    if host is not None and outcome != "skipped":
                        name = f"{outcome[0]}:{host}"
                        c.host_done[name] = c.host_done.get(name, 0) + 1
            if done:
                series.record(c.series, self.clock(), n["stored"], n["failed"], n["skipped"])
            self._count(crawl_id, pending=-done)
            finished = self._complete(c, self._counters.get(crawl_id, {}).get("pending", 0))
        if finished:
            self.retire(crawl_id)
        return done, finished

    def _complete(self, c: CrawlKeys, pending: int) -> bool:
        """FINISH's end: lost, finished (or cancelled) now, or not yet."""
        meta = c.meta
        if "started_at" not in meta or pending < 0:
            meta["state"] = CrawlState.LOST
            return False
        cancelling = meta.get("state") == CrawlState.CANCELLING
        if pending > 0 or (HOLD in meta and not cancelling) or "finished_at" in meta:
            return False
        meta["finished_at"] = format(self.clock(), ".14g")  # Lua's number to string
        meta["state"] = CrawlState.CANCELLED if cancelling else CrawlState.FINISHED
        return True

    def check_finished(self, crawl_id: str) -> bool:
        return self.finish(crawl_id, [])[1]

    def outcome_of(self, crawl_id: str, ticket: str) -> str | None:
        with self._lock:
            return self._crawl(crawl_id).outcomes.get(ticket)

    def redrive(self, crawl_id: str, tickets: Sequence[str]) -> list[bool]:
        """REDRIVE; a crawl that runs again is reopened."""
        if not tickets:
            return []
        with self._lock:
            self._active.add(crawl_id)
            c = self._crawl(crawl_id)
            flags = []
            for ticket in tickets:
                flags.append(c.outcomes.get(ticket) == "failed")
                if flags[-1]:
                    del c.outcomes[ticket]
            n = sum(flags)
            if n:
                self._count(crawl_id, failed=-n, pending=n, redriven=n)
                c.meta.pop("finished_at", None)
                c.meta["state"] = CrawlState.RUNNING
        if n:
            self.reopen(crawl_id)
        return flags

    def retention_of(self, crawl_id: str) -> float:
        return retention_option(self.crawl_options(crawl_id))

    def retire(self, crawl_id: str) -> bool:
        """RETIRE: the working state expires after the retention, meta and stats SUMMARY_FACTOR times later."""
        with self._lock:
            retention = self.retention_of(crawl_id)
            c = self._crawl(crawl_id)
            finished = "finished_at" in c.meta
            if retention > 0:
                if not finished:
                    return False
                now = self.clock()
                c.working_until, c.summary_until = now + retention, now + retention * SUMMARY_FACTOR
                self.prune_crawls()
            if finished:
                self._active.discard(crawl_id)
            else:  # retention 0: Redis takes it out of the active set and puts it back
                self._active.add(crawl_id)
            return finished

    def prune_crawls(self, limit: int = PRUNE_BATCH) -> int:
        with self._lock:
            return len(self._expired(self._oldest(limit)))
