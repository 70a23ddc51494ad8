"""The Celery tasks: unpack JSON, call a stage function, hand the result on. Nothing else."""

from __future__ import annotations

import pymongo.errors
import redis.exceptions
from celery import chain, signals

import celeryconfig

from . import pipeline, runtime
from .celeryapp import app
from .models import Fetched, Request

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


def send_batch(crawl_id: str, priority: str, batch: list[Request], countdown: float = 0.0) -> None:
    """One fetch -> parse -> store chain for a batch, on the fetch queue of its priority."""
    queue = celeryconfig.FETCH_QUEUES[priority]
    label = f"{crawl_id} {len(batch)} url(s) {batch[0].url}"
    sig = chain(
        fetch.si(crawl_id, [r.to_dict() for r in batch]).set(queue=queue, routing_key=queue, argsrepr=label),
        parse.s().set(argsrepr=label),
        store.s().set(argsrepr=label),
    )
    sig.apply_async(countdown=countdown if countdown > 0 else None)


@app.task(name="crawltasks.fetch", bind=True, **OUTAGE_RETRY)
def fetch(self, crawl_id: str, batch: list[dict]) -> dict:
    rt = runtime.current()
    outcome = pipeline.fetch_stage(rt, crawl_id, [Request.from_dict(r) for r in batch])
    pipeline.send_later(rt, crawl_id, outcome, send_batch)
    if not outcome.results:
        self.request.chain = None  # everything went back to the queue: nothing to parse or store
    return {"crawl_id": crawl_id, "results": [f.to_dict() for f in outcome.results]}


@app.task(name="crawltasks.parse", bind=True, **OUTAGE_RETRY)
def parse(self, fetched: dict) -> dict:
    results = [Fetched.from_dict(f) for f in fetched["results"]]
    return pipeline.parse_stage(runtime.current(), fetched["crawl_id"], results, send_batch)


@app.task(name="crawltasks.store", bind=True, **OUTAGE_RETRY)
def store(self, parsed: dict) -> bool:
    return pipeline.store_stage(runtime.current(), parsed["crawl_id"], parsed)


@signals.worker_ready.connect
def start_reclaimer(**_: object) -> None:
    """Every `celery worker` also re-sends requests whose lease expired (see crawltasks.leases)."""
    from .leases import Reclaimer

    Reclaimer(send_batch).start()
