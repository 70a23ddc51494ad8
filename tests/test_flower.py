"""Flower on real parts: a `celery -A crawltasks worker` subprocess, a `celery -A crawltasks flower`
subprocess on a free port with basic auth, the test Redis, SecantusDB and a local fixture site.

Checks Flower's HTTP API for the worker and the fetch/parse/store tasks of a crawl, then drives the
tasks page in headless Chromium and saves a screenshot under the test run's temporary directory.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from crawltasks import start_crawl
from crawltasks.settings import Settings

from .helpers import free_port as free_port  # other tests import it from here
from .helpers import wait_for
from .sites import FAST, basic_site, serve

ROOT = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "crawltasks"]
ALL_QUEUES = "crawl.fetch.high,crawl.fetch.default,crawl.fetch.low,crawl.parse,crawl.store"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment a deployed worker or Flower gets, pointing at the test services."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAWLTASKS_", "FLOWER_"))}
    env.update(settings.to_env(), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Proc:
    """A child process in its own session, its output in a log file; stop() ends it and its children."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> None:
        self.args, self.log = args, log
        self._out = log.open("wb")
        self.p = subprocess.Popen(args, cwd=cwd, env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, ready: Callable[[], Any], what: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"{what}: process exited {self.p.returncode}:\n{self.output()[-3000:]}")
            try:
                value = ready()
            except (requests.RequestException, ValueError):
                value = None
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{what} not ready within {timeout}s:\n{self.output()[-3000:]}")

    def stop(self, timeout: float = 10) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
            except ProcessLookupError:
                pass
        self._out.close()


