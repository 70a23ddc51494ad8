"""Secrets a crawl is given stay where the requests need them, and only there; a private seed opens its
own origin, not its machine. Real worker, the machine's Redis, SecantusDB, fixture sites on 127.0.0.1."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from celery import signals
from rich.console import Console

from crawltasks import logs, start_crawl
from crawltasks.http.guard import Allowance, private_seed_hosts
from crawltasks.monitor.watch import list_rows, plain_list, watch
from crawltasks.settings import CrawlOptions
from crawltasks.urls import canonicalize, redact, restore_userinfo, without_userinfo

from .sites import FAST, SiteServer, page, redirect, serve, status

USER, PASSWORD = "Alice", "SeedPw123"
GOOD_AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
HEADER_SECRET, COOKIE_SECRET = "HeaderSecret1", "CookieSecret2"
SECRETS = (PASSWORD, HEADER_SECRET, COOKIE_SECRET)


# --- the rules, pure ---------------------------------------------------------------------------------
def test_userinfo_keeps_its_case_only_scheme_and_host_do_not():
    assert canonicalize("HTTP://Alice:SeedPw123@Example.COM:80/a") == "http://Alice:SeedPw123@example.com/a"
    assert canonicalize("http://Alice:SeedPw123@127.0.0.1:8000") == "http://Alice:SeedPw123@127.0.0.1:8000/"
    assert canonicalize("http://Al:Pw@Host/x?b=1&a=2") == "http://Al:Pw@host/x?a=2&b=1"


@pytest.mark.parametrize(("text", "shown"), [
    ("http://Alice:SeedPw123@host/", "http://Alice:***@host/"),
    ("http://a:p@ss@host/x", "http://a:***@host/x"),  # an unencoded "@" in the password leaves nothing on show
    ("https://tok3n@host/", "https://***@host/"),  # a lone user name is how tokens travel
    ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("HTTP 404 from http://u:p@h/x; redirect 1 to 'https://v:w@k:81/'", "HTTP 404 from http://u:***@h/x; "
     "redirect 1 to 'https://v:***@k:81/'"),
    ("http://host/x?mail=a@b.org", "http://host/x?mail=a@b.org"),
    ("write to bob@example.org", "write to bob@example.org"),
    ("http://Alice:***@host/", "http://Alice:***@host/"),
])
def test_redact_masks_passwords_in_urls_and_text(text, shown):
    assert redact(text) == shown


def test_redact_masks_sensitive_headers_and_cookie_values():
    options = CrawlOptions(headers={"Authorization": "Bearer x1", "X-Api-Key": "k1", "Accept": "text/html",
                                    "Proxy-Authorization": "Basic y1", "X-Auth-Token": "t1"},
                           cookies={"sid": "c1", "theme": "c2"}).to_dict()
    shown = redact(options)
    assert shown["headers"] == {"Authorization": "***", "X-Api-Key": "***", "Accept": "text/html",
                                "Proxy-Authorization": "***", "X-Auth-Token": "***"}
    assert shown["cookies"] == {"sid": "***", "theme": "***"}
    assert shown["host_delay"] == options["host_delay"] and options["cookies"]["sid"] == "c1"  # a copy
    line = logs.crawl_started("c", ["http://Alice:SeedPw123@h/"], {**options, "cookie": "sid=c1", "token": "t"})
    assert "Alice:***@h" in line and "SeedPw123" not in line


def test_referer_and_retry_helpers():
    assert without_userinfo("http://Alice:SeedPw123@h:81/x?y=1") == "http://h:81/x?y=1"
    assert without_userinfo("http://h/x") == "http://h/x"
    seeds = ["http://Alice:SeedPw123@127.0.0.1:8000/", "http://tok@127.0.0.1:8001/"]
    assert restore_userinfo("http://Alice:***@127.0.0.1:8000/p", seeds) == "http://Alice:SeedPw123@127.0.0.1:8000/p"
    assert restore_userinfo("http://***@127.0.0.1:8001/q", seeds) == "http://tok@127.0.0.1:8001/q"
    for other in ("http://Bob:***@127.0.0.1:8000/", "http://Alice:***@127.0.0.1:8002/", "https://Alice:***@127.0.0.1:8000/"):
        assert restore_userinfo(other, seeds) == other


def test_plain_log_calls_are_redacted(caplog):
    caplog.set_level(logging.INFO, logger="crawltasks")
    logging.getLogger("crawltasks").warning("robots.txt of %s: %r", "http://Alice:SeedPw123@h", ValueError("x"))
    assert caplog.records[-1].getMessage() == "robots.txt of http://Alice:***@h: ValueError('x')"


# --- a crawl behind basic auth ------------------------------------------------------------------------
def requires_auth(route):
    """The route for requests with the right basic-auth credentials; 401 for any other."""
    def guarded(server: SiteServer, path: str):
        if server.current.hit.headers.get("authorization") != GOOD_AUTH:
            return 401, {"WWW-Authenticate": 'Basic realm="test"'}, b"who are you?"
        return route(server, path)
    return guarded


def later(server: SiteServer, path: str):
    return (500, {}, b"not yet") if server.broken else page("Later")(server, path)


@pytest.fixture
def private_site() -> Iterator[SiteServer]:
    routes = {
        "/": page("Home", ["p/1", "/p/2", "/moved", "/missing", "/later"]),
        "/p/1": page("One", ["/p/2"]),
        "/p/2": page("Two"),
        "/moved": redirect("/p/3"),
        "/p/3": page("Three"),
        "/missing": status(404),
        "/later": later,
    }
    server = serve({path: requires_auth(route) for path, route in routes.items()})
    server.broken = True
    yield server
    server.stop()


@pytest.fixture
def published() -> Iterator[dict[str, list]]:
    """What the worker publishes and returns while the test runs: task labels (the argsrepr Flower
    shows) and task results (Flower's result column, the worker's "succeeded" log line)."""
    seen: dict[str, list] = {"labels": [], "results": []}

    def on_publish(sender=None, headers=None, **_):
        if str(sender).startswith("crawltasks.") and headers:
            seen["labels"].append(headers.get("argsrepr"))

    def on_success(sender=None, result=None, **_):
        seen["results"].append(repr(result))

    signals.before_task_publish.connect(on_publish, weak=False)
    signals.task_success.connect(on_success, weak=False)
    yield seen
    signals.before_task_publish.disconnect(on_publish)
    signals.task_success.disconnect(on_success)


def test_a_seed_with_credentials_sends_them_exactly_and_shows_them_nowhere(
        worker, rt, private_site, crawl_id, caplog, published, tmp_path):
    caplog.set_level(logging.INFO, logger="crawltasks")
    seed = f"http://{USER}:{PASSWORD}@127.0.0.1:{private_site.port}/"
    crawl = start_crawl(seed, crawl_id=crawl_id, spider="test-titles", max_retries=0,
                        headers={"X-Api-Key": HEADER_SECRET}, cookies={"sid": COOKIE_SECRET}, **FAST)
    try:
        assert crawl.wait(timeout=60), crawl.stats()

        # The server saw the exact credentials on every page (a lowercased password is answered 401).
        hits = [h for h in private_site.hits if h.path != "/robots.txt"]
        assert {h.path for h in hits} == {"/", "/p/1", "/p/2", "/moved", "/p/3", "/missing", "/later"}
        assert all(h.headers.get("authorization") == GOOD_AUTH for h in hits), [h.headers for h in hits]
        assert all(h.headers.get("x-api-key") == HEADER_SECRET for h in hits)
        assert all(f"sid={COOKIE_SECRET}" in h.headers.get("cookie", "") for h in hits)
        # Linked pages say where they were found, never with the credentials.
        referers = {h.path: h.headers.get("referer") for h in hits}
        assert referers["/p/1"] == f"http://127.0.0.1:{private_site.port}/"
        assert all(r is None or "@" not in r for r in referers.values()), referers

        pages, failures, items = crawl.pages(), crawl.failures(), crawl.items()
        assert {urlsplit(p["url"]).path for p in pages} == {"/", "/p/1", "/p/2", "/p/3"}
        assert {(urlsplit(f["url"]).path, f["reason"]) for f in failures} == {("/missing", "http_404"),
                                                                            ("/later", "http_500")}
        shown = f"http://{USER}:***@127.0.0.1:{private_site.port}/"
        assert all(p["url"].startswith(shown) for p in pages) and all(f["url"].startswith(shown) for f in failures)
        moved = next(p for p in pages if p.get("requested_url"))
        assert moved["requested_url"] == shown + "moved"
        assert items and all(i["url"].startswith(shown) for i in items)
        assert "Alice:***@" in next(f for f in failures if f["reason"] == "http_404")["message"]
        export = tmp_path / "export.jsonl"
        crawl.export(str(export))

        out = io.StringIO()
        watch(crawl.id, console=Console(file=out, width=160, color_system=None), rt=rt, max_updates=1)
        shown_anywhere = {
            "documents": json.dumps([pages, failures, items], default=str),
            "export": export.read_text(),
            "logs": caplog.text,
            "labels": json.dumps(published["labels"]),
            "results": json.dumps(published["results"]),
            "stats": json.dumps(crawl.stats()),
            "list": plain_list(list_rows(rt)) + json.dumps(list_rows(rt)),
            "watch": out.getvalue(),
        }
        for where, text in shown_anywhere.items():
            for secret in SECRETS:
                assert secret not in text, f"{secret} in the {where}"
        assert shown in shown_anywhere["watch"] and shown in shown_anywhere["export"]
        assert any(shown in label for label in published["labels"])
        failed_line = next(r.getMessage() for r in caplog.records if "request.failed" in r.getMessage()
                           and "/missing" in r.getMessage())
        assert shown + "missing" in failed_line

        # retry-failed sends the stored (redacted) URL again with the seed's credentials.
        private_site.broken = False
        assert crawl.retry_failed("http_500") == 1
        assert crawl.wait(timeout=60), crawl.stats()
        assert [h.headers.get("authorization") for h in private_site.hits if h.path == "/later"] == [GOOD_AUTH] * 2
        assert "/later" in {urlsplit(p["url"]).path for p in crawl.pages()}
    finally:
        rt.state.delete_crawl(crawl.id)
        rt.storage.delete_crawl(crawl.id)


# --- a private seed opens its origin, not its machine ------------------------------------------------------
def test_private_seeds_allow_their_own_origin_only():
    seeds = ["http://127.0.0.1:8000/", "http://localhost/", "http://93.184.216.34/", "http://[::1]:81/"]
    origins = private_seed_hosts(seeds)
    assert origins == ["http://127.0.0.1:8000", "http://[::1]:81", "http://localhost:80"]
    own = Allowance.of(CrawlOptions(private_hosts=origins))
    assert own.allows_host("127.0.0.1", 8000, "http") and own.allows_host("localhost", None, "http")
    assert own.allows_host("::1", 81, "http")
    for host, port, scheme in (("127.0.0.1", 8001, "http"), ("127.0.0.1", 8000, "https"), ("localhost", 8080, "http"),
                               ("::1", 82, "http"), ("127.0.0.2", 8000, "http")):
        assert not own.allows_host(host, port, scheme), (host, port, scheme)
    wider = Allowance.of(CrawlOptions(private_hosts=["127.0.0.1:9000", "[::1]", "internal.example"]))
    assert wider.allows_host("127.0.0.1", 9000, "https") and not wider.allows_host("127.0.0.1", 9001, "http")
    assert wider.allows_host("::1", 1234, "http") and wider.allows_host("Internal.Example.", 22, "http")


@pytest.fixture
def other_service() -> Iterator[SiteServer]:
    """Another service on the seed's machine: nothing of the crawl may reach it unless asked to."""
    server = serve({"/": page("Admin", ["/secret"]), "/secret": page("Secret"), "/direct": page("Direct"),
                    "/redirected": page("Redirected"), "/via-base": page("Via base")})
    yield server
    server.stop()


