"""fetch_one's classification on the in-memory transport, in milliseconds: the cases the real-server
tests (test_hostile, test_protocol, test_guard) pin on the wire, pinned here without a socket. That
the twin answers as the wire does is tests/test_transport_contract.py's job."""

from __future__ import annotations

import gzip
import socket
import time
import zlib
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import requests

from crawltasks.backends.memory.transport import MockTransport, response
from crawltasks.http.fetch import fetch_one
from crawltasks.models import Request
from crawltasks.settings import CrawlOptions
from crawltasks.urls import fingerprint

BASE = "http://127.0.0.1:8000"  # an IP literal: the guard decides without DNS, the crawl allows it
OPTIONS = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"])
HTML = {"Content-Type": "text/html; charset=utf-8"}
PAGE = b"<!doctype html><html><head><title>Home</title></head><body><a href='/a'>a</a></body></html>"


def fetch(routes: dict, url: str = BASE + "/", options: CrawlOptions = OPTIONS, **request):
    """(Fetched, body, transport) for one request to a scripted site."""
    transport = MockTransport.site(routes)
    fetched, body = fetch_one(Request(url=url, **request), options, transport=transport)
    return fetched, body, transport


def moved(location: str, status: int = 302):
    return (status, {"Location": location}, b"")


# -- pages -----------------------------------------------------------------------------------------

def test_a_page_with_its_headers_and_body():
    fetched, body, _ = fetch({"/": (200, {**HTML, "ETag": '"v1"', "Server": "x", "Date": "now"}, PAGE)})
    assert fetched.ok and body == PAGE and fetched.status == 200
    assert (fetched.url, fetched.content_type, fetched.size) == (BASE + "/", HTML["Content-Type"], len(PAGE))
    assert fetched.headers == {"content-type": HTML["Content-Type"], "etag": '"v1"'}  # connection headers dropped
    assert not fetched.truncated and fetched.elapsed < 1


