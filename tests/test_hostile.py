"""A crawl of the hostile site: every misbehaviour ends in a recorded state with a clear reason, and
the crawl finishes. Real worker, the machine's Redis, SecantusDB, a raw-socket server on 127.0.0.1."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from crawltasks import start_crawl
from crawltasks.urls import canonicalize

from .hostile import (
    CASES,
    ENTRY_POINTS,
    HUGE_RETRY_AFTER,
    INVALID_LINKS,
    N_DUP_TARGETS,
    SSRF_HOSTS,
    SSRF_LINKS,
    HostileServer,
    HostileSite,
)

MAX_RETRIES = 2
OPTIONS = dict(
    timeout=2.0, max_size=6 * 1024 * 1024, retry_base=0.05, retry_cap=0.3, max_retries=MAX_RETRIES,
    host_delay=0.0, host_concurrency=16, batch_size=8, max_retry_after=1.0,
    # The SSRF targets are in scope on purpose, so that only the guard stands between them and a fetch.
    allowed_domains=["127.0.0.1", *SSRF_HOSTS], private_hosts=["127.0.0.1"],
)
KNOWN_REASONS = {
    "http_404", "http_410", "http_429", "http_500", "http_502", "http_503", "timeout", "too_slow", "too_large",
    "decoding_error", "incomplete_body", "connection_error", "bad_response", "bad_redirect", "redirect_loop",
    "too_many_redirects", "invalid_url", "ssrf_blocked",
}


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


@pytest.fixture(scope="module")
def hostile() -> HostileSite:
    site = HostileSite().start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def crawled(worker, rt, hostile):
    """One crawl of the whole hostile site, shared by the assertions below."""
    crawl = start_crawl(hostile.url("/"), crawl_id="hostile-site", **OPTIONS)
    try:
        assert crawl.wait(timeout=180), f"the crawl did not finish: {crawl.stats()}"
        pages = crawl.pages()
        failures = crawl.failures()
        yield crawl, pages, failures
    finally:
        rt.state.delete_crawl(crawl.id)
        rt.storage.delete_crawl(crawl.id)


def outcomes(pages, failures, bases: list[str]) -> dict[str, tuple[str, str | None]]:
    """Requested URL (path on the hostile site, else the full URL) -> (kind, reason)."""
    out: dict[str, tuple[str, str | None]] = {}

    def key(url: str) -> str:
        return path_of(url) if url.startswith(tuple(bases)) else url

    for p in pages:
        k = key(p.get("requested_url") or p["url"])
        assert k not in out, f"{k} recorded twice"
        out[k] = ("page", None)
    for f in failures:
        k = key(f["url"])
        assert k not in out, f"{k} recorded twice"
        out[k] = ("failure", f["reason"])
    return out


def test_every_hostile_case_is_recorded_with_its_reason(crawled, hostile):
    crawl, pages, failures = crawled
    got = outcomes(pages, failures, hostile.bases)
    wrong = {}
    for path in dict.fromkeys(ENTRY_POINTS):
        expected = CASES[path][1]
        if path == "/never":  # the socket timeout and the total cap fire together: either is right
            ok = got.get(path) in {("failure", "timeout"), ("failure", "too_slow")}
        else:
            ok = got.get(path) == expected
        if not ok:
            wrong[path] = (got.get(path), expected)
    assert not wrong, f"recorded (got, expected): {wrong}"
    for f in failures:
        assert f["reason"] in KNOWN_REASONS and f["message"], f


def test_pages_keep_what_can_be_read(crawled, hostile):
    _, pages, _ = crawled
    by_path = {path_of(p["url"]): p for p in pages}
    assert by_path["/malformed"]["title"] == "Malformed"
    assert by_path["/truncated-html"]["title"] == "Truncated"
    assert {f"/ok/{n}" for n in range(1, 11)} <= set(by_path), "links of broken pages were not followed"
    assert by_path["/ok/8"]["requested_url"].endswith("/redirect-ok")
    assert by_path["/meta-charset"]["title"] == "\u65e5\u672c\u8a9e"
    assert by_path["/wrong-charset"]["title"].startswith("Caf")
    assert by_path["/no-content-type"]["title"] == "Sniffed"
    assert by_path["/small-gzip"]["title"] == "Gzipped"
    assert by_path["/garbage"]["title"] is None and by_path["/garbage"]["size"] == 300_000
    assert by_path["/doc.pdf"]["content_type"] == "application/pdf" and by_path["/doc.pdf"]["title"] is None
    assert by_path["/image.png"]["content_type"] == "image/png"
    assert by_path["/big-links"]["outlinks"] > 50_000


def test_statuses_retried_or_not(crawled, hostile):
    _, _, failures = crawled
    by_path = {path_of(f["url"]): f for f in failures if f["url"].startswith(tuple(hostile.bases))}
    for path in ("/missing", "/gone"):
        assert by_path[path]["attempts"] == 1 and hostile.count(path) == 1, path
    for path in ("/e500", "/e502", "/e503", "/throttled-forever", "/throttled-past-date",
                 "/throttled-bogus", "/cut-body", "/hang-up"):
        assert by_path[path]["attempts"] == MAX_RETRIES + 1, path
        assert hostile.count(path) == MAX_RETRIES + 1, path
    assert hostile.count("/flaky-503") == 3 and hostile.count("/throttled") == 2
    for path in ("/redirect-loop/a", "/bad-gzip", "/huge-streamed", "/gzip-bomb", "/not-http", "/early-hints",
                 "/not-modified", "/negative-chunk", "/bad-chunk-size", "/redirect-empty"):
        assert by_path[path]["attempts"] == 1 and hostile.count(path) == 1, path


def test_duplicate_spellings_fetched_once(crawled, hostile):
    _, pages, _ = crawled
    urls = [p["url"] for p in pages]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    for n in range(N_DUP_TARGETS):
        assert hostile.count(f"/dup/{n}") == 1, f"/dup/{n} fetched {hostile.count(f'/dup/{n}')} times"
    assert hostile.count("/query") == 1
    assert path_of(next(u for u in urls if "/query" in u)) == "/query?a=1&b=2"


def test_invalid_urls_fail_once_with_their_reason(crawled, hostile):
    crawl, _, failures = crawled
    invalid = {f["url"]: f["reason"] for f in failures if f["reason"] == "invalid_url"}
    for url in ("http://127.0.0.1:99999/bad-port", "http://127.0.0.1:port/bad-port", "http://127.0.0.1:-1/neg",
                "http://exa mple.com/space-in-host", "http://[::1/unclosed"):
        assert url in invalid, url
    by_path = {path_of(f["url"]): f["reason"] for f in failures if f["url"].startswith(hostile.base)}
    assert by_path["/a%20page%20with%20spaces"] == "http_404"
    assert by_path["/%C3%BCnicode-path"] == "http_404"
    stats = crawl.stats()
    assert stats["filtered_offsite"] >= 50_000  # the big page's off-site links, dropped without a lookup
    assert len(INVALID_LINKS) > len(invalid)  # unfollowable schemes never become requests


def test_ssrf_links_and_redirects_refused_before_any_request(crawled, hostile):
    _, _, failures = crawled
    refused = {f["url"] for f in failures if f["reason"] == "ssrf_blocked"}
    links = {canonicalize(hostile.fill(link.encode()).decode()) for link in SSRF_LINKS}
    redirects = {hostile.url(p) for p, (_, outcome) in CASES.items() if outcome == ("failure", "ssrf_blocked")}
    assert refused == links | redirects
    assert hostile.canary_hits() == {}, "a request reached a path only a guard failure could reach"


def test_counters_equal_the_stored_set(crawled):
    crawl, pages, failures = crawled
    stats = crawl.stats()
    assert stats["state"] == "finished" and stats["pending"] == 0
    assert stats["stored"] == len(pages) == crawl.counts()["pages"]
    assert stats["failed"] == len(failures) == crawl.counts()["failures"]
    assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]


def test_a_huge_retry_after_does_not_stall_the_crawl(worker, rt, crawl_id):
    """Retry-After of an hour, or a date years ahead, from a hostile server: retried within the crawl's
    retry cap, then recorded as http_429; the crawl finishes."""
    servers = [HostileServer({path: handler}).start() for path, handler in HUGE_RETRY_AFTER.items()]
    try:
        seeds = [s.url(path) for s, path in zip(servers, HUGE_RETRY_AFTER, strict=True)]
        crawl = start_crawl(seeds, crawl_id=crawl_id, **{**OPTIONS, "allowed_domains": None})
        assert crawl.wait(timeout=60), f"a Retry-After far ahead stalled the crawl: {crawl.stats()}"
        assert {f["reason"] for f in crawl.failures()} == {"http_429"}
        assert all(f["attempts"] == MAX_RETRIES + 1 for f in crawl.failures())
    finally:
        for s in servers:
            s.stop()
