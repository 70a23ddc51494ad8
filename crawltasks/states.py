"""The states a crawl goes through, and the outcomes a request ends with: one enum each, so that a
comparison names a member instead of spelling a string (a misspelt state used to mean a
``stats --watch`` that never ended). They are ``StrEnum``s: equal to their strings, which is what
Redis, MongoDB, the Lua scripts and JSON hold.
"""

from __future__ import annotations

from enum import StrEnum


class CrawlState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLING = "cancelling"  # cancel asked: the queued requests go, those in hand end
    CANCELLED = "cancelled"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"  # nobody works on it: its command or every worker is gone
    LOST = "lost"  # its state in Redis is gone or contradicts itself (a Redis restarted empty)
    UNKNOWN = "unknown"  # no such crawl in Redis


ENDED = frozenset({CrawlState.FINISHED, CrawlState.CANCELLED})  # nothing more will happen to it
STOPPING = frozenset({CrawlState.CANCELLING, CrawlState.CANCELLED})  # no new request may start
HELD = frozenset({CrawlState.PAUSED, CrawlState.INTERRUPTED})  # waits, with its requests kept


class Outcome(StrEnum):
    """How a request ended (the FINISH script counts each)."""

    STORED = "stored"
    FAILED = "failed"
    SKIPPED = "skipped"
