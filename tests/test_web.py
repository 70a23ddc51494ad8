"""The dashboard in a real browser: ``crawltasks web`` as a subprocess, headless Chromium, a crawl
running on a real Celery worker against a fixture site; what the pages show is compared with
``crawltasks stats`` at the same moment (the crawl is paused first, so the numbers hold still).
Its screenshots are the README's: ``pytest tests/test_web.py --screenshots docs`` makes them anew
(without the option they go to the test's temporary directory)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from crawltasks import start_crawl
from crawltasks.monitor.watch import failure_counts
from crawltasks.settings import Settings

from .helpers import settled, wait_for
from .sites import FAST, SiteServer, html, serve, slow_page
from .test_flower import CHROMEDRIVER, CHROMIUM
from .test_monitor import cli
from .test_web_controls import start_web

COMPARED = ("state", "scheduled", "stored", "failed", "skipped", "pending", "items", "duplicates", "retried")


@pytest.fixture(scope="module")
def web(rt, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_web(settings, tmp_path_factory.mktemp("web") / "web.log", "--refresh", "1")
    yield base
    proc.stop()


@pytest.fixture
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-dev-shm-usage", "--window-size=1440,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def shop_site(pages: int = 250) -> SiteServer:
    """Slow pages, one in seven gone (404) and one in eleven broken (500)."""
    routes = {"/": slow_page("Catalogue", [f"/p/{i}" for i in range(pages)], delay=0.02)}
    for i in range(pages):
        if i % 7 == 3:
            routes[f"/p/{i}"] = lambda s, p: (404, {}, html("gone"))
        elif i % 11 == 5:
            routes[f"/p/{i}"] = lambda s, p: (500, {}, html("broken"))
        else:
            routes[f"/p/{i}"] = slow_page(f"Product {i}", ["/"], delay=0.02)
    return serve(routes)


def still(crawl, settle: float = 1.5, timeout: float = 60) -> dict[str, Any]:
    """The crawl's counters once they have not moved for ``settle`` seconds (a paused crawl's
    batches already fetching end first)."""
    return settled(lambda: {k: crawl.stats().get(k) for k in COMPARED}, hold=settle, timeout=timeout,
                   what="the crawl's counters")


def cli_stats(settings: Settings, crawl_id: str) -> dict[str, Any]:
    proc = cli(settings, "stats", crawl_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def read(driver: Any, css: str, attribute: str | None = None) -> str:
    """An element's text (or attribute), read again if the page's live refresh replaced it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for attempt in range(20):
        try:
            element = driver.find_element(By.CSS_SELECTOR, css)
            return element.get_attribute(attribute) if attribute else element.text.strip()
        except StaleElementReferenceException:
            if attempt == 19:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def text(driver: Any, css: str) -> str:
    return read(driver, css)


