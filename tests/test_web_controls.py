"""The dashboard's controls and who may use them, on real parts: ``crawltasks web`` as a subprocess
(with and without basic auth), a real Celery worker, the test Redis and Mongo, a fixture site whose
own request log says whether the crawl really stopped."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from crawltasks import start_crawl
from crawltasks.settings import Settings

from .helpers import free_port, settled, wait_for
from .sites import FAST, SiteServer, serve, slow_page
from .test_flower import ROOT, Proc, listening, service_env

USER, PASSWORD = "crawl", uuid.uuid4().hex


def start_web(settings: Settings, log: Path, *args: str, **env: str) -> tuple[Proc, str]:
    """``crawltasks web`` on a free loopback port; returns it and its base URL once it answers."""
    port = free_port()
    proc = Proc([sys.executable, "-m", "crawltasks.cli", "web", "--port", str(port), *args],
                service_env(settings, **env), log)
    base = f"http://127.0.0.1:{port}"
    proc.wait_for(lambda: requests.get(base + "/healthz", timeout=2).ok, "crawltasks web")
    return proc, base


@pytest.fixture(scope="module")
def web_auth(rt, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_web(settings, tmp_path_factory.mktemp("web") / "web.log", "--basic-auth", f"{USER}:{PASSWORD}")
    yield base
    proc.stop()


@pytest.fixture(scope="module")
def web_open(rt, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_web(settings, tmp_path_factory.mktemp("web") / "web.log")
    yield base
    proc.stop()


def long_site(pages: int = 200) -> SiteServer:
    """Slow pages: a crawl of them one at a time takes long enough to pause it half-way."""
    routes = {"/": slow_page("Home", [f"/p/{i}" for i in range(pages)], delay=0.03)}
    for i in range(pages):
        routes[f"/p/{i}"] = slow_page(f"Page {i}", ["/"], delay=0.03)
    return serve(routes)


def xsrf_of(session: requests.Session, base: str, crawl_id: str) -> str:
    """The XSRF token the crawl's page puts in its control forms (the page also sets the cookie)."""
    html = session.get(f"{base}/crawl/{crawl_id}", timeout=10).text
    return re.search(r'name="_xsrf" value="([^"]+)"', html).group(1)


def test_the_pause_control_really_pauses_and_resume_finishes(worker, rt, web_auth, crawl_id):
    site = long_site(80)  # paused after 20 pages, with plenty left to fetch
    session = requests.Session()
    session.auth = (USER, PASSWORD)
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, **{**FAST, "host_concurrency": 1})
        assert wait_for(lambda: crawl.stats()["stored"] >= 20, 60)
        resp = session.post(f"{web_auth}/crawl/{crawl_id}/pause", data={"_xsrf": xsrf_of(session, web_auth, crawl_id)},
                            allow_redirects=False, timeout=10)
        assert resp.status_code == 303 and resp.headers["Location"].endswith("done=pause&n=1")
        assert crawl.stats()["state"] == "paused"
        # batches already fetching finish; nothing more starts
        before = settled(lambda: len(site.hits), hold=1.5, timeout=30, what="the site's request log")
        time.sleep(3)  # letting time pass is the point: a paused crawl must fetch nothing meanwhile
        assert len(site.hits) == before, "requests went on after the pause"
        stats = crawl.stats()
        assert stats["state"] == "paused" and stats["pending"] > 0 and not crawl.finished
        assert "crawl paused" in session.get(web_auth + resp.headers["Location"], timeout=10).text

        resp = session.post(f"{web_auth}/crawl/{crawl_id}/resume", data={"_xsrf": xsrf_of(session, web_auth, crawl_id)},
                            allow_redirects=False, timeout=10)
        assert resp.status_code == 303
        assert crawl.wait(timeout=120), crawl.stats()
        assert len(site.hits) > before and crawl.stats()["state"] == "finished"
    finally:
        crawl.cancel()
        site.stop()


