"""Crawl control: robots.txt, back-off, hooks, identities, scope, lifecycle, sitemaps. On the twins (whole
crawls in this process, sites in memory, the real clock), but for the identity providers' proxy, which
only a real transport applies: that one on a real worker."""

import gzip
from urllib.parse import urlsplit

from crawltasks import Crawl, Request, start_crawl
from crawltasks.backends.memory.driver import TwinDriver, run_crawl

from . import spiders
from .sites import FAST, SiteServer, TwinSite, html, on_twins, page, serve, slow_page, status, twin_site


def paths(crawl: Crawl) -> set[str]:
    return {urlsplit(p["url"]).path for p in crawl.pages()}


def starts(server: SiteServer, prefix: str = "/") -> list[float]:
    return sorted(h.started for h in server.hits if h.path.startswith(prefix) and h.path != "/robots.txt")


def test_robots_disallow_is_recorded_and_crawl_delay_spaces_requests(crawl_id):
    routes = {"/": page("Home", ["/private/x", "/pub/1", "/pub/2", "/pub/3"]),
              "/robots.txt": lambda s, p: (200, {"Content-Type": "text/plain"},
                                           b"User-agent: *\nDisallow: /private\nCrawl-delay: 0.4\n")}
    routes.update({f"/pub/{i}": page(f"Pub {i}") for i in range(1, 4)})
    routes["/private/x"] = page("Secret")
    server = twin_site(routes)
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert paths(crawl) == {"/", "/pub/1", "/pub/2", "/pub/3"}
        assert "/private/x" not in server.counts and server.counts["/robots.txt"] == 1
        [skip] = crawl.failures(reason="robots_disallowed")
        assert skip["outcome"] == "skipped" and skip["url"].endswith("/private/x")
        stats = crawl.stats()
        assert stats["skipped"] == 1 and stats["skipped_robots"] == 1 and stats["failed"] == 0
        gaps = [b - a for a, b in zip(starts(server), starts(server)[1:], strict=False)]
        assert min(gaps) >= 0.35, gaps  # Crawl-delay 0.4 s, measured by the server
    finally:
        rt.close()


def test_ignoring_robots_is_a_crawl_switch(crawl_id):
    server = twin_site({"/": page("Home", ["/private/x"]), "/private/x": page("Secret"),
                        "/robots.txt": lambda s, p: (200, {}, b"User-agent: *\nDisallow: /\n")})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, obey_robots=False, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30)
        assert paths(crawl) == {"/", "/private/x"} and "/robots.txt" not in server.counts
    finally:
        rt.close()


def test_429_with_retry_after_holds_the_host_while_others_go_on(crawl_id):
    limited = twin_site({"/": page("A", ["/limited"]), "/after": page("After"),
                     "/limited": lambda s, p: ((429, {"Retry-After": "2"}, b"slow down") if s.counts[p] == 1
                                               else (200, {}, b"<title>Limited ok</title><a href='/after'>a</a>"))})
    chain = twin_site({f"/b{i}": page(f"B {i}", [f"/b{i + 1}"]) for i in range(40)}, port=8081)
    rt = on_twins(limited, chain)
    try:
        opts = dict(FAST, host_delay=0.1, allowed_domains=["127.0.0.1"])
        crawl = start_crawl([limited.url("/"), chain.url("/b0")], crawl_id=crawl_id, rt=rt, **opts)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert {"/limited", "/after", "/b39"} <= paths(crawl)
        hits = [h for h in limited.hits if h.path != "/robots.txt"]
        refused = next(h for h in hits if h.path == "/limited")
        later = [h.started for h in hits if h.started > refused.started]
        assert min(later) - refused.started >= 1.9, "the host was asked again before Retry-After"
        others = [t for t in starts(chain) if refused.started < t < refused.started + 1.9]
        assert len(others) >= 5, "other hosts should keep going while one backs off"
        assert crawl.stats()["retried"] == 1
    finally:
        rt.close()


def test_hook_completes_urls_from_metadata(crawl_id):
    server = twin_site({f"/item/{i}": page(f"Item {i}") for i in range(5)})
    rt = on_twins(server)
    try:
        seeds = [Request(server.url("/item"), meta={"item_id": i}) for i in range(5)]
        crawl = start_crawl(seeds, spider="test-item-ids", crawl_id=crawl_id, fingerprint_meta=["item_id"],
                            item_meta=True, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30), crawl.stats()
        assert paths(crawl) == {f"/item/{i}" for i in range(5)}
        assert sorted(i["item_id"] for i in crawl.items()) == [0, 1, 2, 3, 4]
        assert "/item" not in server.counts
    finally:
        rt.close()


