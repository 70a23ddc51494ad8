"""Prometheus metrics at ``/metrics`` (the ``prometheus_client`` text format), read from Redis and
Mongo at each scrape, so any number of dashboards or scrapers can run beside the crawl.

Per crawl, labelled ``crawl_id`` (names and meaning in the README, "Dashboard and metrics"). A
crawl's series disappear KEEP_FINISHED seconds after it finishes, so the number of series stays
bounded by the crawls running now (plus those of the last ten minutes), however many ran before.
Failures by reason come from the failures collection, counted at most every FAILURES_EVERY seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..crawl import Crawl
from ..monitor.watch import crawl_hosts, failure_counts, host_states
from ..reasons import RECORDED_SKIPS
from ..runtime import Runtime
from ..states import CrawlState
from .data import NOW_WINDOW, spider_of
from .security import BaseHandler

KEEP_FINISHED = 600.0  # seconds a finished crawl's series stay after its finish
FAILURES_EVERY = 30.0  # seconds between two counts of a crawl's failures by reason

COUNTERS = (  # (stats field, metric name without _total, help)
    ("scheduled", "crawltasks_requests_scheduled", "Requests scheduled (new URLs, deduplicated)."),
    ("stored", "crawltasks_pages_stored", "Pages stored."),
    ("skipped", "crawltasks_requests_skipped", "Requests that ended skipped (robots, hooks, cancelled)."),
    ("retried", "crawltasks_requests_retried", "Transient failures sent again."),
    ("items", "crawltasks_items_scraped", "Items the spider produced."),
)


class CrawlCollector:
    """Collects the metrics of the crawls worth showing, at each scrape."""

    def __init__(self, rt: Runtime, keep_finished: float = KEEP_FINISHED) -> None:
        self.rt = rt
        self.keep_finished = keep_finished
        self._failures: dict[str, tuple[float, dict[str, int]]] = {}

    def shown(self) -> list[dict[str, Any]]:
        """``Crawl.stats()`` of every crawl not finished, or finished within ``keep_finished`` s."""
        state = self.rt.state
        now, ids = self.rt.activity.now(), state.crawl_ids()
        return [Crawl(crawl_id, self.rt).stats() for crawl_id, finished_at in zip(ids, state.finished_times(ids),
                                                                                  strict=True)
                if finished_at is None or now - finished_at <= self.keep_finished]

    def failures(self, crawl_id: str) -> dict[str, int]:
        """Final failures by reason (recorded skips left out), recounted at most every FAILURES_EVERY s."""
        at, counts = self._failures.get(crawl_id, (0.0, {}))
        if time.monotonic() - at >= FAILURES_EVERY:
            counts = {r: n for r, n in failure_counts(self.rt, crawl_id).items() if r not in RECORDED_SKIPS}
            if len(self._failures) > 1000:
                self._failures.clear()
            self._failures[crawl_id] = (time.monotonic(), counts)
        return counts

    def collect(self) -> Iterator[Metric]:
        rt, crawls = self.rt, self.shown()
        ids = [s["crawl_id"] for s in crawls]
        _, windows = rt.activity.recent(ids, NOW_WINDOW, [s.get("started_at") for s in crawls])
        counters = {field: CounterMetricFamily(name, text, labels=["crawl_id"]) for field, name, text in COUNTERS}
        failed = CounterMetricFamily("crawltasks_requests_failed", "Requests that failed for good, by reason.",
                                     labels=["crawl_id", "reason"])
        gauges = {
            "pending": GaugeMetricFamily("crawltasks_requests_pending", "Requests scheduled and not yet done.",
                                         labels=["crawl_id"]),
            "queued": GaugeMetricFamily("crawltasks_requests_queued", "Requests waiting in the frontier.",
                                        labels=["crawl_id"]),
            "in_flight": GaugeMetricFamily("crawltasks_requests_in_flight",
                                           "Requests taken from the frontier and not yet done.", labels=["crawl_id"]),
            "rate": GaugeMetricFamily("crawltasks_pages_per_second",
                                      f"Pages stored per second over the last {NOW_WINDOW:g} s.", labels=["crawl_id"]),
            "backed_off": GaugeMetricFamily("crawltasks_hosts_backed_off",
                                            "Hosts of the crawl backing off after 429/503 answers.",
                                            labels=["crawl_id"]),
            "started": GaugeMetricFamily("crawltasks_crawl_start_time_seconds", "When the crawl started.",
                                         labels=["crawl_id"]),
        }
        info = GaugeMetricFamily("crawltasks_crawl_info", "1 per crawl, with its spider and state.",
                                 labels=["crawl_id", "spider", "state"])
        for stats, window in zip(crawls, windows, strict=True):
            self._one(stats, window.rate("stored") or 0.0, counters, failed, gauges, info)
        yield from counters.values()
        yield failed
        yield from gauges.values()
        yield info
        workers = GaugeMetricFamily("crawltasks_workers_alive", "Worker processes whose heartbeat is current.")
        workers.add_metric([], len(rt.fleet().read()[0]))
        yield workers

    def _one(self, stats: dict[str, Any], rate: float, counters: dict[str, CounterMetricFamily],
             failed: CounterMetricFamily, gauges: dict[str, GaugeMetricFamily], info: GaugeMetricFamily) -> None:
        crawl_id, rt = stats["crawl_id"], self.rt
        for field, family in counters.items():
            family.add_metric([crawl_id], int(stats.get(field, 0)))
        for reason, n in self.failures(crawl_id).items():
            failed.add_metric([crawl_id, reason], n)
        sizes = rt.frontier.sizes(crawl_id)
        running = stats.get("state") == CrawlState.RUNNING
        hosts = crawl_hosts(rt, crawl_id, [], {}) if not stats.get("finished_at") else set()
        values = {"pending": int(stats.get("pending", 0)), "queued": sizes.queued, "in_flight": sizes.claimed,
                  "rate": rate if running else 0.0, "started": float(stats.get("started_at") or 0),
                  "backed_off": sum(1 for h in host_states(rt, hosts) if h.backoff > 0)}
        for name, value in values.items():
            gauges[name].add_metric([crawl_id], value)
        info.add_metric([crawl_id, spider_of(rt, crawl_id), str(stats.get("state"))], 1)


def registry_for(rt: Runtime) -> CollectorRegistry:
    """A registry of its own: only the crawl metrics, not this process's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CrawlCollector(rt))  # type: ignore[arg-type]
    return registry


class MetricsHandler(BaseHandler):
    """``GET /metrics``: open like Flower's (see ``security``)."""

    public = True

    async def get(self) -> None:
        body = await self.run(generate_latest, self.settings["metrics_registry"])
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write(body)
