"""The stages decide, then act: what the spider makes of a page is returned (``parse_page`` ->
``PageMade``), where a fetched request goes is returned (``settle`` -> ``Settled``), and what the
fetch engine hands on is a new ``Fetched``, never the one it was given. No service, milliseconds.
The store stage's decision: tests/test_storing_unit.py."""

from __future__ import annotations

from crawltasks.backends.memory.runtime import twin_runtime
from crawltasks.models import Fetched, Request
from crawltasks.settings import CrawlOptions
from crawltasks.spiders import Response, Spider
from crawltasks.stages.outbox import Outbox, Settled, settle
from crawltasks.stages.parsing import PageMade, parse_page
from crawltasks.urls import canonicalize, fingerprint

from .test_outbox import taken

PAGE = (b"<html><head><title>Shop</title></head><body><a href='/a'>a</a><a href='/b'>b</a>"
        b"<p>" + b"words " * 50 + b"</p></body></html>")
SITEMAP = (b"<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
           b"<url><loc>http://s.test/x</loc></url><url><loc>http://s.test/y</loc></url></urlset>")


class Shop(Spider):
    name = "stages-unit-shop"

    def parse(self, response: Response):
        yield {"title": response.title}
        yield from response.follow_all()


class Skipping(Shop):
    name = "stages-unit-skipping"

    def after_response(self, response: Response):
        return None


def fetched(path: str, body: bytes, content_type: str = "text/html") -> Fetched:
    url = canonicalize(f"http://s.test{path}")
    req = Request(url=url, fp=fingerprint(url), ticket=fingerprint(url), depth=0)
    return Fetched(request=req, status=200, url=url, fp=req.fp, content_type=content_type, size=len(body),
                   fetched_at="t")


def test_a_page_returns_its_fields_follow_ups_and_items_and_changes_nothing_it_was_given():
    f, options = fetched("/", PAGE), CrawlOptions(store_text=True)
    before = (f.to_dict(), options)
    made = parse_page(options, "c", Shop(crawl_id="c"), f, PAGE)
    assert made.kept and made.parsed == 1
    assert made.fields["title"] == "Shop" and made.fields["outlinks"] == 2
    assert made.fields["text"].startswith("a b words")
    assert sorted(r.url for r in made.follow) == ["http://s.test/a", "http://s.test/b"]
    assert made.items == [{"title": "Shop"}]
    assert (f.to_dict(), options) == before


def test_text_is_kept_only_when_asked():
    made = parse_page(CrawlOptions(), "c", Shop(crawl_id="c"), fetched("/", PAGE), PAGE)
    assert "text" not in made.fields


def test_a_hook_that_drops_the_page_is_told_apart():
    assert parse_page(CrawlOptions(), "c", Skipping(crawl_id="c"), fetched("/", PAGE), PAGE) == PageMade(kept=False)


def test_a_sitemap_is_followed_without_the_spider():
    f = fetched("/sitemap.xml", SITEMAP, "application/xml")
    made = parse_page(CrawlOptions(), "c", Shop(crawl_id="c"), f, SITEMAP)
    assert made.fields == {"sitemap": "urlset", "outlinks": 2} and made.parsed == 0 and made.items == []
    assert [r.url for r in made.follow] == ["http://s.test/x", "http://s.test/y"]
    assert all(r.referer == f.url and r.depth == 0 for r in made.follow)


def test_the_outbox_hands_on_new_results_and_leaves_the_given_ones_alone():
    rt = twin_runtime(options={"c": CrawlOptions(batch_size=10)})
    outbox = Outbox(rt)
    [req] = taken(rt, "/ok")
    given = Fetched(request=req, status=200, url=req.url, fp=req.fp, fetched_at="t")
    before = given.to_dict()
    outbox.sort("c", req, given, b"<p>hi</p>")
    outbox.flush(now=0.0, everything=True)
    [sent] = rt.sender.fetched()
    assert sent.body_key and given.to_dict() == before and given.body_key is None


def test_a_fetched_page_goes_on_to_parse_with_its_body():
    f = fetched("/", PAGE)
    assert settle(f.request, f, PAGE, CrawlOptions()) == Settled(result=f, body=PAGE, count="fetched")


def test_a_redirect_to_a_page_already_seen_goes_on_without_its_body_and_leaves_the_given_result_alone():
    f = fetched("/", PAGE)
    before = f.to_dict()
    settled = settle(f.request, f, PAGE, CrawlOptions(), duplicate=True)
    assert settled.result is not None and settled.result.error == "duplicate_redirect"
    assert (settled.body, settled.count, f.to_dict()) == (None, "fetched", before)


def test_a_transient_failure_is_tried_again_while_it_has_retries_left():
    req = fetched("/", PAGE).request
    busy = Fetched(request=req, status=503, error="http_503", transient=True)
    before = req.to_dict()
    settled = settle(req, busy, None, CrawlOptions(max_retries=1, retry_base=1.0, retry_cap=10.0))
    assert settled.result is None and settled.retry is not None and settled.count == "retried"
    assert (settled.retry.url, settled.retry.attempt, req.to_dict()) == (req.url, 1, before)
    assert 0.8 <= settled.countdown <= 1.2
    last = settle(settled.retry, busy, None, CrawlOptions(max_retries=1))
    assert last == Settled(result=busy), "out of retries: on to parse, recorded failed"
