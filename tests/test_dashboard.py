"""The dashboard and /metrics served by a thread of this process (``Dashboard``, as ``crawl --web``
does) over crawls driven here on the real stores (``on_stores``: the test Redis and MongoDB, no
worker): pages, JSON, controls and their guards, metrics, and the pure parts (chart, rows, auth).
The dashboard as ``crawltasks web`` in a browser, against a real worker, is tests/test_web.py's."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from tornado import netutil

from crawltasks import Crawl, start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.frontier.queues import HostPolicy
from crawltasks.monitor.series import Bucket, Window
from crawltasks.runtime import Runtime
from crawltasks.web import chart, data, security
from crawltasks.web.metrics import CrawlCollector
from crawltasks.web.server import Dashboard, address, for_crawl, make_app

from .sites import FAST, TwinSite, on_stores, on_twins, page, status, twin_site

USER, PASSWORD = "watcher", uuid.uuid4().hex


@dataclass
class Crawls:
    rt: Runtime
    site: TwinSite
    done: str  # finished: three pages stored, one 404, one 500, items
    paused: str  # paused before anything ran: its seeds queued


@pytest.fixture(scope="module")
def crawls(quiet_settings) -> Iterator[Crawls]:
    routes = {"/": page("Home", ["/p/1", "/p/2", "/gone", "/broken"]), "/p/1": page("One"), "/p/2": page("Two"),
              "/gone": status(404), "/broken": status(500)}
    site = twin_site(routes)
    rt = on_stores(site, quiet_settings)
    tag = uuid.uuid4().hex[:8]
    done, paused = f"web-done-{tag}", f"web-paused-{tag}"
    try:
        crawl = start_crawl(site.url("/"), crawl_id=done, rt=rt, spider="test-titles", **{**FAST, "max_retries": 0})
        assert run_crawl(rt, crawl, timeout=20), crawl.stats()
        start_crawl(site.url("/"), crawl_id=paused, rt=rt, **FAST)
        assert Crawl(paused, rt).pause()
        yield Crawls(rt, site, done, paused)
    finally:
        rt.close()


def serve_app(rt: Runtime, users: dict[str, str] | None = None) -> Dashboard:
    return Dashboard(make_app(rt, users, flower_url="http://flower.test:5555", refresh=1.5),
                     netutil.bind_sockets(0, address="127.0.0.1"), "127.0.0.1")


@pytest.fixture(scope="module")
def board(crawls: Crawls) -> Iterator[str]:
    dashboard = serve_app(crawls.rt)
    yield dashboard.url.rstrip("/")
    dashboard.stop()


@pytest.fixture(scope="module")
def guarded(crawls: Crawls) -> Iterator[str]:
    dashboard = serve_app(crawls.rt, {USER: PASSWORD})
    yield dashboard.url.rstrip("/")
    dashboard.stop()


def get(url: str, **kwargs) -> requests.Response:
    return requests.get(url, timeout=10, allow_redirects=False, **kwargs)


# --- pages and their JSON ------------------------------------------------------------------------------
def test_the_list_shows_every_crawl_with_its_state(crawls, board):
    resp = get(board + "/")
    assert resp.status_code == 200 and crawls.done in resp.text and crawls.paused in resp.text
    assert resp.headers["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in resp.headers[
        "Content-Security-Policy"]
    api = get(board + "/api/crawls").json()
    rows = {r["crawl_id"]: r for r in api["crawls"]}
    assert api["total"] >= 2 and crawls.done in api["sections"]["crawl-rows"]
    done = rows[crawls.done]
    assert (done["state"], done["stored"], done["failed"], done["progress"], done["eta"]) == (
        "finished", 3, 2, 100.0, 0.0)
    assert (rows[crawls.paused]["state"], rows[crawls.paused]["pending"], rows[crawls.paused]["eta"]) == (
        "paused", 1, None)


def test_a_crawls_page_and_json_agree_with_its_stats(crawls, board):
    resp = get(f"{board}/crawl/{crawls.done}")
    assert resp.status_code == 200 and '<svg class="chart"' in resp.text and "http_404" in resp.text
    assert "http://flower.test:5555/tasks?name=crawltasks%20args%3A" in resp.text
    api = get(f"{board}/api/crawl/{crawls.done}").json()
    stats = Crawl(crawls.done, crawls.rt).stats()
    assert {k: api["stats"][k] for k in ("stored", "failed", "items", "state")} == {
        k: stats[k] for k in ("stored", "failed", "items", "state")}
    assert api["failures"] == {"http_404": 1, "http_500": 1}
    [host] = api["hosts"]
    assert (host["host"], host["stored"], host["failed"], host["queued"], host["label"]) == (
        "127.0.0.1:8080", 3, 2, 0, "idle")
    assert set(api["sections"]) == {"crawl-head", "crawl-counters", "crawl-failures", "crawl-hosts",
                                    "crawl-latest", "crawl-chart"}
    assert "One" in api["sections"]["crawl-latest"]


def test_a_crawls_page_says_what_the_last_control_did(crawls, board):
    page_of = f"{board}/crawl/{crawls.done}"
    assert '<p class="notice" id="notice">crawl paused</p>' in get(page_of + "?done=pause&n=1").text
    assert "nothing to resume: the crawl is not in a state for it" in get(page_of + "?done=resume&n=0").text
    assert "3 failed request(s) sent again" in get(page_of + "?done=retry-failed&n=3").text
    assert 'id="notice"' not in get(page_of + "?done=explode&n=1").text


def test_unknown_crawls_and_bad_pages_are_refused_briefly(crawls, board):
    for path in ("/crawl/nope", "/api/crawl/nope", "/crawl/nope/failures"):
        resp = get(board + path)
        assert resp.status_code == 404 and "no crawl named &#x27;nope&#x27; in Redis" in resp.text, path
    resp = get(f"{board}/crawl/{crawls.done}/failures?page=two")
    assert resp.status_code == 400 and "page must be a number" in resp.text and "Traceback" not in resp.text


def test_failures_page_by_reason(crawls, board):
    resp = get(f"{board}/crawl/{crawls.done}/failures")
    assert resp.status_code == 200 and "/gone" in resp.text and "/broken" in resp.text
    only = get(f"{board}/crawl/{crawls.done}/failures?reason=http_500&page=0").text
    assert "/broken" in only and "/gone" not in only


# --- controls ---------------------------------------------------------------------------------------------
def xsrf_of(session: requests.Session, url: str) -> str:
    return re.search(r'name="_xsrf" value="([^"]+)"', session.get(url, timeout=10).text).group(1)


def test_a_control_needs_its_token_and_then_acts(crawls, board):
    crawl = Crawl(crawls.paused, crawls.rt)
    url = f"{board}/crawl/{crawls.paused}/resume"
    assert requests.post(url, timeout=10, allow_redirects=False).status_code == 403
    with requests.Session() as session:
        token = xsrf_of(session, f"{board}/crawl/{crawls.paused}")
        resp = session.post(url, data={"_xsrf": token}, allow_redirects=False, timeout=10)
        assert resp.status_code == 303 and resp.headers["Location"] == f"/crawl/{crawls.paused}?done=resume&n=1"
        assert crawl.stats()["state"] == "running"
        resp = session.post(f"{board}/crawl/{crawls.paused}/pause", data={"_xsrf": token}, allow_redirects=False,
                            timeout=10)
        assert resp.headers["Location"].endswith("done=pause&n=1") and crawl.rt.state.state_of(crawl.id) == "paused"
        again = session.post(f"{board}/crawl/{crawls.paused}/pause", data={"_xsrf": token}, allow_redirects=False,
                             timeout=10)
        assert again.headers["Location"].endswith("done=pause&n=0")
        gone = session.post(f"{board}/crawl/nope/pause", data={"_xsrf": token}, allow_redirects=False, timeout=10)
        assert gone.status_code == 404


def test_only_a_loopback_host_name_is_answered_without_auth(board):
    assert get(board + "/", headers={"Host": "rebound.example"}).status_code == 403
    assert get(board + "/", headers={"Host": "localhost:1"}).status_code == 200


def test_with_auth_every_page_needs_it_but_metrics_and_health(crawls, guarded):
    refused = get(guarded + "/")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Basic realm="crawltasks"'
    assert get(guarded + "/", auth=(USER, "wrong")).status_code == 401
    assert get(guarded + "/", auth=(USER, PASSWORD), headers={"Host": "crawls.example"}).status_code == 200
    assert get(guarded + "/healthz").text == "ok\n"
    assert get(guarded + "/metrics").status_code == 200


# --- metrics ---------------------------------------------------------------------------------------------
def metric(text: str, name: str, crawl_id: str) -> float:
    found = re.search(rf'^{name}\{{crawl_id="{crawl_id}"[^}}]*\}} (\S+)$', text, re.M)
    assert found, f"{name} of {crawl_id}"
    return float(found.group(1))


def test_metrics_of_a_finished_and_a_paused_crawl(crawls, board):
    resp = get(board + "/metrics")
    text = resp.text
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert metric(text, "crawltasks_pages_stored_total", crawls.done) == 3
    assert metric(text, "crawltasks_items_scraped_total", crawls.done) == 3
    assert f'crawltasks_requests_failed_total{{crawl_id="{crawls.done}",reason="http_404"}} 1.0' in text
    assert metric(text, "crawltasks_requests_queued", crawls.paused) == 1
    assert metric(text, "crawltasks_requests_pending", crawls.paused) == 1
    assert f'crawltasks_crawl_info{{crawl_id="{crawls.paused}",spider="site",state="paused"}} 1.0' in text
    assert re.search(r"^crawltasks_workers_alive 1\.0$", text, re.M)


def test_finished_crawls_leave_the_metrics_after_a_while(crawls):
    shown = {s["crawl_id"] for s in CrawlCollector(crawls.rt, keep_finished=-1).shown()}
    assert crawls.paused in shown and crawls.done not in shown


# --- the server's parts ---------------------------------------------------------------------------------------
def test_addresses_as_a_browser_types_them():
    sockets = netutil.bind_sockets(0, address="127.0.0.1")
    port = sockets[0].getsockname()[1]
    try:
        assert address(sockets, "0.0.0.0") == f"http://127.0.0.1:{port}/"
        assert address(sockets, "::1") == f"http://[::1]:{port}/"
        assert address(sockets, "localhost") == f"http://localhost:{port}/"
    finally:
        for s in sockets:
            s.close()


def test_crawl_web_takes_any_free_port_when_its_own_is_taken(crawls, capsys):
    taken = netutil.bind_sockets(0, address="127.0.0.1")
    port = taken[0].getsockname()[1]
    try:
        board = for_crawl(crawls.rt, crawls.done, port)
        try:
            assert board.url != f"http://127.0.0.1:{port}/"
            assert get(board.url + "healthz").text == "ok\n"
        finally:
            board.stop()
    finally:
        for s in taken:
            s.close()
    assert capsys.readouterr().err == f"dashboard: {board.url}crawl/{crawls.done}\n"


# --- pure parts: auth, chart, rows ----------------------------------------------------------------------------
def test_auth_rules(monkeypatch):
    assert security.parse_users("a:1, b:2:3,") == {"a": "1", "b": "2:3"}
    for bad in ("nopassword", ":pw", "a:"):
        with pytest.raises(ValueError, match="basic auth must be user:password"):
            security.parse_users(bad)
    monkeypatch.setenv(security.ENV_AUTH, "env:pw")
    assert security.users_from(None) == {"env": "pw"} and security.users_from("") == {}
    assert security.refusal("::1", {}) is None and security.refusal("0.0.0.0", {"a": "1"}) is None
    assert security.refusal("10.0.0.2", {}).startswith("web: refusing to listen on 10.0.0.2")
    header = "Basic " + base64.b64encode(b"a:1").decode()
    assert security.check_basic(header, {"a": "1"}) == "a" and security.check_basic(header, {"a": "2"}) is None
    for wrong in ("Basic !!!", "Bearer x", "Basic " + base64.b64encode(b"\xff:1").decode(), None):
        assert security.check_basic(wrong, {"a": "1"}) is None


def test_the_axis_top_is_a_round_number():
    assert [chart.nice_ceiling(v) for v in (0, 0.3, 1, 1.5, 3, 7, 42, 101)] == [1, 0.5, 1, 2, 5, 10, 50, 200]


def test_the_chart_draws_one_step_per_bucket():
    assert "no outcomes yet" in chart.svg([])
    buckets = [Bucket(1000.0, 10.0, stored=50, failed=5), Bucket(1010.0, 10.0, stored=30), Bucket(1020.0, 4.0)]
    drawn = chart.svg(buckets, 10.0)
    stored = re.search(r'<path d="([^"]+)"[^>]*class="stored"', drawn).group(1)
    assert stored.count("H") == 3 and stored.startswith("M56.0,")
    assert 'aria-label="stored pages/s and failures/s, 3 buckets of 10 s; peak 5.0 pages/s"' in drawn
    assert ">5</text>" in drawn and ">2.5</text>" in drawn  # the axis: peak 5 pages/s, its half
    days = chart.svg([Bucket(0.0, 86400.0, stored=1), Bucket(86400.0, 86400.0, stored=2)])
    assert re.search(r">\d\d-\d\d \d\d:\d\d</text>", days)


def test_rows_of_running_and_ended_crawls():
    stats = {"crawl_id": "c", "state": "running", "scheduled": 10, "stored": 4, "failed": 1, "skipped": 0,
             "pending": 5, "elapsed": 2.0, "started_at": 1.0}
    row = data.make_row(stats, Window(stored=2, failed=0, skipped=0, span=1.0), "site")
    assert (row.rate_now, row.rate_avg, row.eta, row.done, row.progress) == (2.0, 2.0, 2.5, 5, 50.0)
    slow = data.make_row(stats, Window(0, 0, 0, 0.0), "site")
    assert (slow.rate_now, slow.eta) == (0.0, None)
    ended = data.make_row({**stats, "state": "cancelled", "scheduled": 0}, Window(0, 0, 0, 0.0), "site")
    assert (ended.rate_now, ended.eta, ended.progress) == (None, 0.0, 100.0)
    assert data.make_row({"crawl_id": "c", "state": "paused"}, Window(0, 0, 0, 0.0), "?").progress == 0.0


def test_host_labels_say_why_a_host_waits():
    def host(**kw) -> data.HostRow:
        return data.HostRow(**{"host": "h", "queued": 0, "in_flight": 0, "gate": 0, "limit": 2, "next_in": 0.0,
                               "backoff": 0.0, "stored": 0, "failed": 0, **kw})

    assert [host(backoff=1.0).label, host(gate=2).label, host(next_in=0.5).label, host(in_flight=1).label,
            host(queued=3).label, host().label] == ["backing off", "at limit", "delay", "fetching", "waiting", "idle"]


def test_the_host_table_reads_the_frontier_through_its_port(crawl_id):
    """The same rows from the twin frontier: queued and in-flight requests, a host's own limits, its wait."""
    near, far = twin_site({"/": page("Near")}, port=8080), twin_site({"/": page("Far")}, port=8081)
    rt = on_twins(near, far)
    try:
        start_crawl([near.url("/"), far.url("/")], crawl_id=crawl_id, rt=rt, obey_robots=False,
                    host_concurrency=2, host_delay=60.0)
        rt.frontier.set_limits(crawl_id, "127.0.0.1:8081", HostPolicy(concurrency=5, delay=1.0))
        rt.frontier.take(crawl_id, 1, HostPolicy(concurrency=2, delay=60.0))  # the first ready host's seed
        detail = data.crawl_detail(rt, crawl_id)
        assert detail is not None and detail.host_count == 2
        busy, idle = detail.hosts
        assert (busy.queued, busy.in_flight, idle.queued, idle.in_flight) == (0, 1, 1, 0)
        assert {busy.host: busy.limit, idle.host: idle.limit} == {"127.0.0.1:8080": 2, "127.0.0.1:8081": 5}
        assert busy.next_in > 0.5 and idle.next_in == 0.0
    finally:
        rt.close()


def test_slowest_hosts_and_item_lines():
    pages = [{"url": "http://a.test/1", "elapsed": 1.0}, {"url": "http://a.test/2", "elapsed": 3.0},
             {"url": "http://b.test/", "elapsed": 0.5}, {"url": "http://c.test/"}, {"elapsed": 9.0}]
    assert data.slowest_hosts(pages) == [("a.test:80", 2.0, 2), ("b.test:80", 0.5, 1)]
    line = data.item_line({"crawl_id": "c", "url": "http://a.test/", "fp": "x", "title": "T" * 300}, width=40)
    assert line["url"] == "http://a.test/" and len(line["fields"]) == 40 and line["fields"].endswith("…")
    assert data.item_line({"n": 1})["fields"] == '{"n": 1}'


def test_a_crawl_of_another_version_is_still_listed(crawls):
    assert data.spider_of(crawls.rt, "no-such-crawl") == "?"
