"""The Celery tasks: unpack JSON, call a stage function, hand the result on. Nothing else.

A fetch task admits its batch into this process's fetch engine and returns; the engine sends each
group of fetched requests on as a parse -> store chain, through the process's sender (``Runtime.sender``,
``crawltasks.worker.sending``). Every worker also runs the services that
keep a crawl moving: its heartbeat, the dispatcher (one at a time in the fleet) and the reclaimer.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any

import pymongo.errors
import redis.exceptions
from celery import signals

from .. import runtime
from ..frontier.queues import decode
from ..models import Fetched, Parsed
from ..stages.admit import admit_stage
from ..stages.parsing import parse_stage
from ..stages.storing import store_stage
from .app import app, celeryconfig

# Infrastructure outages: the whole task is retried by Celery with backoff; the request is not at fault.
OUTAGES = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    pymongo.errors.AutoReconnect,
    pymongo.errors.ServerSelectionTimeoutError,
    pymongo.errors.NetworkTimeout,
)
OUTAGE_RETRY = dict(autoretry_for=OUTAGES, retry_backoff=2, retry_backoff_max=60, retry_jitter=True,
                    max_retries=30)
_engine_lock = threading.Lock()


def engine(rt: runtime.Runtime | None = None) -> Any:
    """The process's fetch engine, started with the first fetch task that reaches it."""
    rt = rt or runtime.current()
    if rt.engine is None:
        with _engine_lock:
            if rt.engine is None:
                from ..stages.engine import FetchEngine

                rt.engine = FetchEngine(rt, rt.settings.fetch_concurrency, rt.heartbeat.start().id)
    return rt.engine


# --- what each task does, on a given runtime (the tasks give this process's; tests give twins) -----
def fetch_batch(rt: runtime.Runtime, crawl_id: str, priority: str, batch: list[list[str]]) -> int:
    """Admit a dispatched batch into the runtime's fetch engine; how many requests it fetches."""
    requests = [decode(entry, priority, lease) for lease, entry in batch]
    to_fetch, decided = admit_stage(rt, crawl_id, requests)
    if to_fetch or decided:
        engine(rt).admit(crawl_id, to_fetch, decided)
    return len(to_fetch)


def parse_results(rt: runtime.Runtime, fetched: dict) -> dict:
    """A parse task's work: its message in, the store task's message out (JSON-safe dicts both)."""
    results = [Fetched.from_dict(f) for f in fetched["results"]]
    return parse_stage(rt, fetched["crawl_id"], results).to_dict()


def store_parsed(rt: runtime.Runtime, parsed: dict) -> bool:
    """A store task's work; True if the crawl just finished."""
    message = Parsed.from_dict(parsed)
    return store_stage(rt, message.crawl_id, message)


@app.task(name=celeryconfig.FETCH_TASK, bind=True, **OUTAGE_RETRY)
def fetch(self, crawl_id: str, priority: str, batch: list[list[str]]) -> int:
    return fetch_batch(runtime.current(), crawl_id, priority, batch)


@app.task(name=celeryconfig.PARSE_TASK, bind=True, **OUTAGE_RETRY)
def parse(self, fetched: dict) -> dict:
    return parse_results(runtime.current(), fetched)


@app.task(name=celeryconfig.STORE_TASK, bind=True, **OUTAGE_RETRY)
def store(self, parsed: dict) -> bool:
    return store_parsed(runtime.current(), parsed)


# --- the services of a worker ---------------------------------------------------------------------
_services: list[Any] = []


def fetch_capacity(consumer: Any) -> int:
    """Requests this worker fetches at once: an engine per process that runs tasks, if it reads a fetch queue."""
    try:
        names = {q.name for q in consumer.task_consumer.queues}
    except AttributeError:
        names = set(consumer.app.amqp.queues.consume_from or celeryconfig.FETCH_QUEUES.values())
    if not names & set(celeryconfig.FETCH_QUEUES.values()):
        return 0
    pool = getattr(consumer, "pool", None)
    processes = getattr(pool, "num_processes", None) if "prefork" in type(pool).__module__ else None
    return runtime.current().settings.fetch_concurrency * (processes or 1)


def quiet_gc() -> None:
    """Fewer, later collections in a worker process. What is loaded by now (Celery, the task
    modules) is frozen out of every collection; young objects are collected after 10,000
    allocations rather than 700. Measured in a broad crawl: collections of 20-140 ms, each a pause
    of every thread, came several times a second; a request held up by one starts late."""
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def start_services(capacity: int) -> None:
    """Heartbeat (offering ``capacity``), dispatcher and reclaimer of a worker process."""
    from ..frontier.dispatcher import Dispatcher
    from .reclaimer import Reclaimer

    quiet_gc()
    rt = runtime.current()
    rt.heartbeat.offer(capacity)
    _services.extend([Dispatcher(rt).start(), Reclaimer().start()])


def stop_services() -> None:
    """Stop dispatching and reclaiming; the engine gives back what it has not started; leave the table."""
    while _services:
        _services.pop().stop()
    rt = runtime.current()
    if rt.engine is not None:
        rt.engine.stop()
        rt.engine = None
    rt.heartbeat.stop()


# --- outages seen here (rt.outages), shown by stats and the progress line ---------------------------------
MONGO_OUTAGES = tuple(e for e in OUTAGES if e.__module__.startswith("pymongo"))
_outage_noted = threading.Event()


@signals.task_retry.connect
def _on_retry(reason: object = None, **_: object) -> None:
    """A task that cannot reach MongoDB waits and retries by itself: say since when, for everyone."""
    if isinstance(getattr(reason, "exc", reason), MONGO_OUTAGES):  # autoretry's reason is a Retry
        with contextlib.suppress(redis.exceptions.RedisError):
            runtime.current().outages.record("MongoDB")
            _outage_noted.set()


@signals.task_success.connect
def _on_success(sender: Any = None, **_: object) -> None:
    if _outage_noted.is_set() and sender is store:  # the store answers again
        _outage_noted.clear()
        with contextlib.suppress(redis.exceptions.RedisError):
            runtime.current().outages.clear("MongoDB")


@signals.worker_ready.connect
def _worker_ready(sender: Any = None, **_: object) -> None:
    start_services(fetch_capacity(sender))


@signals.worker_shutdown.connect
def _worker_shutdown(**_: object) -> None:
    stop_services()


@signals.worker_process_init.connect
def _pool_child_init(**_: object) -> None:
    quiet_gc()


@signals.worker_process_shutdown.connect
def _pool_child_shutdown(**_: object) -> None:
    """A prefork child that leaves gives back what its engine holds."""
    rt = runtime.current()
    if rt.engine is not None:
        rt.engine.stop()
        rt.engine = None
