"""The fetch engine of a worker process: hundreds of requests in flight, each started under its host's
shared gate, results handed on to parse and store in small groups.

A fetch task only admits its batch here and returns; the engine fetches it with the tasks of every
other batch, so one slow response never holds a batch, a worker slot or the requests behind it.
One control thread does every Redis round trip (gate slots for all waiting hosts at once, bodies,
counters, the frontier); the pool threads only do HTTP. The gate slot is taken right before a
request starts, so the spacing of a host's requests holds at the server, robots.txt included.

Requests admitted here are claimed by this process in the frontier: if the process dies, its
heartbeat stops and the reclaimer puts them back (``crawltasks.worker.reclaimer``). The engine claims the
requests in its hands again every RENEW_EVERY seconds: one it lost track of (a bug, an error between
two steps) is not renewed, and the reclaimer puts it back too, instead of after the crawl's lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from queue import Empty, SimpleQueue
from typing import Any

import redis

from ..frontier.politeness import CrawlGate, host_policy
from ..http.robots import DENY, Robots, origin_of
from ..models import Fetched, Request
from ..reasons import Reason
from ..runtime import Runtime
from ..settings import CrawlOptions
from ..urls import host_key
from ..worker.liveness import BEAT_EVERY, dead_after
from .asking import HIGH_HOLD, LateStart, NextAsk, late_start, next_ask, plan_asks
from .jobs import Job, fetch_job, take_turn
from .latestarts import LateStarts
from .outbox import Outbox, now_iso

log = logging.getLogger("crawltasks")

COALESCE = 0.002  # seconds the control thread lets answers gather after the first one
ROBOTS_LOOK_EVERY = 0.2  # seconds between looks for a robots.txt another worker is fetching
RENEW_EVERY = BEAT_EVERY  # seconds between claiming the requests in hand again (the reclaimer's check)


class FetchEngine:
    """Admits batches, fetches them under the shared gate, and sends their results on."""

    def __init__(self, rt: Runtime, capacity: int, owner: str) -> None:
        self.rt, self.capacity, self.owner = rt, capacity, owner
        self.pool = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="fetch")
        self.events: SimpleQueue = SimpleQueue()
        self.waiting: dict[tuple[str, str], deque[Job]] = {}  # (crawl, host) -> jobs waiting for a slot
        self.ask_at: dict[tuple[str, str], float] = {}  # when a busy host's gate may be asked again
        self.blocked: dict[tuple[str, str], list[Job]] = defaultdict(list)  # (crawl, origin) -> jobs
        self.look_at: dict[tuple[str, str], float] = {}  # robots.txt fetched elsewhere: look again then
        self.outbox = Outbox(rt)  # sends through rt.sender
        self.late_starts = LateStarts(rt.gate)
        self.gates: dict[str, CrawlGate] = {}
        self.robots: dict[str, Robots] = {}
        self.done_slots: list[tuple[str, str]] = []
        self.high_at: dict[str, float] = {}  # host -> when a high-priority request of it last started
        self.crawls_waiting: Counter[str] = Counter()  # crawl -> hosts with requests waiting here
        self.running = 0
        self.flying: set[tuple[str, str]] = set()  # (crawl, lease) of the requests in flight
        self.renew_at = time.monotonic() + RENEW_EVERY
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fetch-engine", daemon=True)
        self._thread.start()

    # --- the Celery side ------------------------------------------------------------------------------
    def admit(self, crawl_id: str, requests: list[Request], finished: list[Fetched]) -> None:
        """Take a batch: ``requests`` to fetch, ``finished`` already decided (skips, hook errors)."""
        self.events.put(("admit", crawl_id, requests, finished))

    def load(self) -> int:
        """Requests here now: waiting for a slot or robots.txt, or in flight."""
        return self.running + sum(map(len, self.waiting.values())) + sum(map(len, self.blocked.values()))

    def stop(self, timeout: float = 30.0) -> None:
        """Give waiting requests back to the frontier, let those in flight finish, send every result."""
        self.events.put(("stop",))
        self._thread.join(timeout)

    # --- the control thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except Exception as exc:  # noqa: BLE001 - Redis or the broker away: the next round tries again
                log.warning("fetch engine: %r", exc)
                time.sleep(0.5)

    def _step(self) -> bool:
        now = time.monotonic()
        self._look_for_robots(now)
        self._ask_gate(now)
        for event in self._next_events(self._timeout(now)):
            kind = event[0]
            if kind == "admit":
                self._on_admit(*event[1:])
            elif kind == "done":
                self._on_done(*event[1:])
            elif kind == "stop":
                self._stopping.set()
        now = time.monotonic()
        self.outbox.mark_fetched()
        if now >= self.renew_at:
            self.renew_at = now + RENEW_EVERY
            self._renew()
            self.ask_at = {key: at for key, at in self.ask_at.items() if at > now or key in self.waiting}
        self.outbox.flush(now, everything=self._stopping.is_set())
        if self._stopping.is_set():
            self._give_back_waiting()
            if self.running == 0:
                self.outbox.flush(now, everything=True)
                self.late_starts.stop()
                return True
        return False

    def _timeout(self, now: float) -> float:
        """How long the control thread may sleep: until a host may be asked again, a result waits
        too long, or another worker's robots.txt should be looked for."""
        times = [self.renew_at, *self.look_at.values()]
        times += self.outbox.due()
        if self.running < self.capacity:  # with every thread busy, only an answer can start something
            times += [self.ask_at.get(key, now) for key, jobs in self.waiting.items() if jobs]
        return max(0.0, min(times) - now) if times else 0.5

    def _next_events(self, timeout: float) -> list[tuple]:
        """What happened: the first event within ``timeout``, and what else came within COALESCE of
        it, so that one round trip to Redis serves many answers."""
        out = []
        try:
            out.append(self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait())
        except Empty:
            return out
        time.sleep(COALESCE)
        try:
            while len(out) < 1000:
                out.append(self.events.get_nowait())
        except Empty:
            pass
        return out

    def _renew(self) -> None:
        """Claim again every request in hand (waiting for robots.txt or a slot, or in flight)."""
        held: dict[str, list[str]] = defaultdict(list)
        for crawl_id, lease in self.flying:
            held[crawl_id].append(lease)
        for jobs_by_key in (self.waiting, self.blocked):
            for (crawl_id, _), jobs in jobs_by_key.items():
                held[crawl_id] += [job.request.lease for job in jobs if job.robots is None]
        for crawl_id, leases in held.items():
            self.rt.frontier.claim(crawl_id, leases, self.owner)

    def _options(self, crawl_id: str) -> CrawlOptions:
        return self.rt.options(crawl_id)

    def _robots(self, crawl_id: str) -> Robots:
        robots = self.robots.get(crawl_id)
        if robots is None:
            robots = self.robots[crawl_id] = Robots(self._options(crawl_id), rt=self.rt)
        return robots

    def _gate(self, crawl_id: str) -> CrawlGate:
        gate = self.gates.get(crawl_id)
        if gate is None:
            options = self._options(crawl_id)
            crawl_delay = self._robots(crawl_id).crawl_delay if options.obey_robots else None
            gate = self.gates[crawl_id] = CrawlGate(self.rt.gate, options, crawl_delay, crawl_id)
        return gate

    # --- admitting, robots.txt ------------------------------------------------------------------------
    def _on_admit(self, crawl_id: str, requests: list[Request], finished: list[Fetched]) -> None:
        for result in finished:
            self.outbox.add(crawl_id, result)
        robots = self._robots(crawl_id) if self._options(crawl_id).obey_robots else None
        for req in requests:
            job = Job(crawl_id, req, host_key(req.url))
            if robots is None:
                self._wait_for_slot(job)
                continue
            origin = origin_of(req.url)
            if (crawl_id, origin) in self.blocked:
                self.blocked[(crawl_id, origin)].append(job)
            else:
                rules = robots.known(origin)
                if rules is not None:
                    self._robots_said(job, robots.verdict(req.url, rules))
                else:
                    self.blocked[(crawl_id, origin)].append(job)
                    self._want_robots(crawl_id, origin, job.host)

    def _want_robots(self, crawl_id: str, origin: str, host: str) -> None:
        """Fetch the origin's robots.txt here, under the host's gate, or look again soon."""
        if self._robots(crawl_id).lock(origin):
            fetch = Job(crawl_id, Request(url=origin + "/robots.txt"), host, robots=origin)
            self._queue(crawl_id, host).appendleft(fetch)
        else:
            self.look_at[(crawl_id, origin)] = time.monotonic() + ROBOTS_LOOK_EVERY

    def _look_for_robots(self, now: float) -> None:
        for key, at in list(self.look_at.items()):
            if at <= now:
                del self.look_at[key]
                jobs = self.blocked.get(key)
                if jobs and not self._robots_known(*key):
                    self._want_robots(key[0], key[1], jobs[0].host)

    def _robots_known(self, crawl_id: str, origin: str) -> bool:
        """Let the jobs waiting for an origin's rules go on, if the rules are known now."""
        robots = self._robots(crawl_id)
        rules = robots.known(origin)
        if rules is None:
            return False
        jobs = self.blocked.pop((crawl_id, origin), [])
        delay = rules.crawl_delay(robots.agent)
        if jobs and delay:  # the frontier paces the host by its Crawl-delay from now on
            policy = host_policy(jobs[0].host, self._options(crawl_id), float(delay))
            if policy is not None:
                self.rt.frontier.set_limits(crawl_id, jobs[0].host, policy)
        for job in jobs:
            self._robots_said(job, robots.verdict(job.request.url, rules))
        return True

    def _robots_said(self, job: Job, verdict: str) -> None:
        if verdict != DENY:
            self._wait_for_slot(job)
            return
        self.outbox.refuse(job.crawl_id, job.request, reason=Reason.ROBOTS_DISALLOWED,
                           message=f"robots.txt disallows {job.request.url}", count="skipped_robots")

    def _wait_for_slot(self, job: Job) -> None:
        self._queue(job.crawl_id, job.host).append(job)

    def _queue(self, crawl_id: str, host: str) -> deque[Job]:
        jobs = self.waiting.get((crawl_id, host))
        if jobs is None:
            jobs = self.waiting[(crawl_id, host)] = deque()
            self.crawls_waiting[crawl_id] += 1
        return jobs

    def _drop_queue(self, key: tuple[str, str]) -> deque[Job]:
        jobs = self.waiting.pop(key, deque())
        self.ask_at.pop(key, None)
        self.crawls_waiting[key[0]] -= 1
        if self.crawls_waiting[key[0]] <= 0:
            del self.crawls_waiting[key[0]]
        return jobs

    # --- the gate ---------------------------------------------------------------------------------------
    def _ask_gate(self, now: float) -> None:
        """One round trip: give back the slots of finished requests, ask for slots of waiting hosts."""
        self.high_at = {host: at for host, at in self.high_at.items() if at + HIGH_HOLD > now}
        plan = plan_asks(self.waiting, self.ask_at, self.high_at, len(self.crawls_waiting),
                         self.capacity - self.running, now)
        self.ask_at.update(plan.held_until)
        asks = [self._gate(crawl_id).slot_request(host, want) for (crawl_id, host), want in plan.asks]
        if not asks and not self.done_slots:
            return
        asked_at = time.monotonic()  # no slot of this call is granted before: a late start counts from here
        replies = self.rt.gate.exchange(self.done_slots, asks, self.owner, dead_after())
        self.done_slots = []
        granted_at = time.monotonic()
        for (key, _), ask, grant in zip(plan.asks, asks, replies, strict=True):
            self._gate(key[0]).backed_off[key[1]] = grant.backoff > 0  # good answers are reported only then
            jobs = self.waiting[key]
            for token in grant.tokens:
                self._start(jobs.popleft(), token, ask.delay + grant.backoff, asked_at, grant.next_start, granted_at)
            self._carry_out(key, next_ask(len(jobs), ask.delay, grant, now, granted_at))

    def _start(self, job: Job, token: str, delay: float, asked_at: float, next_start: float,
               granted_at: float) -> None:
        """A job granted its slot goes to a fetch thread."""
        self.running += 1
        if job.robots is None:
            self.flying.add((job.crawl_id, job.request.lease))
            if job.request.priority == "high":
                self.high_at[job.host] = granted_at
        on_send = self._on_send(job.host, delay, asked_at, next_start)
        self.pool.submit(fetch_job, self.events, job, token, self._options(job.crawl_id),
                         self._robots(job.crawl_id), on_send)

    def _carry_out(self, key: tuple[str, str], then: NextAsk) -> None:
        if then.drop:
            self._drop_queue(key)
        if then.give_back > 0:
            self._give_back(key, then.give_back)
        if then.ask_at is not None:
            self.ask_at[key] = then.ask_at

    def _on_send(self, host: str, delay: float, asked_at: float, next_start: float) -> Callable[[bool], None]:
        """What a fetch thread does as its request goes out (``late_start`` decides), so that the spacing
        holds where the site sees it, not only where the slot was granted. Lateness counts from
        ``asked_at``, before the gate was asked (the grant is no earlier; the reply can come much later
        on a busy process). Waiting for its turn again, a request goes now if no start was granted after
        its own, else a delay after that one."""
        held = [asked_at, next_start]  # when this request may start (here), the next start it set (gate)

        def on_send(sent: bool) -> None:
            action = late_start(delay, time.monotonic() - held[0], sent)
            if action is LateStart.TELL_SOON:
                self.late_starts.tell(host, delay)
            elif action is not LateStart.NOTHING:
                try:
                    self.rt.gate.started(host, delay) if sent else take_turn(self.rt.gate, host, delay, held)
                except redis.RedisError as exc:  # the request is not at fault: it goes on
                    log.warning("could not move %s's next start: %r", host, exc)
        return on_send

    def _give_back(self, key: tuple[str, str], hold: float) -> None:
        """A host held for long (Retry-After, back-off): its requests wait in the frontier, not here."""
        crawl_id, _ = key
        jobs = self._drop_queue(key)
        for job in jobs:
            if job.robots is not None:
                self._robots(crawl_id).unlock(job.robots)
                self.look_at[(crawl_id, job.robots)] = time.monotonic() + hold
        self.rt.frontier.give_back(crawl_id, [j.request for j in jobs if j.robots is None], hold)

    def _give_back_waiting(self) -> None:
        for key in list(self.waiting):
            self._give_back(key, 0.0)
        for (crawl_id, _), jobs in list(self.blocked.items()):
            self.rt.frontier.give_back(crawl_id, [j.request for j in jobs], 0.0)
        self.blocked.clear()
        self.look_at.clear()

    # --- answers ----------------------------------------------------------------------------------------
    def _on_done(self, job: Job, token: str, outcome: Any) -> None:
        self.running -= 1
        self.done_slots.append((job.host, token))
        self.flying.discard((job.crawl_id, job.request.lease))
        if job.robots is not None:
            robots = self._robots(job.crawl_id)
            robots.unlock(job.robots)
            if isinstance(outcome, BaseException):
                log.warning("robots.txt of %s: %r", job.robots, outcome)
                self.look_at[(job.crawl_id, job.robots)] = time.monotonic()
            else:
                self._robots_known(job.crawl_id, job.robots)
            return
        if isinstance(outcome, BaseException):
            outcome = (Fetched(request=job.request, error=Reason.FETCH_ERROR, message=repr(outcome)[:500],
                               fetched_at=now_iso()), None)
        result, body = outcome
        hold = self._gate(job.crawl_id).feedback(job.host, result)
        if hold > 0:
            self.rt.frontier.hold(job.crawl_id, job.host, hold)
        self.outbox.sort(job.crawl_id, job.request, result, body)
