"""The HostGate port's contract: every test runs on RedisGate (the test Redis, hosts of its own) and on
MemoryGate, its twin, with a clock the test moves. What the twin copies of the Lua is pinned here:
limits, delays, the waits it answers, give-backs, one-call exchanges, back-off, dead owners, leases,
late starts, hosts side by side."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from crawltasks.backends.memory.gate import MemoryGate
from crawltasks.backends.redis.gate import RedisGate
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.registry import RedisState
from crawltasks.ports import HostGate, SlotRequest

from .test_bodies_contract import round_trips
from .test_hostqueues import FakeClock

FULL_WAIT = 0.025  # what a full host says to wait


class Twin:
    """MemoryGate with a clock the test moves and heartbeats the test writes."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.g: HostGate = MemoryGate(self.clock)

    def host(self, form: str = "g-{}:80") -> str:
        return form.format(uuid.uuid4().hex[:6])

    def owner(self) -> str:
        return f"w-{uuid.uuid4().hex[:6]}"

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def beat(self, owner: str, ago: float = 0.0) -> None:
        self.g.beats[owner] = self.clock.now - ago

    def seen(self, at: float) -> float:
        """A time the gate answered, on the test's clock (the one ``advance`` moves)."""
        return at

    def told(self, t: float) -> float:
        """A time on the test's clock, as the gate reads it."""
        return t

    def backoff_lasts(self, host: str) -> float:
        h = self.g.hosts[host]
        return (h.backoff_until - self.g._now()) / 1000 if h.backoff else 0.0

    def close(self) -> None:
        pass


class OnRedis:
    """RedisGate on the test Redis. Time passing is simulated without sleeping: ``advance`` moves every
    time the test's hosts and owners hold (slot lease ends, the next start, heartbeats) back by the
    seconds, and cuts their keys' TTLs by as much, which is what Redis' clock moving on amounts to.
    The tests at the end let Redis' own clock run, for milliseconds."""

    def __init__(self, url: str) -> None:
        self.state = RedisState.from_url(url)
        self.r = self.state.r
        self.g: HostGate = RedisGate(self.r)
        self.hosts: list[str] = []
        self.owners: list[str] = []
        self.advanced = 0.0

    def host(self, form: str = "g-{}:80") -> str:
        self.hosts.append(form.format(uuid.uuid4().hex[:6]))
        return self.hosts[-1]

    def owner(self) -> str:
        self.owners.append(f"w-{uuid.uuid4().hex[:6]}")
        return self.owners[-1]

    def _now_ms(self) -> int:
        secs, micros = self.r.time()
        return secs * 1000 + micros // 1000

    def _cut_ttl(self, key: str, ms: int) -> None:
        left = self.r.pttl(key)
        if left > 0:
            self.r.pexpire(key, left - ms) if left > ms else self.r.delete(key)

    def advance(self, seconds: float) -> None:
        ms = int(seconds * 1000)
        self.advanced += ms / 1000
        for host in self.hosts:
            slots, nxt = Keys.host_slots(host), Keys.host_next(host)
            entries = self.r.zrange(slots, 0, -1, withscores=True)
            if entries:
                self.r.zadd(slots, {token: score - ms for token, score in entries})
            self._cut_ttl(slots, ms)
            value = self.r.get(nxt)
            if value is not None:
                self.r.set(nxt, int(value) - ms, keepttl=True)
            self._cut_ttl(nxt, ms)
            self._cut_ttl(Keys.host_backoff(host), ms)
        for owner in self.owners:
            beat = self.r.zscore(Keys.workers, owner)
            if beat is not None:
                self.r.zadd(Keys.workers, {owner: beat - ms})

    def seen(self, at: float) -> float:
        """A time the gate answered, on the test's clock: Redis' own plus what ``advance`` moved."""
        return at + self.advanced

    def told(self, t: float) -> float:
        """A time on the test's clock, as Redis' clock reads it."""
        return t - self.advanced

    def beat(self, owner: str, ago: float = 0.0) -> None:
        self.r.zadd(Keys.workers, {owner: self._now_ms() - int(ago * 1000)})

    def backoff_lasts(self, host: str) -> float:
        return max(0, self.r.pttl(Keys.host_backoff(host))) / 1000

    def close(self) -> None:
        keys = [k for h in self.hosts for k in (Keys.host_slots(h), Keys.host_next(h), Keys.host_backoff(h))]
        if keys:
            self.r.delete(*keys)
        if self.owners:
            self.r.zrem(Keys.workers, *self.owners)
        self.r.close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Twin | OnRedis]:
    impl = Twin() if request.param == "memory" else OnRedis(redis_url)
    yield impl
    impl.close()


