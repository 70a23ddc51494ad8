import pytest
from w3lib.encoding import html_to_unicode

from crawltasks.models import Request
from crawltasks.spiders import Response
from crawltasks.stages.html import detect_encoding, extract_links, is_html, parse_tree, text_of, title_of


def tree(html: bytes, content_type: str = "text/html"):
    return parse_tree(html, detect_encoding(content_type, html))


def test_links_resolve_against_base_and_skip_unfollowable_schemes():
    html = b"""<html><head><base href="http://other.org/dir/"></head><body>
      <a href="a.html">a</a> <a href="/b">b</a> <a href="a.html#x">dup</a> <a href="#top">frag</a>
      <a href="javascript:void(0)">js</a> <a href="MAILTO:x@y">m</a> <a href="data:text/html,x">d</a>
      <a href=" tel:123">t</a> <a>no href</a> <a href="http://abs.com/">abs</a></body></html>"""
    links = extract_links(tree(html), "http://site.com/page")
    assert links == ["http://other.org/dir/a.html", "http://other.org/b", "http://abs.com/"]


def test_links_resolve_against_the_final_url_without_base():
    links = extract_links(tree(b'<a href="next">n</a><a href="../up">u</a>'), "http://s.com/a/b/")
    assert links == ["http://s.com/a/b/next", "http://s.com/a/up"]


def test_title_and_text_fold_whitespace_and_drop_scripts():
    t = tree(b"<html><head><title>\n  Hello\n  World </title></head><body><p>One</p><script>x=1</script> two</body>")
    assert title_of(t) == "Hello World"
    assert text_of(t) == "One two"


def test_charset_from_header_meta_and_default():
    latin = "café".encode("latin-1")
    assert detect_encoding("text/html; charset=iso-8859-1", latin) == "cp1252"
    meta = b'<meta charset="koi8-r"><title>\xf0\xd2\xc9</title>'
    assert title_of(tree(meta, "text/html")) == "При"
    assert detect_encoding("text/html", b"<p>plain</p>").replace("-", "") == "utf8"


def test_broken_and_empty_html_do_not_raise():
    assert extract_links(tree(b"<html><a href='/x'>unclosed <div><a href='/y'"), "http://s.com/") == ["http://s.com/x"]
    assert parse_tree(b"   ", "utf-8") is None
    assert title_of(tree(b"\x00\xff\xfe garbage \x89PNG")) is None


def test_html_detection():
    assert is_html("text/html; charset=utf-8", b"")
    assert is_html("application/xhtml+xml", b"")
    assert not is_html("application/pdf", b"%PDF")
    assert is_html(None, b"<!DOCTYPE html><html>")
    assert not is_html(None, b"\x89PNG")


def test_response_follow_and_lazy_soup():
    req = Request(url="http://s.com/a/", depth=2, priority="high")
    resp = Response("http://s.com/a/", 200, b"<title>T</title><h1>Head</h1><a href='x'>x</a>", req, "text/html")
    assert "soup" not in resp.__dict__
    assert resp.soup.h1.get_text() == "Head"
    follow = resp.follow("x", meta={"k": 1})
    assert (follow.url, follow.depth, follow.priority, follow.meta, follow.referer) == (
        "http://s.com/a/x", 3, "high", {"k": 1}, "http://s.com/a/")
    assert [r.url for r in resp.follow_all()] == ["http://s.com/a/x"]


@pytest.mark.parametrize(("content_type", "body"), [
    ("text/html; charset=ISO-8859-1", b"<html><head><meta charset='utf-8'></head></html>"),
    ("text/html", b"<html><head><meta http-equiv='Content-Type' content='text/html; charset=koi8-r'></head></html>"),
    ("text/html", b"\xef\xbb\xbf<html>bom wins</html>"),
    ("text/html; charset=utf-8", b"\xff\xfe<\x00h\x00"),
    ("text/html; charset=utf-16", b"<html></html>"),
    ("text/html; charset=no-such-codec", b"<meta charset='windows-1251'>"),
    (None, b"<html>nothing declared</html>"),
    ("text/html; charset=latin1", b""),
])
def test_encoding_is_chosen_as_w3lib_chooses_it(content_type, body):
    assert detect_encoding(content_type, body) == html_to_unicode(content_type or "", body)[0]


def test_follow_all_makes_the_requests_follow_makes():
    html = b'<html><body><a href="a.html">a</a> <a href="/b?x=1">b</a> <a href="http://abs.com/">c</a></body></html>'
    seed = Request(url="http://site.com/dir/page", depth=3, priority="high", meta={"k": 1})
    response = Response("http://site.com/dir/page", 200, html, seed, "text/html")
    every = list(response.follow_all())
    assert every == [response.follow(link) for link in response.links]
    assert [(r.url, r.depth, r.priority, r.referer, r.meta) for r in every][0] == \
        ("http://site.com/dir/a.html", 4, "high", "http://site.com/dir/page", {})
    assert every[0].meta is not every[1].meta  # each request owns its metadata
    low = list(response.follow_all(priority="low"))
    assert [r.priority for r in low] == ["low"] * 3 and [r.url for r in low] == [r.url for r in every]
