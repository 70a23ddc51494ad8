"""What the fetch engine asks the shared gate for, and what it does with the answer: decisions only.

The engine's control thread holds the state (requests waiting per host, when each host may be asked
again, the high-priority starts of the last moments) and carries the decisions out; these functions
read that state and return what should happen, so the policy is tested without threads, Redis or time.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..ports import Grant
from .jobs import START_SLACK, Job, rank_of

GIVE_BACK_AFTER = 2.0  # a host that makes its requests wait longer gets them back in the frontier
HIGH_HOLD = 0.5  # a host's other requests wait this long after one of its high-priority ones started
MIN_WAIT = 0.005  # a refused host is asked again no sooner than this
TELL_LATE_WITHIN = 0.1  # a request late by less goes at once, its start told by the late-starts thread
# (long before the host's next grant, a delay after its own); a later one asks the gate itself

Key = tuple[str, str]  # (crawl, host)


@dataclass(frozen=True)
class AskPlan:
    """The hosts to ask for slots in one round trip, in order, with how many slots each wants; and
    the hosts held behind a high-priority start, with when to look at them again."""

    asks: list[tuple[Key, int]] = field(default_factory=list)
    held_until: dict[Key, float] = field(default_factory=dict)


def plan_asks(waiting: Mapping[Key, Sequence[Job]], ask_at: Mapping[Key, float], high_at: Mapping[str, float],
              crawls: int, room: int, now: float) -> AskPlan:
    """Which waiting hosts to ask for slots now: never more slots than ``room`` (idle fetch threads:
    a granted request starts at once), no host before its ``ask_at``. When ``crawls`` > 1 share this
    process or a high-priority request started less than HIGH_HOLD ago (``high_at``: host -> when),
    a host's best-ranked requests go first: a crawl's requests wait while another's of a better
    priority wait for the same host, or while a high-priority start holds the host's others."""
    plan = AskPlan()
    high = {host: at for host, at in high_at.items() if at + HIGH_HOLD > now}
    best = _best_ranks(waiting) if crawls > 1 or high else None
    for key, jobs in waiting.items():
        if room <= 0:
            break
        if not jobs or ask_at.get(key, 0.0) > now:
            continue
        if best is not None:
            rank = rank_of(jobs[0])
            if rank > best[key[1]]:
                continue
            held = high.get(key[1], -HIGH_HOLD) + HIGH_HOLD
            if rank > 0 and held > now:
                plan.held_until[key] = held
                continue
        want = min(len(jobs), room)
        plan.asks.append((key, want))
        room -= want
    return plan


def _best_ranks(waiting: Mapping[Key, Sequence[Job]]) -> dict[str, int]:
    """Per host, the best rank waiting here (0: robots.txt or high priority)."""
    best: dict[str, int] = {}
    for (_, host), jobs in waiting.items():
        if jobs:
            best[host] = min(best.get(host, 9), rank_of(jobs[0]))
    return best


@dataclass(frozen=True)
class NextAsk:
    """What follows a host's answer: ``drop`` its queue here (nothing waits), ``give_back`` what
    waits to the frontier for that many seconds (> 0), or ask its gate again at ``ask_at``."""

    drop: bool = False
    give_back: float = 0.0
    ask_at: float | None = None


def next_ask(left: int, delay: float, grant: Grant, now: float, granted_at: float) -> NextAsk:
    """After the gate's ``grant`` to a host asked with ``delay``, with ``left`` requests still waiting:
    after a slot granted with a delay, ask once the next start is due (counted from the reply, never
    early: the gate would only say to wait), which holds for the host's next requests too; without a
    delay, at once; after a refusal, when it said. A host held longer than GIVE_BACK_AFTER gives its
    requests back."""
    spacing = delay + grant.backoff if grant.tokens else 0.0
    hold = spacing or grant.wait
    if hold > GIVE_BACK_AFTER:
        return NextAsk(drop=not left, give_back=hold if left else 0.0)
    if spacing > 0:
        return NextAsk(drop=not left, ask_at=granted_at + spacing)
    if left:
        return NextAsk(ask_at=now + (0.0 if grant.tokens else max(grant.wait, MIN_WAIT)))
    return NextAsk(drop=True)


class LateStart(enum.Enum):
    """What a request does about its own lateness at the wire (see ``late_start``)."""

    NOTHING = "nothing"
    TELL_SOON = "tell soon"  # out, a little late: the late-starts thread moves the host's next start
    TELL_NOW = "tell now"  # out, late: this thread moves the host's next start at once
    TAKE_TURN = "take turn"  # not out yet, late: ask the gate for its turn again before the first byte


def late_start(delay: float, late: float, sent: bool) -> LateStart:
    """For a request of a host with ``delay`` between starts that reaches the wire ``late`` seconds
    after its slot was asked for: before its first byte (``sent`` False) and once it is out (True).
    On time (within START_SLACK), or no delay to keep: nothing. Late by less than TELL_LATE_WITHIN:
    it goes at once, and once out its start is told soon (the host's next grant is a delay away).
    Later: it first waits for its turn again, and once out its start is told at once."""
    if delay <= 0 or late <= START_SLACK:
        return LateStart.NOTHING
    if late < TELL_LATE_WITHIN:
        return LateStart.TELL_SOON if sent else LateStart.NOTHING
    return LateStart.TELL_NOW if sent else LateStart.TAKE_TURN