def test_hooks_skip_requests_and_drop_items(crawl_id):
    server = twin_site({"/": page("Home", ["/skip/1", "/keep", "/drop"]), "/keep": page("Kept"),
                        "/drop": page("drop me"), "/skip/1": page("Never")})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider="test-skipping", crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30)
        assert paths(crawl) == {"/", "/keep", "/drop"} and "/skip/1" not in server.counts
        assert sorted(i["title"] for i in crawl.items()) == ["Home", "Kept"]
        assert crawl.failures(reason="skipped_by_hook")[0]["url"].endswith("/skip/1")
    finally:
        rt.close()


def test_identity_providers_are_called(worker, rt, crawl_id):
    server = serve({"/": page("Home", ["/next"]), "/next": page("Next")})
    proxy = SiteServer()
    proxy.start()
    for path in ("/", "/next", "/robots.txt"):
        route = server.routes[path] if path in server.routes else status(404)
        proxy.routes[server.url(path)] = route
    spiders.PROXY["url"] = proxy.base
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, user_agent_provider="tests.spiders:agent_provider",
                            cookie_provider="tests.spiders:cookie_provider",
                            proxy_provider="tests.spiders:proxy_provider", headers={"X-Crawl": "yes"}, **FAST)
        assert crawl.wait(timeout=30), crawl.stats()
        assert paths(crawl) == {"/", "/next"}
        assert not server.hits, "requests must go through the proxy"
        pages = [h for h in proxy.hits if not h.path.endswith("/robots.txt")]
        assert {h.path for h in pages} == {server.url("/"), server.url("/next")}
        assert all(h.headers["user-agent"] == "crawltasks-test-agent/1.0" for h in proxy.hits)
        assert all(h.headers["x-crawl"] == "yes" for h in pages)
        assert {h.headers["cookie"] for h in pages} == {"session=s-0", "session=s-1"}
    finally:
        spiders.PROXY["url"] = None
        server.stop()
        proxy.stop()


def test_random_user_agent_rotates(crawl_id):
    server = twin_site({f"/{i}": page(str(i)) for i in range(30)})
    rt = on_twins(server)
    try:
        crawl = start_crawl([server.url(f"/{i}") for i in range(30)], crawl_id=crawl_id, user_agent="random",
                            obey_robots=False, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30)
        assert len({h.headers["user-agent"] for h in server.hits}) > 1
    finally:
        rt.close()


def test_scope_limits_are_counted(crawl_id):
    routes = {"/": page("Home", [f"/a/{i}" for i in range(10)] + ["/deny/1", "/other/1"])}
    routes.update({f"/a/{i}": page(f"A {i}") for i in range(10)})
    server = twin_site(routes)
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, max_pages=6, deny_patterns=["/deny/"],
                            allow_patterns=[r"/$", "/a/", "/deny/"], rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30)
        stats = crawl.stats()
        assert stats["scheduled"] == 6 and len(crawl.pages()) == 6
        assert stats["filtered_denied"] == 1 and stats["filtered_not_allowed"] == 1
        assert stats["filtered_max_pages"] == 5
    finally:
        rt.close()


def test_max_pages_per_host(crawl_id):
    server = twin_site({"/": page("Home", [f"/{i}" for i in range(10)]),
                        **{f"/{i}": page(str(i)) for i in range(10)}})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), crawl_id=crawl_id, max_pages_per_host=4, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30)
        assert len(crawl.pages()) == 4 and crawl.stats()["filtered_max_pages_per_host"] == 7
    finally:
        rt.close()


def slow_site(n: int, delay: float) -> dict:
    return {f"/s/{i}": slow_page(f"S {i}", [f"/s/{i + 1}", f"/s/{(i + 2) % n}"], delay) for i in range(n)}


def test_cancel_finishes_with_consistent_counters(crawl_id):
    server = twin_site(slow_site(200, 0.05))
    rt = on_twins(server)
    driver = TwinDriver(rt)
    try:
        crawl = start_crawl(server.url("/s/0"), crawl_id=crawl_id, obey_robots=False, rt=rt, **FAST)
        assert driver.run_until(lambda: crawl.stats()["stored"] >= 5, timeout=30)
        assert crawl.cancel() is True
        assert driver.run(crawl, timeout=30), crawl.stats()
        stats = crawl.stats()
        assert stats["state"] == "cancelled" and stats["pending"] == 0
        assert stats["scheduled"] == stats["stored"] + stats["failed"] + stats["skipped"]
        assert stats["stored"] < 200 and len(crawl.pages()) == stats["stored"]
        fetched = len(server.hits)
        # letting time pass is the point: a cancelled crawl must fetch nothing meanwhile (rounds go on)
        assert not driver.run_until(lambda: len(server.hits) > fetched, timeout=0.5)
        assert len(server.hits) == fetched, "a cancelled crawl kept fetching"
        assert crawl.cancel() is False
    finally:
        driver.close()
        rt.close()


def test_max_run_time_cancels(crawl_id):
    server = twin_site(slow_site(300, 0.05))
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/s/0"), crawl_id=crawl_id, max_run_time=1.0, obey_robots=False, rt=rt,
                            **FAST)
        assert run_crawl(rt, crawl, timeout=30), crawl.stats()
        assert crawl.stats()["state"] == "cancelled" and crawl.stats()["stored"] < 300
    finally:
        rt.close()