def test_a_host_never_has_more_than_its_limit_of_slots(side):
    host = side.host()
    tokens, _ = side.g.acquire(host, 5, limit=3, delay=0)
    assert len(tokens) == 3 and len(set(tokens)) == 3
    more, wait = side.g.acquire(host, 1, limit=3, delay=0)
    assert more == [] and wait == FULL_WAIT
    assert side.g.view([host])[0].in_flight == 3
    bigger, _ = side.g.acquire(host, 5, limit=4, delay=0)  # a larger limit: only the difference
    assert len(bigger) == 1


def test_tokens_carry_their_owner(side):
    host, owner = side.host(), side.owner()
    [(mine, _, _, _)] = side.g.exchange([], [SlotRequest(host, 2, limit=5, delay=0)], owner=owner)
    assert len(mine) == 2 and all(t.startswith(owner + "|") for t in mine)
    anonymous, _ = side.g.acquire(host, 1, limit=5, delay=0)
    assert "|" not in anonymous[0]


def test_a_delay_grants_one_slot_at_a_time_and_says_how_long_to_wait(side):
    host = side.host()
    first, _ = side.g.acquire(host, 3, limit=5, delay=0.2)
    assert len(first) == 1
    none, wait = side.g.acquire(host, 1, limit=5, delay=0.2)
    assert none == [] and 0.15 < wait <= 0.2
    side.advance(0.1)
    assert 0.05 < side.g.acquire(host, 1, limit=5, delay=0.2)[1] <= 0.1
    side.advance(0.11)
    again, wait = side.g.acquire(host, 3, limit=5, delay=0.2)
    assert len(again) == 1 and wait == 0.0
    slow = side.host()
    side.g.acquire(slow, 1, limit=5, delay=10)
    assert 9.9 < side.g.acquire(slow, 1, limit=5, delay=10)[1] <= 10


def test_a_full_host_with_a_delay_says_the_delay_first(side):
    host = side.host()
    side.g.acquire(host, 1, limit=1, delay=0.5)
    assert 0.45 < side.g.acquire(host, 1, limit=1, delay=0.5)[1] <= 0.5
    side.advance(0.6)
    assert side.g.acquire(host, 1, limit=1, delay=0.5) == ([], FULL_WAIT)


def test_a_slot_given_back_is_free_again(side):
    host = side.host()
    token, _ = side.g.acquire_one(host, limit=1, delay=0)
    assert side.g.acquire_one(host, limit=1, delay=0)[0] is None
    side.g.release([(host, token)])
    assert side.g.view([host])[0].in_flight == 0
    again, _ = side.g.acquire_one(host, limit=1, delay=0)
    assert again and again != token
    side.g.release([(host, token), (side.host(), "unknown")])  # given back twice, or never taken: harmless
    assert side.g.view([host])[0].in_flight == 1


def test_one_exchange_gives_back_first_then_answers_each_request_in_turn(side):
    a, b, c = side.host(), side.host(), side.host()
    [(held, _, _, _)] = side.g.exchange([], [SlotRequest(a, 2, limit=2, delay=0)])
    asks = [SlotRequest(a, 1, limit=2, delay=0), SlotRequest(b, 3, limit=2, delay=0),
            SlotRequest(c, 2, limit=9, delay=5), SlotRequest(a, 1, limit=2, delay=0)]
    grants = side.g.exchange([(a, held[0])], asks)
    assert [len(g.tokens) for g in grants] == [1, 2, 1, 0]  # a's freed slot went to the first ask
    assert grants[3].wait == FULL_WAIT and all(g.backoff == 0 for g in grants)
    assert side.g.exchange([], []) == []


