"""What one round trip to the shared host gate costs the client: CPU per ``RedisGate.exchange``, the
way the fetch engine calls it, against the pipeline it replaced (an ACQUIRE_HOST call per ask, a ZREM
per slot given back, a HOST_STARTED call per late start).

    python bench/gatecost.py                        # 200 asks + 200 releases + 20 late starts over 500 hosts
    python bench/gatecost.py --asks 50 --releases 50 --started 5 --rounds 4000
    python bench/gatecost.py --private              # a private redis-server: Redis' own figures are exact

Runs against the Redis of ``CRAWLTASKS_TEST_REDIS`` (default redis://127.0.0.1:6379), database 15 (the
test sessions take 4-13), flushed at the start and at the end only; ``--private`` starts a redis-server
of its own instead. Both ways run the same kind of exchange, each on hosts of its own, in alternating
blocks so that a machine whose speed drifts treats them alike. Client CPU is ``time.process_time``
around each call (building the arguments and reading the reply included, making the requests not).
Redis' side is the growth of ``used_cpu_user + used_cpu_sys`` (the server's process, protocol
included) and of the ``INFO commandstats`` time of the top-level commands; on a shared server other
clients' commands are in them too. Nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.procs import PrivateRedis  # noqa: E402
from crawltasks.backends.redis import lua  # noqa: E402
from crawltasks.backends.redis.gate import RedisGate  # noqa: E402
from crawltasks.backends.redis.keys import Keys  # noqa: E402
from crawltasks.ports import Grant, SlotRequest  # noqa: E402

DB = 15
OWNER = "bench-gatecost"

# The script each ask was before GATE_EXCHANGE, kept here only to compare against.
OLD_ACQUIRE_HOST = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local extra = tonumber(redis.call('GET', KEYS[3]) or '0')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if nxt > now then return {0, nxt - now, extra, 0} end
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then
  for _, token in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local owner = string.match(token, '^(.*)|')
    if owner then
      local beat = tonumber(redis.call('ZSCORE', KEYS[4], owner) or '0')
      if beat < now - tonumber(ARGV[4]) then redis.call('ZREM', KEYS[1], token) end
    end
  end
  free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
end
if free <= 0 then return {0, 25, extra, 0} end
local delay = tonumber(ARGV[2]) + extra
local n = math.min(free, #ARGV - 4)
if delay > 0 then n = 1 end
local lease = tonumber(ARGV[3])
for i = 1, n do redis.call('ZADD', KEYS[1], now + lease, ARGV[4 + i]) end
redis.call('PEXPIRE', KEYS[1], lease)
if delay > 0 then
  redis.call('SET', KEYS[2], now + delay, 'PX', delay)
  return {n, 0, extra, now + delay}
end
return {n, 0, extra, 0}
"""


class PipelinedGate:
    """The exchange as it was: one pipeline of a HOST_STARTED per late start, a ZREM per release and
    an ACQUIRE_HOST per ask, each ask sending its tokens. For comparison only."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self.acquire_sha = client.script_load(OLD_ACQUIRE_HOST)
        self.started_sha = client.script_load(lua.HOST_STARTED)
        self.tokens = 0

    def exchange(self, release: Sequence[tuple[str, str]], requests: Sequence[SlotRequest], owner: str = "",
                 dead_after: float = 10.0, started: Sequence[tuple[str, float]] = ()) -> list[Grant]:
        started = [(host, delay) for host, delay in started if delay > 0]
        prefix, pid = f"{owner}|" if owner else "", os.getpid()
        asks = []
        for req in requests:
            asks.append((req, [f"{prefix}old:{pid}:{self.tokens + i}" for i in range(max(1, req.want))]))
            self.tokens += max(1, req.want)
        pipe = self.r.pipeline(transaction=False)
        for host, delay in started:
            pipe.evalsha(self.started_sha, 1, Keys.host_next(host), int(delay * 1000))
        for host, token in release:
            pipe.zrem(Keys.host_slots(host), token)
        for req, tokens in asks:
            pipe.evalsha(self.acquire_sha, 4, Keys.host_slots(req.host), Keys.host_next(req.host),
                         Keys.host_backoff(req.host), Keys.workers, req.limit, int(req.delay * 1000),
                         int(req.lease * 1000), int(dead_after * 1000), *tokens)
        replies = pipe.execute()[len(started) + len(release):]
        return [Grant(tokens[:int(granted)], int(wait_ms) / 1000.0, int(extra_ms) / 1000.0, int(next_ms) / 1000.0)
                for (_, tokens), (granted, wait_ms, extra_ms, next_ms) in zip(asks, replies, strict=True)]


class Load:
    """The engine's exchanges, as one way sees them: asks for hosts picked at random (a fifth of them
    with politeness lifted, the rest 0.51 s apart, 2 at a time), the slots granted before given back
    in order, late starts of hosts with a delay."""

    def __init__(self, name: str, hosts: int, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.hosts = [f"{name}-{i}.example.com:80" for i in range(hosts)]
        self.delay = {h: 0.0 if i % 5 == 0 else 0.51 for i, h in enumerate(self.hosts)}
        self.held: deque[tuple[str, str]] = deque()
        self.asked = self.granted = 0

    def next(self, asks: int, releases: int, started: int) -> tuple[list, list, list]:
        hosts = self.rnd.sample(self.hosts, asks)
        requests = [SlotRequest(h, self.rnd.choice((1, 1, 1, 2, 3)), 2, self.delay[h], 40.0) for h in hosts]
        release = [self.held.popleft() for _ in range(min(releases, len(self.held)))]
        late = [(h, self.delay[h]) for h in self.rnd.sample(self.hosts, started * 2) if self.delay[h]][:started]
        return release, requests, late

    def took(self, requests: list[SlotRequest], grants: list[Grant]) -> None:
        for req, grant in zip(requests, grants, strict=True):
            self.held.extend((req.host, token) for token in grant.tokens)
            self.asked += 1
            self.granted += bool(grant.tokens)


def server_figures(client: redis.Redis) -> dict[str, float]:
    """The server's CPU seconds and the seconds its gate commands (evalsha, zrem) took, so far."""
    cpu, stats = client.info("cpu"), client.info("commandstats")
    out = {"cpu": cpu["used_cpu_user"] + cpu["used_cpu_sys"]}
    for name in ("evalsha", "zrem"):
        out[name] = stats.get(f"cmdstat_{name}", {}).get("usec", 0) / 1e6
    return out


