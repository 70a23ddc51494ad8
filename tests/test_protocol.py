"""Answers that are valid HTTP bytes but no page, and bodies and handshakes that break the protocol:
each ends failed with its reason at the first attempt, nothing of them is stored, the crawl finishes.
Real worker, the machine's Redis, SecantusDB, a raw-socket server on 127.0.0.1."""

from __future__ import annotations

from urllib.parse import urlsplit

from crawltasks import start_crawl

from .hostile import CASES, HostileServer, fixed, html

EXPECTED = {
    "/early-hints": "bad_response",  # 103 Early Hints, then the real answer on the same connection
    "/not-modified": "bad_response",  # 304 to a request that had no validator
    "/redirect-empty": "bad_redirect",  # 302 with "Location: " and nothing after it
    "/redirect-nowhere": "bad_redirect",  # 301 without a Location
    "/negative-chunk": "bad_response",  # chunk size -5
    "/bad-chunk-size": "bad_response",  # chunk size "zz"
}
OPTIONS = dict(timeout=2.0, retry_base=0.05, retry_cap=0.2, max_retries=2, host_delay=0.0, host_concurrency=8)


def test_non_pages_and_broken_framing_fail_at_once_with_their_reason(worker, rt, crawl_id):
    routes = {path: CASES[path][0] for path in EXPECTED}
    routes["/fine"] = fixed(body=html("Fine"))
    server = HostileServer(routes).start()
    try:
        seeds = [server.url(path) for path in [*EXPECTED, "/fine"]]
        crawl = start_crawl(seeds, crawl_id=crawl_id, **OPTIONS)
        assert crawl.wait(timeout=60), crawl.stats()
        got = {urlsplit(f["url"]).path: f for f in crawl.failures()}
        assert {p: f["reason"] for p, f in got.items()} == EXPECTED
        assert all(f["attempts"] == 1 and not f["transient"] for f in got.values()), got
        assert all(server.count(path) == 1 for path in EXPECTED), server.counts
        assert [urlsplit(p["url"]).path for p in crawl.pages()] == ["/fine"]
        assert "HTTP 103" in got["/early-hints"]["message"] and got["/early-hints"]["status"] == 103
        assert "HTTP 302 without a Location" in got["/redirect-empty"]["message"]
    finally:
        server.stop()


def test_https_to_a_plain_http_port_is_a_tls_failure_not_a_timeout(worker, rt, crawl_id):
    """The server waits for an HTTP request line and never answers the TLS hello: no retry mends that."""
    server = HostileServer({"/": fixed(body=html("Plain"))}).start()
    try:
        seed = server.url("/").replace("http://", "https://")
        crawl = start_crawl(seed, crawl_id=crawl_id, **OPTIONS)
        assert crawl.wait(timeout=60), crawl.stats()
        [failure] = crawl.failures()
        assert (failure["reason"], failure["attempts"], failure["transient"]) == ("ssl_error", 1, False), failure
        assert "no TLS handshake" in failure["message"]
        assert crawl.stats()["retried"] == 0
    finally:
        server.stop()
