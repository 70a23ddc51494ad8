"""Sessions end to end: a login that sets a cookie, pages that answer 403 without it, a cookie
scoped to a path; the jar is the crawl's, in the runtime's CookieJars (Redis; here its twin), shared
by every fetch of the crawl. Whole crawls in this process, the site in memory."""

from urllib.parse import urlsplit

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.http.sessions import SharedJar

from .sites import FAST, SiteServer, html, on_twins, twin_site

SESSION = "s3cr3t-session"


def members_only(title: str, links: list[str] = ()):
    def route(server: SiteServer, path: str):
        if f"session={SESSION}" not in server.current.hit.headers.get("cookie", ""):
            return 403, {}, b"log in first"
        return 200, {}, html(title, links)
    return route


def login(server: SiteServer, path: str):
    if "user=alice" not in path:
        return 403, {}, b"who are you?"
    return 302, {"Location": "/account", "Set-Cookie": f"session={SESSION}; Path=/; HttpOnly"}, b""


def area(server: SiteServer, path: str):
    return 200, {"Set-Cookie": "area=members; Path=/members"}, html("Members", ["/members/deep"])


def site() -> dict:
    return {
        "/login": login,
        "/account": members_only("Account", ["/orders/1", "/orders/2", "/members/home"]),
        "/orders/1": members_only("Order 1"),
        "/orders/2": members_only("Order 2"),
        "/members/home": area,
        "/members/deep": members_only("Deep", ["/after"]),
        "/after": members_only("After"),
    }


def cookies_sent(server: SiteServer, path: str) -> list[str]:
    return [h.headers.get("cookie", "") for h in server.hits if h.path == path]


def test_a_login_cookie_reaches_the_next_requests(crawl_id):
    server = twin_site(site())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/login?user=alice"), spider="test-session", crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    assert crawl.failures() == []
    paths = {urlsplit(p["url"]).path for p in crawl.pages()}
    assert paths == {"/account", "/orders/1", "/orders/2", "/members/home", "/members/deep", "/after"}
    assert "area=members" in cookies_sent(server, "/members/deep")[0]  # its path's cookie
    assert "area" not in cookies_sent(server, "/after")[0]  # not beyond that path
    assert crawl.stats()["stored"] == 6
    jar = SharedJar(rt.cookies, crawl_id).current()
    assert {c.name for c in jar} == {"session", "area"}


def test_the_crawl_option_turns_the_jar_on_for_the_default_spider(crawl_id):
    server = twin_site(site())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/login?user=alice"), crawl_id=crawl_id, cookies=True, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    assert crawl.failures() == [] and crawl.stats()["stored"] == 6


def test_the_default_site_spider_keeps_no_cookies(crawl_id):
    server = twin_site(site())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/login?user=alice"), crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    assert [f["reason"] for f in crawl.failures()] == ["http_403"]  # /login -> /account, without the cookie
    assert rt.cookies.load(crawl_id) == (None, {})  # no jar: never a cookie saved, no version


def test_jars_of_two_crawls_are_apart(crawl_id):
    server = twin_site(site())
    rt = on_twins(server)
    try:
        first = start_crawl(server.url("/login?user=alice"), spider="test-session", crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, first, timeout=60)
        other = start_crawl(server.url("/account"), spider="test-session", crawl_id=crawl_id + "-b", rt=rt, **FAST)
        assert run_crawl(rt, other, timeout=60)
    finally:
        rt.close()
    assert [f["reason"] for f in other.failures()] == ["http_403"]