@pytest.mark.parametrize("headers, body", [
    ({"Content-Type": "application/pdf"}, b"%PDF-1.4\n%%EOF\n"),
    ({"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n"),
    ({}, b"<html><title>Sniffed</title></html>"),  # no Content-Type: parse sniffs, fetch keeps it
    (HTML, b""),
])
def test_any_content_type_is_a_page_for_parse_to_judge(headers, body):
    fetched, got, _ = fetch({"/": (200, headers, body)})
    assert fetched.ok and got == body
    assert fetched.content_type == headers.get("Content-Type")


def test_gzip_is_decoded_and_broken_gzip_is_a_decoding_error():
    fetched, body, _ = fetch({"/": (200, {**HTML, "Content-Encoding": "gzip"}, gzip.compress(PAGE))})
    assert fetched.ok and body == PAGE
    fetched, body, _ = fetch({"/": (200, {**HTML, "Content-Encoding": "gzip"}, b"this is not gzip" * 10)})
    assert (fetched.error, fetched.transient, body) == ("decoding_error", False, None)


def test_handle_statuses_make_an_error_answer_a_page():
    options = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"], handle_statuses=[404])
    fetched, body, _ = fetch({}, options=options)
    assert fetched.ok and fetched.status == 404 and body == b"not found"


# -- statuses --------------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451])
def test_client_errors_are_final(status):
    fetched, body, transport = fetch({"/": (status, HTML, b"no")})
    assert (fetched.error, fetched.status, fetched.transient, body) == (f"http_{status}", status, False, None)
    assert len(transport.sent) == 1


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_server_errors_and_throttling_are_transient(status):
    fetched, _, _ = fetch({"/": (status, HTML, b"later")})
    assert (fetched.error, fetched.transient) == (f"http_{status}", True)


@pytest.mark.parametrize("value, expected", [
    ("7", 7.0), (" 120 ", 120.0), ("0", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon-ish", None), ("", None),
])
def test_retry_after_is_read(value, expected):
    fetched, _, _ = fetch({"/": (429, {"Retry-After": value}, b"slow down")})
    assert fetched.error == "http_429" and fetched.retry_after == expected


def test_retry_after_as_a_date_ahead():
    ahead = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    fetched, _, _ = fetch({"/": (503, {"Retry-After": ahead}, b"")})
    assert 80 < fetched.retry_after <= 90


@pytest.mark.parametrize("status", [100, 103, 304])
def test_interim_and_unasked_304_are_no_answer(status):
    fetched, body, _ = fetch({"/": (status, {"Link": "</s.css>; rel=preload"}, b"")})
    assert (fetched.error, fetched.status, fetched.transient, body) == ("bad_response", status, False, None)
    assert f"HTTP {status}" in fetched.message


def test_a_304_to_a_conditional_request_is_not_modified():
    fetched, _, transport = fetch({"/": (304, {"ETag": '"v1"'}, b"")}, headers={"If-None-Match": '"v1"'})
    assert fetched.error == "not_modified" and fetched.status == 304
    assert transport.sent[0].request.headers["If-None-Match"] == '"v1"'


# -- redirects -------------------------------------------------------------------------------------

def test_a_redirect_chain_is_followed_hop_by_hop():
    routes = {"/": moved("/one", 301), "/one": moved(BASE + "/two", 307), "/two": moved("three?x=1", 308),
              "/three": (200, HTML, PAGE)}
    fetched, body, transport = fetch(routes)
    assert fetched.ok and body == PAGE and fetched.url == BASE + "/three?x=1"
    assert transport.urls() == [BASE + "/", BASE + "/one", BASE + "/two", BASE + "/three?x=1"]
    assert fetched.fp == fingerprint(BASE + "/three?x=1", "GET")  # the page it ended on


@pytest.mark.parametrize("routes, start", [
    ({"/a": moved("/b"), "/b": moved("/a")}, "/a"),
    ({"/self": moved(BASE + "/self", 301)}, "/self"),
    ({"/x": moved("/x#frag")}, "/x"),  # the same page spelt otherwise
])
def test_redirect_loops(routes, start):
    fetched, body, transport = fetch(routes, BASE + start)
    assert (fetched.error, fetched.transient, body) == ("redirect_loop", False, None)
    assert "redirect loop" in fetched.message and len(transport.sent) <= 2


def test_too_many_redirects():
    routes = {f"/chain/{i}": moved(f"/chain/{i + 1}") for i in range(30)}
    fetched, _, transport = fetch(routes, BASE + "/chain/0")
    assert fetched.error == "too_many_redirects" and len(transport.sent) == OPTIONS.max_redirects + 1
    options = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"], max_redirects=2)
    assert fetch(routes, BASE + "/chain/0", options)[0].error == "too_many_redirects"
    assert fetch({"/": moved("/b"), "/b": moved("/c"), "/c": (200, HTML, PAGE)}, options=options)[0].ok


@pytest.mark.parametrize("headers", [{"Location": ""}, {}])
def test_a_redirect_without_location_is_bad(headers):
    fetched, body, _ = fetch({"/": (302, headers, b"")})
    assert (fetched.error, fetched.status, body) == ("bad_redirect", 302, None)
    assert "HTTP 302 without a Location" in fetched.message


@pytest.mark.parametrize("location", ["http://127.0.0.1:99999/x", "javascript:alert(1)", "http://[::1/unclosed"])
def test_a_redirect_to_an_invalid_url(location):
    fetched, _, transport = fetch({"/": moved(location)})
    assert fetched.error == "invalid_url" and len(transport.sent) == 1


def test_post_redirects_follow_the_browsers_rule():
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    routes = {"/form": moved("/done", 303), "/keep": moved("/done", 307), "/done": (200, HTML, PAGE)}
    _, _, transport = fetch(routes, BASE + "/form", method="POST", body=b"a=1", headers=form)
    post, get = (s.request for s in transport.sent)
    assert (post.method, post.body, post.headers["Content-Type"]) == ("POST", b"a=1", form["Content-Type"])
    assert get.method == "GET" and not get.body and "Content-Type" not in get.headers
    _, _, transport = fetch(routes, BASE + "/keep", method="POST", body=b"a=1", headers=form)
    assert [(s.request.method, s.request.body) for s in transport.sent] == [("POST", b"a=1")] * 2


# -- size and time caps ----------------------------------------------------------------------------

SMALL = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"], max_size=64 * 1024)


def test_a_declared_length_over_max_size_is_refused_unread():
    read = []

    def endless():
        while True:
            read.append(1)
            yield b"a" * 65536

    fetched, body, _ = fetch({"/": (200, {"Content-Length": str(10**9)}, endless())}, options=SMALL)
    assert (fetched.error, fetched.status, body) == ("too_large", 200, None)
    assert "declared" in fetched.message and read == []


def test_a_streamed_body_is_cut_at_max_size():
    fetched, _, _ = fetch({"/": (200, HTML, iter([b"<p>" * 10_000] * 1000))}, options=SMALL)
    assert fetched.error == "too_large" and "cut while streaming" in fetched.message
    assert fetched.size == SMALL.max_size


@pytest.mark.parametrize("kind, wbits", [("gzip", 31), ("deflate", 15)])
def test_a_compression_bomb_is_not_inflated_past_max_size(kind, wbits):
    comp = zlib.compressobj(9, zlib.DEFLATED, wbits)
    bomb = b"".join(comp.compress(b"\0" * (1 << 20)) for _ in range(4)) + comp.flush()
    fetched, _, _ = fetch({"/": (200, {"Content-Encoding": kind}, bomb)}, options=SMALL)
    assert fetched.error == "too_large" and fetched.size == SMALL.max_size


def test_a_body_shorter_than_its_length_is_incomplete():
    fetched, _, _ = fetch({"/": (200, {"Content-Length": "10000"}, b"<html>cut")})
    assert (fetched.error, fetched.transient) == ("incomplete_body", True)


@pytest.mark.parametrize("headers", [HTML, {**HTML, "Content-Length": "100"}])
def test_a_body_past_the_total_time_cap_is_too_slow(headers):
    """The watchdog cuts the twin's streamed body at the deadline, as it shuts a socket: a body read
    until it ends looks complete, a declared one short; both are too slow."""
    def drip():
        for _ in range(100):
            time.sleep(0.02)
            yield b"<"

    options = CrawlOptions(timeout=0.1, lease_time=10, private_hosts=["127.0.0.1"])
    started = time.monotonic()
    fetched, _, _ = fetch({"/": (200, headers, drip())}, options=options)
    assert (fetched.error, fetched.transient) == ("too_slow", True)
    assert time.monotonic() - started < 1


# -- network failures, as requests raises them -----------------------------------------------------

@pytest.mark.parametrize("exc, reason, transient", [
    (requests.ConnectionError("connection refused"), "connection_error", True),
    (requests.ReadTimeout("read timed out"), "timeout", True),
    (requests.ConnectTimeout("connect timed out"), "timeout", True),
    (requests.exceptions.SSLError("certificate verify failed"), "ssl_error", False),
    (requests.exceptions.InvalidHeader("bad header"), "bad_response", False),
    (RuntimeError("boom"), "fetch_error", False),
])
def test_transport_failures_are_classified(exc, reason, transient):
    def fail(request):
        raise exc

    fetched, body, _ = fetch({"/": fail})
    assert (fetched.error, fetched.transient, body) == (reason, transient, None)


# -- the SSRF guard decides before the transport is asked ------------------------------------------

@pytest.mark.parametrize("location", [
    "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3:8080/admin", "http://127.0.0.2:8000/canary",
    "http://[::1]:8000/canary", "http://[::ffff:10.0.0.1]/", "http://2130706433:8000/canary",
    "http://localhost:8000/canary",
])
def test_a_redirect_to_a_blocked_address_is_refused_before_sending(location):
    fetched, body, transport = fetch({"/": moved(location)})
    assert (fetched.error, body) == ("ssrf_blocked", None)
    assert fetched.message.startswith("redirect 1 to ")
    assert transport.urls() == [BASE + "/"]


@pytest.mark.parametrize("url", ["http://10.0.0.1/", "http://192.168.0.1:8080/x", "http://[fd00::1]/",
                                 "http://127.0.0.1:8001/"])
def test_a_blocked_link_sends_nothing(url):
    fetched, _, transport = fetch({}, url, options=CrawlOptions(timeout=5, private_hosts=["http://127.0.0.1:8000"]))
    assert fetched.error == "ssrf_blocked" and transport.sent == []


def test_allow_private_lets_the_request_through():
    options = CrawlOptions(timeout=5, allow_private=True)
    fetched, body, _ = fetch({"/admin": (200, HTML, PAGE)}, "http://10.0.0.1/admin", options)
    assert fetched.ok and body == PAGE


def test_names_are_judged_on_their_resolved_addresses(monkeypatch):
    answers = {"inside.test": "10.0.0.7", "outside.test": "93.184.216.34"}

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            raise socket.gaierror(f"no such name {host}")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    strict = CrawlOptions(timeout=5, private_hosts=[])
    routes = {"/": (200, HTML, PAGE), "/in": moved("http://inside.test/")}
    assert fetch(routes, "http://outside.test/", strict)[0].ok
    fetched, _, transport = fetch(routes, "http://inside.test/", strict)
    assert fetched.error == "ssrf_blocked" and "10.0.0.7" in fetched.message and transport.sent == []
    fetched, _, _ = fetch(routes, "http://nowhere.test/", strict)
    assert (fetched.error, fetched.transient) == ("dns_error", True)


# -- what is sent ----------------------------------------------------------------------------------

def test_credentials_never_travel_in_the_referer():
    _, _, transport = fetch({"/": (200, HTML, PAGE)}, referer="http://user:secret@127.0.0.1:8000/from?q=1")
    sent = transport.sent[0].request.headers
    assert sent["Referer"] == "http://127.0.0.1:8000/from?q=1"
    assert "secret" not in str(dict(sent))


def test_credentials_in_the_url_become_basic_auth():
    _, _, transport = fetch({"/": (200, HTML, PAGE)}, "http://user:secret@127.0.0.1:8000/")
    assert transport.sent[0].request.headers["Authorization"].startswith("Basic ")


def test_headers_cookies_and_timeouts_reach_the_transport():
    options = CrawlOptions(timeout=3, private_hosts=["127.0.0.1"], headers={"X-Team": "crawl"})
    _, _, transport = fetch({"/": (200, HTML, PAGE)}, options=options, cookies={"sid": "1"})
    sent = transport.sent[0]
    assert sent.request.headers["X-Team"] == "crawl" and sent.request.headers["Cookie"] == "sid=1"
    assert "gzip" in sent.request.headers["Accept-Encoding"] and sent.request.headers["User-Agent"]
    assert sent.proxies == {} and sent.timeout[1] <= 3


def test_on_send_is_told_when_the_request_goes_out():
    calls = []
    transport = MockTransport(lambda request: response(request, 200, HTML, PAGE))
    fetched, _ = fetch_one(Request(url=BASE + "/"), OPTIONS, lambda done: calls.append(1), transport=transport)
    assert fetched.ok and calls == [1, 1]  # going out, then out


def test_on_send_says_whether_the_request_is_going_out_or_out():
    calls = []
    transport = MockTransport(lambda request: response(request, 200, HTML, PAGE))
    fetch_one(Request(url=BASE + "/"), OPTIONS, calls.append, transport=transport)
    assert calls == [False, True]