def test_two_crawls_at_once_stay_apart(crawl_id):
    server = twin_site(slow_site(40, 0.01))
    rt = on_twins(server)
    try:
        a = start_crawl(server.url("/s/0"), crawl_id=crawl_id + "-a", rt=rt, **FAST)
        b = start_crawl(server.url("/s/0"), crawl_id=crawl_id + "-b", rt=rt, **FAST)
        assert run_crawl(rt, a, timeout=60) and run_crawl(rt, b, timeout=60)
        assert paths(a) == paths(b) == {f"/s/{i}" for i in range(40)}
        assert a.stats()["stored"] == b.stats()["stored"] == 40
    finally:
        rt.close()


def test_visit_ttl_skips_pages_an_earlier_crawl_stored(crawl_id):
    server = twin_site({"/": page("Home", ["/1", "/2"]), "/1": page("1"), "/2": page("2")})
    rt = on_twins(server)  # its visited index starts empty and goes with it
    try:
        first = start_crawl(server.url("/"), crawl_id=crawl_id + "-1", visit_ttl=3600, rt=rt, **FAST)
        assert run_crawl(rt, first, timeout=30) and len(first.pages()) == 3
        hits = len(server.hits)
        second = start_crawl(server.url("/"), crawl_id=crawl_id + "-2", visit_ttl=3600, rt=rt, **FAST)
        assert run_crawl(rt, second, timeout=30)
        assert second.pages() == [] and second.stats()["filtered_recently_visited"] == 1
        assert len(server.hits) == hits
        third = start_crawl(Request(server.url("/"), dont_filter=True), crawl_id=crawl_id + "-3", visit_ttl=3600,
                            rt=rt, **FAST)
        assert run_crawl(rt, third, timeout=30) and paths(third) == {"/"}
    finally:
        rt.close()


def gz_sitemap_index(locs):
    xml = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in locs)
    return gzip.compress(f'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                         f"{xml}</sitemapindex>".encode())


def urlset(locs):
    xml = "".join(f"<url><loc>{u}</loc></url>" for u in locs)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{xml}</urlset>'.encode()


def test_sitemap_seeds_and_robots_sitemaps(crawl_id):
    server = TwinSite()
    base = server.base
    server.routes.update({
        "/sitemap_index.xml.gz": lambda s, p: (200, {"Content-Type": "application/gzip"},
                                               gz_sitemap_index([base + "/sitemap1.xml"])),
        "/sitemap1.xml": lambda s, p: (200, {"Content-Type": "application/xml"},
                                       urlset([f"{base}/s/{i}" for i in range(5)])),
        "/robots.txt": lambda s, p: (200, {}, f"Sitemap: {base}/sitemap1.xml\n".encode()),
        "/": page("Home"),
        **{f"/s/{i}": page(f"S {i}") for i in range(5)},
    })
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/sitemap_index.xml.gz"), crawl_id=crawl_id, max_depth=0, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=30), crawl.stats()
        assert paths(crawl) == {"/sitemap_index.xml.gz", "/sitemap1.xml", *(f"/s/{i}" for i in range(5))}
        from_robots = start_crawl(server.url("/"), crawl_id=crawl_id + "-r", max_depth=0, sitemap_from_robots=True,
                                  rt=rt, **FAST)
        assert run_crawl(rt, from_robots, timeout=30)
        assert paths(from_robots) == {"/", "/sitemap1.xml", *(f"/s/{i}" for i in range(5))}
    finally:
        rt.close()


def test_cookies_a_site_sets_are_not_sent_back_later_or_to_other_crawls(crawl_id):
    """Fetch threads serve many crawls: a Set-Cookie must not turn into a cookie on their next request."""
    setter = page("Home", ["/next", "/then"])
    routes = {"/": lambda s, p: (200, {"Set-Cookie": "tracker=abc; Path=/"}, setter(s, p)[2]),
              "/next": lambda s, p: (200, {"Set-Cookie": "other=1; Path=/"}, html("Next", ["/then"])),
              "/then": page("Then")}
    server = twin_site(routes)
    rt = on_twins(server)
    try:
        first = start_crawl(server.url("/"), crawl_id=crawl_id, cookies={"mine": "1"}, rt=rt, **FAST)
        assert run_crawl(rt, first, timeout=30), first.stats()
        second = start_crawl(server.url("/"), crawl_id=crawl_id + "-again", rt=rt, **FAST)
        assert run_crawl(rt, second, timeout=30), second.stats()
        assert paths(first) == paths(second) == {"/", "/next", "/then"}
        sent = [(h.path, h.headers.get("cookie")) for h in server.hits if h.path != "/robots.txt"]
        assert len(sent) == 6
        assert all(cookie in (None, "mine=1") for _, cookie in sent), sent
        assert sum(cookie == "mine=1" for _, cookie in sent) == 3
    finally:
        rt.close()