def test_list_and_crawl_pages_in_chromium_show_what_crawltasks_stats_says(worker, rt, settings, web, browser,
                                                                         basic_server, crawl_id, screenshots):
    from selenium.webdriver.support.ui import WebDriverWait

    earlier = start_crawl(basic_server.url("/"), crawl_id=f"{crawl_id}-site", max_retries=0, **FAST)
    assert earlier.wait(timeout=60)
    site = shop_site()
    try:
        crawl = start_crawl(site.url("/"), spider="test-titles", crawl_id=crawl_id, max_retries=0,
                            **{**FAST, "host_concurrency": 2})
        assert wait_for(lambda: crawl.stats()["stored"] >= 120, 60)
        assert crawl.pause()
        held = still(crawl)
        before = cli_stats(settings, crawl_id)

        browser.get(web + "/")
        row = f'tr[data-crawl="{crawl_id}"]'
        listed = {name: text(browser, f'{row} [data-col="{name}"]') for name in ("state", "done", "scheduled",
                                                                                "stored", "failed")}
        browser.save_screenshot(str(screenshots / "dashboard-list.png"))

        browser.set_window_size(1440, 2600)
        browser.get(f"{web}/crawl/{crawl_id}")
        shown = {name: text(browser, f'[data-counter="{name}"]') for name in COMPARED if name != "state"}
        shown["state"] = text(browser, "#crawl-state")
        reasons = {r: text(browser, f'tr[data-reason="{r}"] [data-col="count"]') for r in ("http_404", "http_500")}
        chart = read(browser, "#crawl-chart svg path.stored", "d")
        flower = read(browser, "#flower-link", "href")
        browser.save_screenshot(str(screenshots / "dashboard-crawl.png"))
        after = cli_stats(settings, crawl_id)

        assert {k: before[k] for k in COMPARED} == {k: after[k] for k in COMPARED} == held  # nothing moved
        assert before["state"] == "paused" and before["pending"] > 0
        assert listed == {"state": "paused", "done": str(before["stored"] + before["failed"] + before["skipped"]),
                          "scheduled": str(before["scheduled"]), "stored": str(before["stored"]),
                          "failed": str(before["failed"])}
        assert shown == {k: str(before[k]) for k in COMPARED}
        assert reasons == {r: str(n) for r, n in failure_counts(rt, crawl_id).items()}
        assert chart.startswith("M") and " H" in chart
        assert parse_qs(urlsplit(flower).query)["name"] == [f"crawltasks args:{crawl_id}"]

        # Live: resumed behind the page's back, the open page follows the crawl to its end by itself.
        assert crawl.resume()
        WebDriverWait(browser, 120, poll_frequency=0.3).until(
            lambda d: text(d, "#crawl-state") == "finished" and text(d, '[data-counter="pending"]') == "0")
        final = cli_stats(settings, crawl_id)
        assert text(browser, '[data-counter="stored"]') == str(final["stored"])
        assert text(browser, '[data-counter="failed"]') == str(final["failed"])
    finally:
        site.stop()
    for shot in ("dashboard-list.png", "dashboard-crawl.png"):
        assert (screenshots / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_json_of_a_crawl_and_its_failures_page(worker, rt, web, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
    assert crawl.wait(timeout=60)
    stats = crawl.stats()
    data = requests.get(f"{web}/api/crawl/{crawl_id}", timeout=10).json()
    assert {k: data["crawl"][k] for k in ("state", "scheduled", "stored", "failed")} == {
        k: stats[k] for k in ("state", "scheduled", "stored", "failed")}
    assert data["crawl"]["done"] == stats["scheduled"] and data["crawl"]["progress"] == 100.0
    assert data["failures"] == failure_counts(rt, crawl_id)
    host = urlsplit(basic_server.base).netloc
    [row] = [h for h in data["hosts"] if h["host"] == host]
    assert (row["stored"], row["failed"]) == (stats["stored"], stats["failed"])  # per-host counts from FINISH
    assert set(data["sections"]) >= {"crawl-head", "crawl-chart", "crawl-counters", "crawl-failures", "crawl-hosts"}
    listed = requests.get(f"{web}/api/crawls", timeout=10).json()
    assert crawl_id in [c["crawl_id"] for c in listed["crawls"]] and f'data-crawl="{crawl_id}"' in (
        listed["sections"]["crawl-rows"])

    page = requests.get(f"{web}/crawl/{crawl_id}/failures", params={"reason": "http_404"}, timeout=10).text
    assert basic_server.url("/missing") in page and "/dead" not in page
    assert requests.get(f"{web}/crawl/no-such-crawl", timeout=10).status_code == 404


def test_flower_reads_the_link_as_a_search_for_the_crawls_tasks():
    """Flower's tasks page builds its search as ``name:`` + the ``name`` parameter (flower.js); the
    link's value makes that a query on the task name and the crawl id in the arguments."""
    search = pytest.importorskip("flower.utils.search")
    from crawltasks.web.handlers import PageHandler

    link = PageHandler.flower_tasks(type("H", (), {"settings": {"flower_url": "http://f:5555/"}})(), "c-1")
    assert link.startswith("http://f:5555/tasks?name=")
    [value] = parse_qs(urlsplit(link).query)["name"]
    query = search.parse_query("name:" + value)
    assert query == search.And((search.Term("name", "crawltasks"), search.Term("args", "c-1")))
