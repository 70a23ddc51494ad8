"""The Heartbeat and Fleet ports' contract: every test runs on RedisHeartbeat/RedisFleet (the session's
second test Redis database, where no worker of another test beats) and on their twins. Pinned here:
a started heartbeat is live with the capacity it offers, a stopped one is gone at once, and the
supervisor's word on a dead process (or on all of them) takes its ids out and frees the dispatcher's
lock it held. How long silence takes to mean death is Redis' clock and ``dead_after()``: that is
tests/test_leases.py's, with real worker processes."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from crawltasks.backends.memory.fleet import MemoryLeaderLock
from crawltasks.backends.memory.liveness import MemoryFleet, MemoryHeartbeat
from crawltasks.backends.redis.fleet import RedisLeaderLock
from crawltasks.backends.redis.keys import Keys
from crawltasks.backends.redis.liveness import RedisFleet, RedisHeartbeat
from crawltasks.ports import Fleet, Heartbeat, LeaderLock
from crawltasks.settings import Settings

from .helpers import MemorySide, RedisSide, assert_implements, one_side

DISPATCHER = "dispatcher"  # the lock the fleet frees for a dead holder (Keys.dispatcher)


class Twin(MemorySide):
    def __init__(self) -> None:
        self.leader = MemoryLeaderLock()
        self.beats: list[MemoryHeartbeat] = []
        self.fleet: Fleet = MemoryFleet(leader=self.leader)

    def heartbeat(self) -> Heartbeat:
        beat = MemoryHeartbeat()
        self.fleet.heartbeats.append(beat)
        return beat


class OnRedis(RedisSide):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.r.delete(*self.test_keys())
        self.leader: LeaderLock = RedisLeaderLock(self.r)
        self.fleet: Fleet = RedisFleet(self.r)
        self.beats: list[RedisHeartbeat] = []

    def heartbeat(self) -> Heartbeat:
        self.beats.append(RedisHeartbeat(self.r))
        return self.beats[-1]

    def test_keys(self) -> list[str]:
        return [Keys.workers, Keys.capacity, Keys.dispatcher]

    def close(self) -> None:
        for beat in self.beats:
            beat.stop()
        super().close()


@pytest.fixture(params=["memory", "redis"])
def side(request: pytest.FixtureRequest, quiet_settings: Settings) -> Iterator[Twin | OnRedis]:
    yield from one_side(request, quiet_settings.redis_url, Twin, OnRedis)


def test_both_implement_every_method_of_the_ports():
    assert_implements(Heartbeat, RedisHeartbeat, MemoryHeartbeat)
    assert_implements(Fleet, RedisFleet, MemoryFleet)


def test_a_started_heartbeat_is_live_with_the_capacity_it_offers(side):
    a, b = side.heartbeat(), side.heartbeat()
    assert side.fleet.read() == (set(), 0)
    assert a.start() is a and a.start() is a  # once: later calls do nothing
    assert side.fleet.read() == ({a.id}, 0)
    a.offer(64)
    b.offer(32)
    assert side.fleet.read() == ({a.id, b.id}, 96)
    assert a.id != b.id and str(os.getpid()) in a.id.split(":")


def test_a_stopped_heartbeat_is_gone_at_once(side):
    a, b = side.heartbeat(), side.heartbeat()
    a.offer(8)
    b.offer(4)
    a.stop()
    assert side.fleet.read() == ({b.id}, 4)


def test_a_dead_process_leaves_the_table_and_the_dispatchers_lock(side):
    a = side.heartbeat()
    a.offer(8)
    assert side.leader.hold(DISPATCHER, a.id, ttl=60)
    assert side.fleet.forget_process(os.getpid() + 1_000_000) == []  # another process: nothing of it
    assert side.fleet.read() == ({a.id}, 8) and side.leader.holder(DISPATCHER) == a.id
    assert side.fleet.forget_process(os.getpid()) == [a.id]
    assert side.fleet.read() == (set(), 0)
    assert side.leader.holder(DISPATCHER) is None


def test_forgetting_every_worker_empties_the_table_and_frees_the_dispatchers_lock(side):
    a, b = side.heartbeat(), side.heartbeat()
    a.offer(8)
    b.offer(8)
    assert side.leader.hold(DISPATCHER, b.id, ttl=60)
    side.fleet.forget_all()
    assert side.fleet.read() == (set(), 0)
    assert side.leader.holder(DISPATCHER) is None