def test_a_slow_answer_backs_the_host_off_and_holds_it(side):
    host = side.host()
    assert side.g.feedback(host, slow=True) == 1.0
    [(none, wait, backoff, _)] = side.g.exchange([], [SlotRequest(host, 1, limit=5, delay=0)])
    assert none == [] and 0.95 < wait <= 1.0 and backoff == 1.0
    assert side.g.view([host])[0].backoff == 1.0
    asked = side.host()  # Retry-After longer than the back-off: held for it, the back-off is still 1 s
    assert side.g.feedback(asked, slow=True, wait=5.0) == 1.0
    assert 4.9 < side.g.acquire(asked, 1, limit=5, delay=0)[1] <= 5.0


def test_a_backed_off_host_adds_its_back_off_to_the_delay(side):
    host = side.host()
    side.g.feedback(host, slow=True)
    side.advance(1.05)
    [(first, wait, backoff, _)] = side.g.exchange([], [SlotRequest(host, 3, limit=5, delay=0.5)])
    assert len(first) == 1 and backoff == 1.0  # one at a time, though the host has no delay of its own
    assert 1.4 < side.g.acquire(host, 1, limit=5, delay=0.5)[1] <= 1.5


def test_back_off_doubles_to_five_minutes_and_halves_until_gone(side):
    host = side.host()
    grown = [side.g.feedback(host, slow=True) for _ in range(10)]
    assert grown == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0]
    calm = side.host()
    side.g.feedback(calm, slow=True)
    assert [side.g.feedback(calm, slow=False) for _ in range(5)] == [0.5, 0.25, 0.125, 0.062, 0.0]
    assert side.g.view([calm])[0].backoff == 0.0
    assert side.g.feedback(side.host(), slow=False) == 0.0  # a host never backed off stays so


def test_a_back_off_lasts_ten_times_its_length_and_ten_seconds_at_least(side):
    short, long_ = side.host(), side.host()
    side.g.feedback(short, slow=True)
    for _ in range(3):
        side.g.feedback(long_, slow=True)
    assert 9.9 < side.backoff_lasts(short) <= 10 and 39.9 < side.backoff_lasts(long_) <= 40
    side.advance(10.1)
    assert [v.backoff for v in side.g.view([short, long_])] == [0.0, 4.0]
    assert side.g.exchange([], [SlotRequest(short, 1, limit=5, delay=0)])[0].backoff == 0.0
    side.g.feedback(long_, slow=False)  # a good answer sets it again: 2 s, for 20 s from now
    assert 19.9 < side.backoff_lasts(long_) <= 20
    side.g.feedback(long_, slow=False)
    assert 9.9 < side.backoff_lasts(long_) <= 10


def test_a_full_host_frees_the_slots_of_owners_whose_heartbeat_stopped(side):
    host, dead, live = side.host(), side.owner(), side.owner()
    side.beat(dead)
    side.beat(live)
    [(held, _, _, _)] = side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0)], owner=dead)
    side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0)], owner=live)
    side.g.acquire(host, 1, limit=3, delay=0)  # no owner: never freed this way
    assert side.g.acquire(host, 1, limit=3, delay=0, lease=60) == ([], FULL_WAIT)
    side.beat(dead, ago=11)
    side.beat(live, ago=9)
    [(got, _, _, _)] = side.g.exchange([], [SlotRequest(host, 1, limit=3, delay=0)], owner=live, dead_after=10)
    assert len(got) == 1 and side.g.view([host])[0].in_flight == 3
    side.g.release([(host, held[0])])  # the dead owner's slot was freed: giving it back changes nothing
    assert side.g.view([host])[0].in_flight == 3


def test_an_owner_never_seen_beating_counts_as_dead(side):
    host, ghost = side.host(), side.owner()
    side.g.exchange([], [SlotRequest(host, 1, limit=1, delay=0)], owner=ghost)
    assert len(side.g.acquire(host, 1, limit=1, delay=0)[0]) == 1