def test_unauthenticated_or_tokenless_posts_are_refused(worker, rt, web_auth, basic_server, crawl_id):
    crawl = start_crawl(basic_server.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
    assert crawl.wait(timeout=60)
    assert crawl.stats()["failed"] > 0
    authed = requests.Session()
    authed.auth = (USER, PASSWORD)
    token = xsrf_of(authed, web_auth, crawl_id)
    url = f"{web_auth}/crawl/{crawl_id}/retry-failed"

    anonymous = requests.Session()
    anonymous.cookies.update(authed.cookies)  # even with a valid token and cookie
    assert anonymous.post(url, data={"_xsrf": token}, allow_redirects=False, timeout=10).status_code == 401
    wrong = requests.post(url, data={"_xsrf": token}, cookies=authed.cookies, auth=(USER, "nope"),
                          allow_redirects=False, timeout=10)
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Basic")
    assert authed.post(url, allow_redirects=False, timeout=10).status_code == 403  # no token
    other = requests.Session()
    other.auth = (USER, PASSWORD)
    assert other.post(url, data={"_xsrf": token}, allow_redirects=False, timeout=10).status_code == 403  # no cookie
    assert crawl.stats()["redriven"] == 0 and crawl.stats()["state"] == "finished"  # nothing was retried

    for path in ("/", f"/crawl/{crawl_id}", "/api/crawls", f"/crawl/{crawl_id}/failures"):
        assert requests.get(web_auth + path, timeout=10).status_code == 401, path
    for path in ("/metrics", "/healthz"):  # open, as Flower's are
        assert requests.get(web_auth + path, timeout=10).status_code == 200, path

    ok = authed.post(url, data={"_xsrf": token}, allow_redirects=False, timeout=10)
    assert ok.status_code == 303 and "done=retry-failed&n=3" in ok.headers["Location"]
    assert crawl.wait(timeout=60) and crawl.stats()["redriven"] == 3


def test_without_auth_on_loopback_controls_work_but_only_for_a_loopback_host(worker, rt, web_open, crawl_id):
    site = long_site(40)
    try:
        crawl = start_crawl(site.url("/"), crawl_id=crawl_id, **{**FAST, "host_concurrency": 1})
        session = requests.Session()
        assert session.get(web_open + "/", timeout=10).status_code == 200
        # A page that re-points its own name at 127.0.0.1 (DNS rebinding) is not served.
        rebound = session.get(web_open + "/", headers={"Host": "attacker.example:80"}, timeout=10)
        assert rebound.status_code == 403
        token = xsrf_of(session, web_open, crawl_id)
        cancelled = session.post(f"{web_open}/crawl/{crawl_id}/cancel", data={"_xsrf": token},
                                 headers={"Host": "attacker.example"}, allow_redirects=False, timeout=10)
        assert cancelled.status_code == 403 and crawl.stats()["state"] == "running"
        resp = session.post(f"{web_open}/crawl/{crawl_id}/cancel", data={"_xsrf": token}, allow_redirects=False,
                            timeout=10)
        assert resp.status_code == 303
        assert crawl.wait(timeout=60) and crawl.stats()["state"] == "cancelled"
    finally:
        site.stop()


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc")
@pytest.mark.parametrize("how", ["flag", "nothing"])
def test_a_non_loopback_address_without_auth_is_refused_in_one_line(settings, tmp_path, how):
    port = free_port()
    args = [sys.executable, "-m", "crawltasks.cli", "web", "--host", "0.0.0.0", "--port", str(port)]
    env = service_env(settings, **({"CRAWLTASKS_WEB_AUTH": ""} if how == "nothing" else {}))
    if how == "flag":
        args += ["--basic-auth", ""]  # an empty --basic-auth is no auth
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refusing to listen on 0.0.0.0 without authentication" in lines[0], lines
    assert listening(port) == set()


def test_auth_from_the_environment_allows_a_public_address(settings, tmp_path):
    port = free_port()
    proc = Proc([sys.executable, "-m", "crawltasks.cli", "web", "--host", "0.0.0.0", "--port", str(port)],
                service_env(settings, CRAWLTASKS_WEB_AUTH=f"{USER}:{PASSWORD}"), tmp_path / "web.log")
    try:
        proc.wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok, "crawltasks web")
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 401
        assert requests.get(f"http://127.0.0.1:{port}/", auth=(USER, PASSWORD), timeout=5).status_code == 200
    finally:
        proc.stop()
