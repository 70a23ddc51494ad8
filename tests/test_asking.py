"""The fetch engine's asking policy, as pure decisions (crawltasks.stages.asking): which waiting hosts
ask the gate for how many slots, what follows each answer, and what a late request does about its
lateness at the wire. No thread, no Redis, no clock."""

from __future__ import annotations

from collections import deque

from crawltasks.models import Request
from crawltasks.ports import Grant
from crawltasks.stages.asking import (
    GIVE_BACK_AFTER,
    HIGH_HOLD,
    MIN_WAIT,
    TELL_LATE_WITHIN,
    LateStart,
    NextAsk,
    late_start,
    next_ask,
    plan_asks,
)
from crawltasks.stages.jobs import START_SLACK, Job

NOW = 1000.0


def jobs(crawl: str, host: str, n: int, priority: str = "default") -> deque[Job]:
    return deque(Job(crawl, Request(url=f"http://{host}/{i}", priority=priority), host) for i in range(n))


def robots_job(crawl: str, host: str) -> Job:
    return Job(crawl, Request(url=f"http://{host}/robots.txt"), host, robots=f"http://{host}")


def test_every_waiting_host_is_asked_for_what_waits_within_the_idle_threads():
    waiting = {("c", "a"): jobs("c", "a", 3), ("c", "b"): jobs("c", "b", 5), ("c", "e"): deque()}
    plan = plan_asks(waiting, {}, {}, crawls=1, room=6, now=NOW)
    assert plan.asks == [(("c", "a"), 3), (("c", "b"), 3)]  # never more slots than idle threads
    assert plan_asks(waiting, {}, {}, crawls=1, room=0, now=NOW).asks == []


def test_a_host_is_not_asked_before_its_time():
    waiting = {("c", "a"): jobs("c", "a", 1), ("c", "b"): jobs("c", "b", 1)}
    ask_at = {("c", "a"): NOW + 0.2, ("c", "b"): NOW}
    assert plan_asks(waiting, ask_at, {}, crawls=1, room=10, now=NOW).asks == [(("c", "b"), 1)]
    assert len(plan_asks(waiting, ask_at, {}, crawls=1, room=10, now=NOW + 0.2).asks) == 2


def test_a_crawls_requests_wait_while_anothers_better_ones_wait_for_the_same_host():
    waiting = {("low", "a"): jobs("low", "a", 2, "low"), ("high", "a"): jobs("high", "a", 2, "high"),
               ("low", "b"): jobs("low", "b", 1, "low")}
    plan = plan_asks(waiting, {}, {}, crawls=2, room=10, now=NOW)
    assert plan.asks == [(("high", "a"), 2), (("low", "b"), 1)]  # b: no better request waits for it


def test_robots_txt_ranks_with_high_priority_requests_so_neither_waits_for_the_other():
    waiting = {("x", "a"): jobs("x", "a", 1, "high"), ("y", "a"): deque([robots_job("y", "a")])}
    assert plan_asks(waiting, {}, {}, crawls=2, room=10, now=NOW).asks == [(("x", "a"), 1), (("y", "a"), 1)]


def test_a_high_priority_start_holds_the_hosts_other_requests_for_a_moment():
    waiting = {("c", "a"): jobs("c", "a", 2), ("c", "b"): jobs("c", "b", 1)}
    started = {"a": NOW - 0.1}
    plan = plan_asks(waiting, {}, started, crawls=1, room=10, now=NOW)
    assert plan.asks == [(("c", "b"), 1)] and plan.held_until == {("c", "a"): NOW - 0.1 + HIGH_HOLD}
    later = plan_asks(waiting, {}, started, crawls=1, room=10, now=NOW - 0.1 + HIGH_HOLD)
    assert later.asks == [(("c", "a"), 2), (("c", "b"), 1)] and later.held_until == {}


def test_a_high_priority_request_is_not_held_by_another_high_start():
    waiting = {("c", "a"): jobs("c", "a", 1, "high")}
    assert plan_asks(waiting, {}, {"a": NOW}, crawls=1, room=10, now=NOW).asks == [(("c", "a"), 1)]


def grant(tokens: int = 0, wait: float = 0.0, backoff: float = 0.0) -> Grant:
    return Grant([f"t{i}" for i in range(tokens)], wait, backoff, 0.0)


def test_after_a_grant_with_a_delay_the_host_is_asked_when_its_next_start_is_due():
    assert next_ask(3, 0.5, grant(1), NOW, NOW + 0.01) == NextAsk(ask_at=NOW + 0.51)
    assert next_ask(3, 0.5, grant(1, backoff=1.0), NOW, NOW + 0.01) == NextAsk(ask_at=NOW + 1.51)
    # nothing waits: the queue goes, the due time stays for the host's next requests
    assert next_ask(0, 0.5, grant(1), NOW, NOW) == NextAsk(drop=True, ask_at=NOW + 0.5)


def test_without_a_delay_the_host_is_asked_again_at_once_and_a_refusal_waits_as_told():
    assert next_ask(3, 0.0, grant(2), NOW, NOW + 0.01) == NextAsk(ask_at=NOW)
    assert next_ask(3, 0.5, grant(0, wait=0.3), NOW, NOW) == NextAsk(ask_at=NOW + 0.3)
    assert next_ask(3, 0.5, grant(0, wait=0.0), NOW, NOW) == NextAsk(ask_at=NOW + MIN_WAIT)
    assert next_ask(0, 0.0, grant(2), NOW, NOW) == NextAsk(drop=True)


def test_a_host_held_for_long_gives_its_requests_back():
    long = GIVE_BACK_AFTER + 1
    assert next_ask(3, 0.5, grant(0, wait=long), NOW, NOW) == NextAsk(give_back=long)
    assert next_ask(3, 0.5, grant(1, backoff=long), NOW, NOW) == NextAsk(give_back=long + 0.5)
    assert next_ask(0, 0.5, grant(1, backoff=long), NOW, NOW) == NextAsk(drop=True)


def test_a_request_on_time_or_of_a_host_without_delay_does_nothing_about_lateness():
    for sent in (False, True):
        assert late_start(0.5, START_SLACK, sent) is LateStart.NOTHING
        assert late_start(0.0, 5.0, sent) is LateStart.NOTHING  # no spacing to keep


def test_a_little_late_request_goes_at_once_and_its_start_is_told_soon():
    late = (START_SLACK + TELL_LATE_WITHIN) / 2
    assert late_start(0.5, late, sent=False) is LateStart.NOTHING  # no new turn: it goes now
    assert late_start(0.5, late, sent=True) is LateStart.TELL_SOON  # by the late-starts thread


def test_a_late_request_waits_for_its_turn_again_and_tells_its_start_at_once():
    assert late_start(0.5, TELL_LATE_WITHIN, sent=False) is LateStart.TAKE_TURN
    assert late_start(0.5, 3.0, sent=True) is LateStart.TELL_NOW
