"""The Lua transitions against the real Redis: atomic dedupe, once-only finish, the shared host gate."""

import threading
import uuid

import pytest

from crawltasks.backends.redis.frontier import RedisFrontier
from crawltasks.backends.redis.gate import RedisGate
from crawltasks.backends.redis.registry import RedisState
from crawltasks.models import Request
from crawltasks.ports import SlotRequest


def reqs(fps, dont_filter=False):
    return [Request(url=f"http://r.test/{fp}", fp=fp, ticket=fp, dont_filter=dont_filter) for fp in fps]


@pytest.fixture
def gate(state):
    return RedisGate(state.r)


@pytest.fixture
def cid(state):
    crawl_id = f"u-{uuid.uuid4().hex[:8]}"
    state.create_crawl(crawl_id, {}, [])
    yield crawl_id
    state.delete_crawl(crawl_id)


def test_check_and_add_is_atomic_across_concurrent_clients(redis_url, cid):
    fps = [f"{i:040x}" for i in range(500)]
    wins: list[int] = []

    def race():
        s = RedisState.from_url(redis_url)
        wins.append(sum(RedisFrontier(s.r).add(cid, reqs(fps))))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == 500
    stats = RedisState.from_url(redis_url).stats(cid)
    assert (stats["scheduled"], stats["pending"], stats["duplicates"]) == (500, 500, 3500)


def test_dont_filter_schedules_again(state, cid):
    frontier = RedisFrontier(state.r)
    assert frontier.add(cid, reqs(["a", "a"])) == [1, 0]
    assert frontier.add(cid, reqs(["a"], dont_filter=True)) == [1]
    assert state.stats(cid)["scheduled"] == 2


def test_finish_counts_each_ticket_once_and_fires_completion_once(state, cid):
    RedisFrontier(state.r).add(cid, reqs(["a", "b", "c"]))
    assert state.finish(cid, [("a", "stored", "")]) == (1, False)
    assert state.finish(cid, [("a", "stored", ""), ("b", "failed", "")]) == (1, False)  # replay of a is ignored
    assert state.finish(cid, [("c", "skipped", "")]) == (1, True)
    assert state.finish(cid, [("c", "skipped", "")]) == (0, False)
    assert state.check_finished(cid) is False
    stats = state.stats(cid)
    assert (stats["stored"], stats["failed"], stats["skipped"], stats["pending"]) == (1, 1, 1, 0)
    assert state.crawl_meta(cid)["state"] == "finished"
    assert state.outcome_of(cid, "a") == "stored"


def test_nothing_scheduled_finishes_at_once(state, cid):
    assert state.check_finished(cid) is True


def test_unknown_outcome_is_refused(state, cid):
    with pytest.raises(ValueError):
        state.finish(cid, [("a", "lost", "")])


def test_host_gate_limits_parallelism_and_spaces_requests(gate):
    host = f"h-{uuid.uuid4().hex[:6]}:80"
    t1, _ = gate.acquire_one(host, limit=2, delay=0)
    t2, _ = gate.acquire_one(host, limit=2, delay=0)
    t3, wait = gate.acquire_one(host, limit=2, delay=0)
    assert t1 and t2 and t3 is None and wait > 0
    gate.release([(host, t1)])
    t4, _ = gate.acquire_one(host, limit=2, delay=0)
    assert t4
    other = f"h-{uuid.uuid4().hex[:6]}:80"
    first, _ = gate.acquire_one(other, limit=5, delay=10)
    second, wait = gate.acquire_one(other, limit=5, delay=10)
    assert first and second is None and 9 < wait <= 10


def test_one_round_trip_gives_back_and_takes_slots_for_several_hosts(gate):
    a, b = (f"h-{uuid.uuid4().hex[:6]}:80" for _ in range(2))
    [(held, _, extra, _)] = gate.exchange([], [SlotRequest(a, 3, limit=2, delay=0)])
    assert len(held) == 2 and extra == 0
    # Give one of a's slots back while asking for two of a's and one of b's, all at once.
    asks = [SlotRequest(a, 2, limit=2, delay=0), SlotRequest(b, 1, limit=1, delay=0)]
    got = gate.exchange([(a, held[0])], asks)
    assert [len(tokens) for tokens, *_ in got] == [1, 1]
    gate.feedback(b, slow=True)
    [(none, wait, extra, _)] = gate.exchange([], [SlotRequest(b, 1, limit=5, delay=0)])
    assert none == [] and wait > 0 and extra >= 1.0  # a backed-off host says so


def test_the_gate_survives_a_script_flush(state, gate):
    host = f"h-{uuid.uuid4().hex[:6]}:80"
    state.r.script_flush()  # a restarted Redis has no scripts loaded
    tokens, _ = gate.acquire(host, 2, limit=2, delay=0)
    assert len(tokens) == 2


def test_expired_leases_free_their_slot(gate):
    host = f"h-{uuid.uuid4().hex[:6]}:80"
    token, _ = gate.acquire_one(host, limit=1, delay=0, lease=0.05)
    assert token
    import time
    time.sleep(0.1)
    again, _ = gate.acquire_one(host, limit=1, delay=0)
    assert again