def test_a_slot_not_given_back_ends_with_its_lease(side):
    host = side.host()
    side.g.acquire(host, 1, limit=2, delay=0, lease=0.5)
    side.g.acquire(host, 1, limit=2, delay=0, lease=2.0)
    side.advance(0.6)
    assert side.g.view([host])[0].in_flight == 1
    assert len(side.g.acquire(host, 2, limit=2, delay=0, lease=2.0)[0]) == 1
    side.advance(2.1)
    assert side.g.view([host])[0].in_flight == 0


def test_a_hosts_slots_all_end_with_the_last_grants_lease(side):
    host = side.host()  # the slots are one key, whose expiry each grant sets to its own lease
    side.g.acquire(host, 1, limit=2, delay=0, lease=2.0)
    side.g.acquire(host, 1, limit=2, delay=0, lease=0.5)
    side.advance(0.6)
    assert side.g.view([host])[0].in_flight == 0


def test_a_late_start_moves_the_hosts_next_start(side):
    host = side.host()
    side.g.acquire(host, 1, limit=5, delay=0.1)
    side.g.started(host, 5.0)
    assert 4.9 < side.g.acquire(host, 1, limit=5, delay=0.1)[1] <= 5.0
    side.g.started(host, 1.0)  # never earlier than it was
    assert 4.9 < side.g.view([host])[0].wait <= 5.0
    other = side.host()
    side.g.started(other, 0.0)  # no delay: nothing to move
    assert side.g.view([other])[0].wait == 0.0
    side.g.started(other, 0.3)
    assert 0.25 < side.g.acquire(other, 1, limit=5, delay=0)[1] <= 0.3


def test_late_starts_told_in_an_exchange_hold_back_its_own_grants_of_their_hosts(side):
    late, free = side.host(), side.host()
    [(held, _, _, _)] = side.g.exchange([], [SlotRequest(late, 1, limit=5, delay=0)])
    grants = side.g.exchange([(late, held[0])], [SlotRequest(late, 1, limit=5, delay=0),
                                                  SlotRequest(free, 1, limit=5, delay=0)],
                             started=[(late, 1.0), (free, 0.0)])  # told first, then given back, then asked
    assert grants[0].tokens == [] and 0.9 < grants[0].wait <= 1.0
    assert len(grants[1].tokens) == 1  # no delay: nothing moved
    assert side.g.view([late])[0].in_flight == 0
    assert side.g.exchange([], [], started=[(late, 0.5)]) == []  # a start told alone; never earlier
    assert 0.9 < side.g.view([late])[0].wait <= 1.0


def test_a_request_late_to_the_wire_starts_now_when_no_start_was_granted_after_it(side):
    host = side.host()
    [grant] = side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0.5)])
    assert len(grant.tokens) == 1
    mine = side.seen(grant.next_start)
    side.advance(0.2)
    wait, _ = side.g.late_start(host, 0.5, side.told(mine))
    assert wait == 0.0
    assert 0.45 < side.g.view([host])[0].wait <= 0.5  # the next start: a delay from the late one


def test_a_grant_without_a_delay_sets_no_next_start(side):
    [grant] = side.g.exchange([], [SlotRequest(side.host(), 1, limit=2, delay=0)])
    assert len(grant.tokens) == 1 and grant.next_start == 0.0


def test_a_request_late_to_the_wire_goes_a_delay_after_a_start_granted_after_it(side):
    host = side.host()
    [first] = side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0.5)])
    first_next = side.seen(first.next_start)
    side.advance(0.6)
    [second] = side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0.5)])
    assert len(second.tokens) == 1
    second_next = side.seen(second.next_start)
    side.advance(0.05)  # the first request reaches the wire only now, after the second was granted
    wait, mine = side.g.late_start(host, 0.5, side.told(first_next))
    assert 0.4 < wait <= 0.45 and abs(side.seen(mine) - (second_next + 0.5)) < 0.01
    assert 0.9 < side.g.view([host])[0].wait <= 0.95  # the next start a delay after its own
    mine = side.seen(mine)
    side.advance(0.5)  # late again past its own start: nothing was granted after it, it goes now
    wait, _ = side.g.late_start(host, 0.5, side.told(mine))
    assert wait == 0.0 and 0.45 < side.g.view([host])[0].wait <= 0.5


