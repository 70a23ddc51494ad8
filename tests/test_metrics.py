"""Prometheus metrics from ``crawltasks web``'s /metrics, parsed back with prometheus_client's own
parser, against ``Crawl.stats()`` of crawls run by a real worker on the test Redis and Mongo."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from crawltasks import start_crawl
from crawltasks.backends.redis.keys import Keys
from crawltasks.monitor.watch import failure_counts
from crawltasks.settings import Settings
from crawltasks.urls import host_key

from .sites import FAST
from .test_monitor import small_site
from .test_web_controls import long_site, start_web
from .workers import wait_for

DOCKER = Path(__file__).resolve().parent.parent / "docker"


@pytest.fixture(scope="module")
def web(rt, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_web(settings, tmp_path_factory.mktemp("web") / "web.log")
    yield base
    proc.stop()


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    resp = requests.get(base + "/metrics", timeout=10)
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def of(samples: dict, crawl_id: str) -> dict[str, float]:
    """The samples of one crawl labelled by crawl_id alone: name -> value."""
    return {name: v for (name, labels), v in samples.items() if labels == (("crawl_id", crawl_id),)}


def test_metrics_of_a_finished_and_a_paused_crawl(worker, rt, web, crawl_id):
    site = small_site()
    try:
        done = start_crawl(site.url("/"), crawl_id=f"{crawl_id}-done", max_retries=0, **FAST)
        assert done.wait(timeout=60)
    finally:
        site.stop()
    slow = long_site(200)
    try:
        paused = start_crawl(slow.url("/"), crawl_id=crawl_id, **{**FAST, "host_concurrency": 1})
        assert wait_for(lambda: paused.stats()["stored"] >= 5, 60)
        assert paused.pause()
        host = host_key(slow.url("/"))
        rt.gate.feedback(host, slow=True)  # the host answered 429: it backs off
        assert wait_for(lambda: rt.frontier.sizes(crawl_id).claimed == 0, 60)  # the batches in flight end
        stats, samples = paused.stats(), scrape(web)

        finished = of(samples, done.id)
        final = done.stats()
        assert finished["crawltasks_pages_stored_total"] == final["stored"] == 7
        assert finished["crawltasks_requests_scheduled_total"] == final["scheduled"]
        assert finished["crawltasks_requests_pending"] == 0 and finished["crawltasks_pages_per_second"] == 0
        by_reason = {dict(labels)["reason"]: v for (name, labels), v in samples.items()
                     if name == "crawltasks_requests_failed_total" and dict(labels)["crawl_id"] == done.id}
        assert by_reason == failure_counts(rt, done.id) == {"http_404": 1, "http_500": 1}
        assert samples[("crawltasks_crawl_info", (("crawl_id", done.id), ("spider", "site"),
                                                  ("state", "finished")))] == 1

        now = of(samples, crawl_id)
        sizes = rt.frontier.sizes(crawl_id)
        assert now["crawltasks_pages_stored_total"] == stats["stored"]
        assert now["crawltasks_requests_pending"] == stats["pending"] > 0
        assert now["crawltasks_requests_queued"] == sizes.queued and now["crawltasks_requests_in_flight"] == 0
        assert now["crawltasks_hosts_backed_off"] == 1
        assert now["crawltasks_crawl_start_time_seconds"] == pytest.approx(stats["started_at"])
        assert samples[("crawltasks_workers_alive", ())] >= 1

        # Ten minutes after its finish, a crawl's series are gone (cardinality stays bounded).
        rt.state.r.hset(Keys.meta(done.id), "finished_at", time.time() - 601)
        later = scrape(web)
        assert of(later, done.id) == {} and not any(dict(labels).get("crawl_id") == done.id for _, labels in later)
        assert of(later, crawl_id)  # the paused one stays
    finally:
        rt.state.r.delete(Keys.host_backoff(host_key(slow.url("/"))), Keys.host_next(host_key(slow.url("/"))))
        paused.cancel()
        slow.stop()


def test_the_grafana_dashboard_uses_only_metrics_that_exist(worker, rt, web, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
    assert crawl.wait(timeout=60)
    exposed = {re.sub(r"_(total|created)$", "", name) for name, _ in scrape(web)}
    board = json.loads((DOCKER / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    exprs += [v.get("query", "") if isinstance(v.get("query"), str) else v["query"].get("query", "")
              for v in board["templating"]["list"]]
    used = {re.sub(r"_total$", "", m) for e in exprs for m in re.findall(r"crawltasks_[a-z_]+", e)}
    assert used and used <= exposed, used - exposed