def run_block(call: Callable, load: Load, rounds: int, shape: tuple[int, int, int]) -> float:
    """``rounds`` exchanges of one way; the client CPU seconds they took."""
    spent = 0.0
    for _ in range(rounds):
        release, requests, late = load.next(*shape)
        t0 = time.process_time()
        grants = call(release, requests, OWNER, 10.0, late)
        spent += time.process_time() - t0
        load.took(requests, grants)
    return spent


def measure(url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Both ways on the Redis of ``url``, in turns; per way the client's and the server's figures."""
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.zadd(Keys.workers, {OWNER: 1e15})  # the owner beats for ever: no slot is taken as a dead one's
    try:
        # each way's call, its load, and its top-level commands (Redis counts those a script runs too)
        ways = {"pipelined": (PipelinedGate(client).exchange, Load("old", args.hosts, 1), ("evalsha", "zrem")),
                "one script": (RedisGate(client).exchange, Load("new", args.hosts, 1), ("evalsha",))}
        shape = (args.asks, args.releases, args.started)
        for call, load, _ in ways.values():  # warm up: scripts loaded, slots held to give back
            run_block(call, load, 20, shape)
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        server: dict[str, dict[str, float]] = {name: {} for name in ways}
        for _ in range(max(1, args.rounds // args.block)):
            for name, (call, load, _) in ways.items():
                before = server_figures(client)
                cpu[name].append(run_block(call, load, args.block, shape) / args.block)
                after = server_figures(client)
                for k in after:
                    server[name][k] = server[name].get(k, 0.0) + after[k] - before[k]
        n = max(1, args.rounds // args.block) * args.block
        return {name: {"client_us": statistics.median(cpu[name]) * 1e6,
                       "client_us_mean": statistics.fmean(cpu[name]) * 1e6,
                       "server_cpu_us": server[name]["cpu"] / n * 1e6,
                       "commands_us": sum(server[name][c] for c in ways[name][2]) / n * 1e6,
                       "granted": ways[name][1].granted / max(1, ways[name][1].asked)}
                for name in ways}
    finally:
        client.flushdb()
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gatecost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=200)
    p.add_argument("--releases", type=int, default=200)
    p.add_argument("--started", type=int, default=20, help="late starts per exchange")
    p.add_argument("--hosts", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2000, help="exchanges per way")
    p.add_argument("--block", type=int, default=100, help="exchanges of one way before the other's turn")
    p.add_argument("--private", action="store_true", help="a redis-server of its own, not the shared one")
    args = p.parse_args(argv)
    if args.private:
        with tempfile.TemporaryDirectory(prefix="ct-gatecost-") as tmp, PrivateRedis(Path(tmp)) as server:
            figures = measure(server.url, args)
    else:
        figures = measure(f"{os.environ.get('CRAWLTASKS_TEST_REDIS', 'redis://127.0.0.1:6379')}/{DB}", args)
    print(f"gate exchange: {args.asks} asks + {args.releases} releases + {args.started} late starts over "
          f"{args.hosts} hosts, {args.rounds} exchanges per way")
    print(f"{'way':<11} {'client µs':>10} {'(mean)':>8} {'Redis CPU µs':>13} {'commands µs':>12} {'granted':>8}")
    for name, f in figures.items():
        print(f"{name:<11} {f['client_us']:>10.0f} {f['client_us_mean']:>8.0f} {f['server_cpu_us']:>13.0f} "
              f"{f['commands_us']:>12.0f} {f['granted']:>8.0%}")
    old, new = figures["pipelined"], figures["one script"]
    print(f"one script / pipelined: client {new['client_us'] / old['client_us']:.2f}, "
          f"Redis CPU {new['server_cpu_us'] / old['server_cpu_us']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
