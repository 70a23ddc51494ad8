"""Is each service reachable? Probes with short timeouts, so that a service that is down is named in
one line within seconds instead of a client library retrying silently for minutes; and how the
shared record of outages (the runtime's ``Outages``: Redis) reads, so that ``stats``, ``list`` and the
progress line say what a crawl waits for.

A probe never raises: it returns a ``Problem`` (the service, its address without password, and what
went wrong) or None.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import ServiceError
from ..settings import ENV_BROKER, ENV_MONGO, ENV_REDIS, Settings

PROBE_TIMEOUT = 3.0  # seconds a probe waits for an answer


@dataclass(frozen=True)
class Problem:
    service: str  # "Redis", "the broker", "MongoDB"
    address: str  # redacted
    reason: str
    variable: str  # the environment variable that names it

    def line(self) -> str:
        return (f"{self.service} at {self.address} is unreachable ({self.reason}); "
                f"check that it runs and that {self.variable} names it")


class ServiceDown(ServiceError, RuntimeError):
    """A service the command needs does not answer; the message is one line naming it."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.line())
        self.problem = problem


class StateLost(ServiceError, RuntimeError):
    """The crawl's state in Redis was lost: its counters cannot say whether it finished."""

    def __init__(self, crawl_id: str, command: str = "") -> None:
        self.crawl_id = crawl_id
        command = command or f"crawltasks crawl --crawl-id {crawl_id}"
        super().__init__(f"the state of crawl {crawl_id} in Redis was lost (a Redis restarted without its data?): "
                         f"it cannot be called finished; continue it with '{command}' "
                         "(it is rebuilt from MongoDB: pages already stored are not fetched again)")


def outage_limit() -> float:
    """Seconds a waiting command rides out an unreachable service before it gives up
    (CRAWLTASKS_OUTAGE_LIMIT, default 300); the workers keep retrying on their own."""
    return float(os.environ.get("CRAWLTASKS_OUTAGE_LIMIT", "300"))


def redact(text: str) -> str:
    from ..urls import redact as redact_urls

    return redact_urls(text)


def _reason(exc: BaseException) -> str:
    text = str(exc).split("\n")[0].split(", Timeout:")[0]
    return redact(text or type(exc).__name__)[:160]


def probe_redis(url: str, service: str = "Redis", variable: str = ENV_REDIS) -> Problem | None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=PROBE_TIMEOUT, socket_timeout=PROBE_TIMEOUT)
    try:
        client.ping()
        return None
    except redis.RedisError as exc:
        return Problem(service, redact(url), _reason(exc), variable)
    finally:
        client.close()


def probe_broker(url: str) -> Problem | None:
    if url.startswith(("redis", "rediss", "unix")):
        return probe_redis(url, "the broker", ENV_BROKER)
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=PROBE_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
        return Problem("the broker", redact(url), _reason(exc), ENV_BROKER)


def probe_mongo(url: str) -> Problem | None:
    import pymongo

    client = pymongo.MongoClient(url, serverSelectionTimeoutMS=int(PROBE_TIMEOUT * 1000),
                                 connectTimeoutMS=int(PROBE_TIMEOUT * 1000))
    try:
        client.admin.command("ping")
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
        return Problem("MongoDB", redact(url), _reason(exc), ENV_MONGO)
    finally:
        client.close()


def check_services(settings: Settings) -> list[Problem]:
    """Probe Redis, the broker and MongoDB side by side: the answer comes within PROBE_TIMEOUT-ish."""
    probes = [lambda: probe_redis(settings.redis_url), lambda: probe_mongo(settings.mongo_url)]
    if settings.broker_url and settings.broker_url != settings.redis_url:
        probes.append(lambda: probe_broker(settings.broker_url or ""))
    with ThreadPoolExecutor(len(probes)) as pool:
        return [p for p in pool.map(lambda probe: probe(), probes) if p is not None]


# --- outages seen by workers (``rt.outages``) ------------------------------------------------------
def stalled_line(down: dict[str, float]) -> str:
    """``stalled: MongoDB unreachable since 12:03:04`` (empty when nothing is down)."""
    if not down:
        return ""
    parts = [f"{name} unreachable since {time.strftime('%H:%M:%S', time.localtime(since))}"
             for name, since in sorted(down.items(), key=lambda kv: kv[1])]
    return "stalled: " + ", ".join(parts)


# --- start_crawl with nothing configured ------------------------------------------------------
def require_services(settings: Settings) -> None:
    """With no service configured, say at once that none answers, rather than wait on the defaults."""
    problems = check_services(settings)
    if problems:
        down = ServiceDown(problems[0])
        down.args = (f"{problems[0].line()}; no services are configured: crawltasks.run() or "
                     "`crawltasks crawl` run embedded ones",)
        raise down


_checked: set[int] = set()  # runtimes whose default services answered once already


def check_unconfigured(rt: Any) -> None:
    """``start_crawl`` on a runtime nobody configured (no CRAWLTASKS_BROKER_URL, no ``configure``):
    the defaults must answer, else one clear line at once."""
    if rt.settings.broker_url or id(rt) in _checked:
        return
    require_services(rt.settings)
    _checked.add(id(rt))