def test_links_redirects_and_base_to_another_port_of_the_seed_host_are_refused(
        worker, rt, other_service, crawl_id):
    other = other_service.base
    based = (f'<!doctype html><html><head><base href="{other}/"><title>Based</title></head>'
             '<body><a href="via-base">a relative link</a></body></html>').encode()
    seed_site = serve({
        "/": page("Home", [f"{other}/direct", "/hop", "/based"]),
        "/hop": redirect(f"{other}/redirected", 302),
        "/based": lambda server, path: (200, {}, based),
    })
    try:
        crawl = start_crawl(seed_site.url("/"), crawl_id=crawl_id, max_retries=0, **FAST)
        assert crawl.wait(timeout=60), crawl.stats()
        assert other_service.hits == [], "the crawl reached another port of its seed's host"
        assert {urlsplit(p["url"]).path for p in crawl.pages()} == {"/", "/based"}
        refused = {f["url"]: f for f in crawl.failures()}
        assert set(refused) == {f"{other}/direct", seed_site.url("/hop"), f"{other}/via-base"}, refused
        assert all(f["reason"] == "ssrf_blocked" for f in refused.values())
        assert refused[seed_site.url("/hop")]["message"].startswith(f"redirect 1 to {other}/redirected")
        assert seed_site.counts["/hop"] == 1

        # Widened on purpose, by host and port: the other service is crawled.
        port = urlsplit(other).port
        wide = start_crawl(seed_site.url("/"), crawl_id=crawl_id + "-wide", max_retries=0,
                           allowed_domains=["127.0.0.1"], private_hosts=[seed_site.base, f"127.0.0.1:{port}"], **FAST)
        assert wide.wait(timeout=60), wide.stats()
        assert wide.failures() == []
        assert {"/direct", "/redirected", "/via-base"} <= set(other_service.fetched_paths())
        rt.state.delete_crawl(wide.id)
        rt.storage.delete_crawl(wide.id)
    finally:
        rt.state.delete_crawl(crawl_id)
        rt.storage.delete_crawl(crawl_id)
        seed_site.stop()
