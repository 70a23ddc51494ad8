import pytest

from crawltasks.urls import InvalidURL, canonicalize, fingerprint, host_key, in_domains, raw_fingerprint


@pytest.mark.parametrize(("url", "expected"), [
    ("HTTP://Example.COM:80/a?b=2&a=1#frag", "http://example.com/a?a=1&b=2"),
    ("https://x.com:443", "https://x.com/"),
    ("https://x.com:8443/p", "https://x.com:8443/p"),
    ("http://x.com/%7Euser/", "http://x.com/~user/"),
    ("http://x.com/a b", "http://x.com/a%20b"),
    ("  http://x.com/p  ", "http://x.com/p"),
    ("http://bücher.de/x", "http://xn--bcher-kva.de/x"),
])
def test_canonical_form(url, expected):
    assert canonicalize(url) == expected


@pytest.mark.parametrize("url", [
    "ftp://x.com/f", "javascript:void(0)", "mailto:a@b.c", "data:text/html,hi", "/relative",
    "http://x.com:99999/", "http:///nohost", "http://exa mple.com/",
])
def test_unfetchable_urls_are_rejected_with_a_reason(url):
    with pytest.raises(InvalidURL) as info:
        canonicalize(url)
    assert str(info.value)


def test_spellings_of_one_page_share_a_fingerprint():
    spellings = ["http://Example.com/p?b=1&a=2", "http://example.com:80/p?a=2&b=1#x", "HTTP://EXAMPLE.COM/p?a=2&b=1"]
    assert len({fingerprint(canonicalize(u)) for u in spellings}) == 1


def test_fingerprint_depends_on_method_and_chosen_meta_only():
    url = canonicalize("http://x.com/")
    assert fingerprint(url, "GET") != fingerprint(url, "POST")
    a = fingerprint(url, meta={"page": 1, "noise": "a"}, meta_fields=["page"])
    b = fingerprint(url, meta={"page": 1, "noise": "b"}, meta_fields=["page"])
    c = fingerprint(url, meta={"page": 2}, meta_fields=["page"])
    assert a == b != c
    assert fingerprint(url, meta={"page": 1}) == fingerprint(url)
    assert len(fingerprint(url)) == 40
    assert raw_fingerprint("http://x.com:99999/") != raw_fingerprint("http://x.com:99998/")


def test_domains_and_hosts():
    assert in_domains("example.com", ["example.com"])
    assert in_domains("blog.example.com", ["example.com"])
    assert not in_domains("badexample.com", ["example.com"])
    assert not in_domains("example.com.evil.org", ["example.com"])
    assert host_key("https://A.com/x") == "a.com:443"
    assert host_key("http://a.com:8080/x") == "a.com:8080"


def _spellings(rng, pieces, n, max_len):
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, max_len))) for _ in range(n)]


def test_the_fast_paths_agree_with_the_full_ones():
    """Plain URLs and simple relative links skip w3lib and urljoin; on anything they accept, the
    result must be what the full code gives (thousands of generated spellings, edge cases favoured)."""
    import random
    from urllib.parse import urljoin, urlsplit

    from crawltasks import urls

    rng = random.Random(7)
    hosts = ["h", "example.com", "a-b.example.org", "127.0.0.1", "Host.com", "xn--bcher-kva.de", "a..b", "-a"]
    ports = ["", ":80", ":443", ":8080", ":0", ":080", ":65535", ":65536", ":x"]
    path_pieces = ["/", "a", "B", "1", ".", "..", "./", "../", "-", "_", "~", "%41", "%7e", " ", ";", ":", "@",
                   "?", "#", "=", "&", "é", "//", "\\", "index.html"]
    fast_canonical = 0
    for scheme in ("http", "https", "HTTP"):
        for host in hosts:
            for port in ports:
                for path in _spellings(rng, path_pieces, 40, 6):
                    url = f"{scheme}://{host}{port}{path}"
                    fast = urls._plain_canonical(url)
                    if fast is not None:
                        fast_canonical += 1
                        assert fast == urls._full_canonical(url), url
    assert fast_canonical > 150  # the fast path is taken, not just never wrong

    bases = ["http://h", "http://h/", "http://h/a", "http://h/a/", "http://h/a/b.html?x=1#f", "https://h:8443/a;p/b",
             "http://h/a/b/c/", "http://h//a", "ftp://h/a/", "http:///a", "http://h/a?q/r"]
    href_pieces = ["a", "b", "/", ".", "./", "../", "..", "-", "_", "~", "x.html", "?", "#", ":", "\\", " ", "%20",
                   "//", "mailto:", "http://o/"]
    fast_join = 0
    for base in bases:
        for href in _spellings(rng, href_pieces, 400, 5) + ["../" + h for h in _spellings(rng, href_pieces, 100, 4)]:
            want = urljoin(base, href.strip())
            got = urls.join(base, href)
            if got != want:
                raise AssertionError(f"join({base!r}, {href!r}) = {got!r}, urljoin gives {want!r}")
            fast_join += urls._directory(base) is not None and urls._SIMPLE_RELATIVE.fullmatch(href.strip()) is not None
    assert fast_join > 200

    for host in hosts:
        for port in ports:
            url = f"http://{host}{port}/p"
            try:
                parts = urlsplit(url)
                want = ((parts.hostname or "").lower(), f"{(parts.hostname or '').lower()}:{parts.port or 80}")
            except ValueError:
                want = ((parts.hostname or "").lower(), "")
            assert (urls.host_of(url), urls.host_key(url)) == want, url