def test_a_late_start_after_the_next_start_has_passed_goes_now(side):
    host = side.host()
    [first] = side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0.5)])
    first_next = side.seen(first.next_start)
    side.advance(0.6)
    side.g.exchange([], [SlotRequest(host, 1, limit=2, delay=0.5)])
    side.advance(0.6)  # the later start's delay is over too
    wait, _ = side.g.late_start(host, 0.5, side.told(first_next))
    assert wait == 0.0 and 0.45 < side.g.view([host])[0].wait <= 0.5


def test_hosts_are_gated_each_on_its_own(side):
    a, b, c = side.host(), side.host(), side.host()
    side.g.acquire(a, 2, limit=2, delay=0)
    side.g.feedback(b, slow=True)
    side.g.acquire(c, 1, limit=5, delay=3.0)
    grants = side.g.exchange([], [SlotRequest(h, 2, limit=2, delay=0) for h in (a, b, c, side.host())])
    assert [len(g.tokens) for g in grants] == [0, 0, 0, 2]
    assert grants[0].wait == FULL_WAIT and 0.95 < grants[1].wait <= 1.0 and 2.9 < grants[2].wait <= 3.0
    assert [g.backoff for g in grants] == [0.0, 1.0, 0.0, 0.0]
    views = side.g.view([a, b, c, side.host()])
    assert [v.in_flight for v in views] == [2, 0, 1, 0]
    assert [v.backoff for v in views] == [0.0, 1.0, 0.0, 0.0]
    assert views[3].wait == 0.0 and 2.9 < views[2].wait <= 3.0
    assert side.g.view([]) == []


def many_at_once(g: HostGate, hosts: list[str], one_call: bool) -> list[tuple[int, float, float, bool]]:
    """Late starts, slots given back and asks of several hosts in one exchange, or the same as one
    call each; per ask: (slots granted, wait, back-off, a next start set)."""
    full, spaced, backed, late, free = hosts
    held, _ = g.acquire(full, 2, limit=2, delay=0)
    g.acquire(spaced, 1, limit=2, delay=0.5)
    g.feedback(backed, slow=True)
    release, started = [(full, held[0]), (free, "never-taken")], [(late, 0.3), (free, 0.0)]
    asks = [SlotRequest(full, 2, limit=2, delay=0), SlotRequest(full, 1, limit=2, delay=0),
            SlotRequest(spaced, 1, limit=2, delay=0.5), SlotRequest(backed, 1, limit=5, delay=0),
            SlotRequest(late, 1, limit=2, delay=0), SlotRequest(free, 3, limit=5, delay=0),
            SlotRequest(free, 3, limit=5, delay=0), SlotRequest(free, 1, limit=9, delay=0.2)]
    if one_call:
        grants = g.exchange(release, asks, started=started)
    else:
        for host, delay in started:
            g.started(host, delay)
        g.release(release)
        grants = [g.exchange([], [ask])[0] for ask in asks]
    return [(len(t), round(wait, 1), backoff, nxt > 0) for t, wait, backoff, nxt in grants]


def test_one_exchange_answers_as_the_same_calls_one_by_one(side):
    together = many_at_once(side.g, [side.host() for _ in range(5)], one_call=True)
    apart = many_at_once(side.g, [side.host() for _ in range(5)], one_call=False)
    assert together == apart == [(1, 0.0, 0.0, False), (0, 0.0, 0.0, False), (0, 0.5, 0.0, False),
                                 (0, 1.0, 1.0, False), (0, 0.3, 0.0, False), (3, 0.0, 0.0, False),
                                 (2, 0.0, 0.0, False), (1, 0.0, 0.0, True)]