def start_worker(settings: Settings, log: Path, name: str, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> Proc:
    """`celery -A crawltasks worker` as deployed (threads pool), consuming every crawl queue."""
    args = [*CELERY, "worker", "-Q", ALL_QUEUES, "-P", "threads", "-c", "4", "-n", name, "-E",
            "--loglevel", "INFO", *(extra or [])]
    proc = Proc(args, env or service_env(settings), log)
    try:
        proc.wait_for(lambda: " ready." in proc.output(), "celery worker")
    except Exception:
        proc.stop()
        raise
    return proc


@pytest.fixture(scope="module")
def flower_stack(rt, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A worker, a Flower with basic auth, and one finished crawl of the basic fixture site."""
    logs = tmp_path_factory.mktemp("flower")
    worker_name = f"flowertest-{uuid.uuid4().hex[:6]}@127.0.0.1"
    user, password = "crawl", uuid.uuid4().hex
    port = free_port()
    procs: list[Proc] = []
    site = serve(basic_site())
    try:
        procs.append(start_worker(settings, logs / "worker.log", worker_name))
        flower = Proc([*CELERY, "flower", f"--port={port}"],
                      service_env(settings, FLOWER_BASIC_AUTH=f"{user}:{password}"), logs / "flower.log")
        procs.append(flower)
        base = f"http://127.0.0.1:{port}"
        auth = (user, password)

        def worker_seen_by_events() -> bool:
            data = requests.get(f"{base}/workers", params={"json": 1}, auth=auth, timeout=5).json()["data"]
            return any(w.get("hostname") == worker_name and w.get("status") for w in data)

        # Flower's event consumer sees the worker's heartbeats: events are flowing before the crawl starts.
        flower.wait_for(worker_seen_by_events, "flower (worker heartbeat)", timeout=40)
        crawl = start_crawl(site.url("/"), crawl_id=f"flower-{uuid.uuid4().hex[:8]}", max_retries=1, **FAST)
        assert crawl.wait(timeout=60), crawl.stats()
        yield {"base": base, "auth": auth, "user": user, "password": password, "worker": worker_name,
               "crawl": crawl, "logs": logs, "flower": flower}
    finally:
        for proc in reversed(procs):
            proc.stop()
        site.stop()


def get(stack: dict[str, Any], path: str, **params: Any) -> Any:
    resp = requests.get(stack["base"] + path, params=params, auth=stack["auth"], timeout=10)
    resp.raise_for_status()
    return resp.json()


def crawl_tasks(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The crawl's tasks as Flower's API lists them, once it has seen all three stages succeed."""
    crawl_id = stack["crawl"].id

    def collected() -> dict[str, dict[str, Any]] | None:
        tasks = get(stack, "/api/tasks", limit=1000)
        mine = {u: t for u, t in tasks.items() if crawl_id in str(t.get("args"))}
        names = {t["name"] for t in mine.values() if t.get("state") == "SUCCESS"}
        return mine if {"crawltasks.fetch", "crawltasks.parse", "crawltasks.store"} <= names else None

    return stack["flower"].wait_for(collected, "flower task events", timeout=30)


def test_flower_api_lists_the_worker_and_the_crawl_tasks_with_short_arguments(flower_stack):
    stack = flower_stack
    # Unauthenticated requests are refused: deployed Flower needs its basic auth.
    assert requests.get(stack["base"] + "/api/workers", timeout=5).status_code == 401

    workers = get(stack, "/api/workers", refresh=1)
    assert stack["worker"] in workers
    info = workers[stack["worker"]]
    queues = {q["name"] for q in info["active_queues"]}
    assert queues == set(ALL_QUEUES.split(","))
    assert {"crawltasks.fetch", "crawltasks.parse", "crawltasks.store"} <= set(info["registered"])

    tasks = crawl_tasks(stack)
    crawl = stack["crawl"]
    for task in tasks.values():
        # argsrepr: "<crawl id> <n> url(s) <first URL>", not a page body or a list of request dicts
        args = task["args"]
        assert crawl.id in args and "url(s) http://127.0.0.1:" in args, args
        assert len(args) < 300, args
        assert task["worker"] == stack["worker"]
    fetches = [t for t in tasks.values() if t["name"] == "crawltasks.fetch"]
    assert len(fetches) >= 2  # the seed batch, then the batches its links made
    for task in tasks.values():
        assert len(str(task.get("result") or "")) < 300  # resultrepr_maxsize (200) keeps results short


def test_flower_tasks_page_in_headless_chromium(flower_stack, tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed "
                    "(apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    stack = flower_stack
    crawl_tasks(stack)  # Flower has the crawl's task events
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-dev-shm-usage", "--window-size=1600,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        token = base64.b64encode(f"{stack['user']}:{stack['password']}".encode()).decode()
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})
        driver.get(stack["base"] + "/tasks")

        def rows_listed(d: Any) -> bool:
            text = d.find_element(By.ID, "tasks-table").text
            return "crawltasks.fetch" in text and stack["crawl"].id in text

        WebDriverWait(driver, 30, poll_frequency=0.3).until(rows_listed)
        text = driver.find_element(By.ID, "tasks-table").text
        shot = tmp_path_factory.mktemp("screenshots") / "flower-tasks.png"
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    for name in ("crawltasks.fetch", "crawltasks.parse", "crawltasks.store", "SUCCESS"):
        assert name in text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"\nFlower tasks page screenshot: {shot}")
    keep = os.environ.get("CRAWLTASKS_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


# --- the address check, however Flower is started ----------------------------------------------------
REFUSAL = "flower: refusing to listen on 0.0.0.0 without authentication"


def listening(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(name)
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # little-endian words
                found.add(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, packed))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc")
@pytest.mark.parametrize("how", ["--address", "FLOWER_ADDRESS"])
def test_flower_refuses_an_open_address_without_auth_outside_the_project_root(redis_url, tmp_path, how):
    port = free_port()
    args = ["--address=0.0.0.0"] if how == "--address" else []
    extra = {"FLOWER_ADDRESS": "0.0.0.0"} if how == "FLOWER_ADDRESS" else {}
    env = service_env(Settings(broker_url=redis_url, redis_url=redis_url), **extra)
    proc = Proc([*CELERY, "flower", f"--port={port}", *args], env, tmp_path / "flower.log", cwd=tmp_path)
    try:
        # it exits at once, or it would be listening: wait for whichever comes first
        wait_for(lambda: proc.p.poll() is not None or listening(port), timeout=60, interval=0.2)
        assert listening(port) == set(), f"flower listens on {listening(port)} without authentication"
        code = proc.p.wait(10)
    finally:
        proc.stop()
    lines = [line for line in proc.output().splitlines() if line.strip()]
    assert code == 1, proc.output()
    assert len(lines) == 1 and lines[0].startswith(REFUSAL), lines  # one line, no traceback


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc")
@pytest.mark.parametrize("args", [["--address=127.0.0.1"], []], ids=["127.0.0.1", "no address"])
def test_flower_starts_on_loopback_outside_the_project_root(redis_url, tmp_path, args):
    port = free_port()
    env = service_env(Settings(broker_url=redis_url, redis_url=redis_url))
    proc = Proc([*CELERY, "flower", f"--port={port}", *args], env, tmp_path / "flower.log", cwd=tmp_path)
    try:
        proc.wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/healthcheck", timeout=2).ok, "flower")
        assert listening(port) == {"127.0.0.1"}  # without an address Flower would take every interface
    finally:
        proc.stop()