def test_tokens_are_unique_across_asks_and_exchanges_and_all_go_back_in_one(side):
    hosts, owner = [side.host() for _ in range(4)], side.owner()
    asks = [SlotRequest(h, 3, limit=6, delay=0) for h in hosts] + [SlotRequest(hosts[0], 2, limit=6, delay=0)]
    first = side.g.exchange([], asks, owner=owner)
    second = side.g.exchange([], [SlotRequest(h, 1, limit=6, delay=0) for h in hosts], owner=owner)
    tokens = [t for g in first + second for t in g.tokens]
    assert [len(g.tokens) for g in first + second] == [3, 3, 3, 3, 2, 1, 1, 1, 1]
    assert len(set(tokens)) == len(tokens) and all(t.startswith(owner + "|") for t in tokens)
    assert [v.in_flight for v in side.g.view(hosts)] == [6, 4, 4, 4]
    held = [(ask.host, t) for ask, g in zip(asks + asks[:4], first + second, strict=True) for t in g.tokens]
    [again] = side.g.exchange(held, [SlotRequest(hosts[1], 9, limit=6, delay=0)], owner=owner)
    assert len(again.tokens) == 6 and not set(again.tokens) & set(tokens)
    assert [v.in_flight for v in side.g.view(hosts)] == [0, 6, 0, 0]


def test_hosts_of_every_shape_are_gated(side):
    forms = ("[fd00::{}]:8080", "xn--bcher-{}.example:443", "b\u00fccher-{}.example:80", "a {} b:80", "")
    hosts = [side.host(form) for form in forms]  # "": what host_key says of a URL it cannot read
    late = side.host("127.0.0.{}:1")
    grants = side.g.exchange([], [SlotRequest(h, 2, limit=2, delay=0) for h in [*hosts, late]],
                             started=[(late, 0.4)])
    assert [len(g.tokens) for g in grants] == [2, 2, 2, 2, 2, 0] and 0.35 < grants[-1].wait <= 0.4
    side.g.release([(h, t) for h, g in zip(hosts, grants, strict=False) for t in g.tokens])
    assert [v.in_flight for v in side.g.view(hosts)] == [0] * 5


# --- the Redis side only: its own clock running, round trips ----------------------------------------

@pytest.fixture
def on_redis(redis_url: str) -> Iterator[OnRedis]:
    impl = OnRedis(redis_url)
    yield impl
    impl.close()


def wait_for_slot(gate: HostGate, host: str, limit: int, delay: float, within: float = 2.0) -> float:
    """Ask as the engine does (again after the wait the gate says); the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        token, wait = gate.acquire_one(host, limit=limit, delay=delay)
        if token:
            return time.monotonic() - start
        time.sleep(wait)
    raise AssertionError(f"no slot of {host} within {within} s")


def test_on_redis_time_the_delay_and_a_late_start_hold(on_redis):
    host = on_redis.host()
    assert wait_for_slot(on_redis.g, host, 5, 0.05) < 0.01
    assert 0.04 < wait_for_slot(on_redis.g, host, 5, 0.05) < 0.5
    on_redis.g.started(host, 0.08)
    assert 0.07 < wait_for_slot(on_redis.g, host, 5, 0.05) < 0.5


def test_on_redis_time_a_lease_runs_out(on_redis):
    host = on_redis.host()
    token, _ = on_redis.g.acquire_one(host, limit=1, delay=0, lease=0.05)
    assert token and 0.03 < wait_for_slot(on_redis.g, host, 1, 0) < 0.5


def test_an_exchange_is_one_round_trip_whatever_it_carries(on_redis, monkeypatch):
    hosts = [on_redis.host() for _ in range(5)]
    held = [(h, t) for h in hosts for t in on_redis.g.acquire(h, 2, limit=4, delay=0)[0]]
    on_redis.r.ping()
    sent = round_trips(monkeypatch)
    grants = on_redis.g.exchange(held, [SlotRequest(h, 3, limit=4, delay=0) for h in hosts], owner="w")
    assert [len(g.tokens) for g in grants] == [3] * 5 and sent() == 1


def test_an_exchange_survives_a_script_flush(on_redis):
    host, other = on_redis.host(), on_redis.host()
    [(held, _, _, _)] = on_redis.g.exchange([], [SlotRequest(host, 2, limit=2, delay=0)], owner="w")
    on_redis.r.script_flush()  # a restarted Redis has lost its scripts
    grants = on_redis.g.exchange([(host, held[0])], [SlotRequest(host, 2, limit=2, delay=0),
                                                     SlotRequest(other, 1, limit=2, delay=0)],
                                 owner="w", started=[(other, 0.5)])
    assert [len(g.tokens) for g in grants] == [1, 0] and 0.45 < grants[1].wait <= 0.5
