"""The Scrapy-style spider API end to end, on the twins (a whole crawl in this process, sites in memory)
and, for the re-crawl and the README's example, on a real worker and local sites: callbacks and errbacks,
POST bodies in the fingerprint, a login form, JSON pagination, depth by default, css/xpath, a 304
on re-crawl, and the README's spider example run as it is written."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs

from crawltasks import Request, Spider, start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.models import Request as ModelRequest
from crawltasks.spiders import SPIDERS

from .sites import FAST, SiteServer, html, on_twins, page, serve, twin_site
from .test_pipeline_e2e import path_of


def method(server: SiteServer) -> str:
    """The method of the request this handler thread answers (the fixture server takes POSTs too)."""
    return server.current.hit.method


def posted(server: SiteServer) -> bytes:
    return server.current.hit.body


def form(server: SiteServer) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(posted(server).decode()).items()}


def json_route(data: dict) -> callable:
    return lambda s, p: (200, {"Content-Type": "application/json"}, json.dumps(data).encode())


# --- spiders -------------------------------------------------------------------------------------------
class ApiSpider(Spider):
    name = "t-api-pages"

    def parse(self, response):
        yield response.follow("/api/items?page=1", callback="parse_api")

    def parse_api(self, response):
        data = response.json()
        for item in data["items"]:
            yield {"id": item, "status": response.status, "type": response.headers["content-type"]}
        if data["next"]:
            yield response.follow(data["next"], callback="parse_api")


class TypesSpider(Spider):
    """JSON parsed by ``parse`` itself because the spider lists its type."""

    name = "t-parse-types"
    parse_types = ("application/json",)

    def parse(self, response):
        if response.is_html:
            yield from response.follow_all()
        else:
            yield {"total": response.json()["total"]}


class ErrbackSpider(Spider):
    name = "t-errbacks"

    def parse(self, response):
        yield response.follow("/detail", callback=self.parse_detail)  # a bound method: kept by its name
        yield response.follow("/gone", callback="parse_detail", errback="on_error", meta={"k": "v"})

    def parse_detail(self, response):
        yield {"kind": "detail", "h1": response.css("h1.title")[0].text_content(),
               "x": response.xpath("//p/@data-x")[0], "texts": response.xpath("//li/text()")}

    def on_error(self, failure):
        yield {"kind": "error", "reason": failure.reason, "status": failure.status, "k": failure.meta["k"]}
        yield Request(failure.request.url.replace("/gone", "/fallback"), callback="parse_detail")


class NotFoundPagesSpider(Spider):
    name = "t-handle-404"
    handle_statuses = {404}

    def parse(self, response):
        yield {"status": response.status, "text": response.text}


class PostSpider(Spider):
    name = "t-posts"

    def parse(self, response):
        for q in ("alpha", "beta", "alpha"):  # the third is the first again: one request
            yield Request.form(response.urljoin("/search"), {"q": q}, callback="parse_result")
        yield response.follow("/search", json={"q": "gamma"}, callback="parse_result")

    def parse_result(self, response):
        yield {"result": response.css("h1")[0].text_content()}


class LoginSpider(Spider):
    name = "t-login"

    def parse(self, response):
        token = response.xpath("//input[@name='csrf']/@value")[0]
        yield response.follow("/login", callback="after_login", data={"user": "ada", "password": "pw", "csrf": token})

    def after_login(self, response):
        yield {"welcome": response.css("h1")[0].text_content()}
        yield response.follow("/account", callback="account", cookies={"sid": response.headers["X-Session"]})

    def account(self, response):
        yield {"account": response.xpath("//h1/text()")[0]}


class PlainRequestSpider(Spider):
    """Yields bare Requests (no depth, no referer): the parse stage places them."""

    name = "t-plain-requests"

    def parse(self, response):
        for href in response.xpath("//a/@href"):
            yield Request(response.urljoin(href))


class RevisitSpider(Spider):
    name = "t-revisit"


# --- tests ---------------------------------------------------------------------------------------------
def test_requests_carry_bodies_and_callbacks_as_json():
    req = Request.form("http://a.example/s", {"q": "x y"}, callback=ErrbackSpider.parse_detail, errback="on_error")
    assert req.method == "POST" and req.body == b"q=x+y" and req.callback == "parse_detail"
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded" and req.depth is None
    binary = ModelRequest("http://a.example/", method="PUT", body=b"\xff\x00")
    for r in (req, binary):
        assert ModelRequest.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_json_api_pagination_through_callbacks(crawl_id):
    server = twin_site({"/": page("Home"),
                    "/api/items": lambda s, p: (200, {"Content-Type": "application/json"}, json.dumps(
                        {"items": [f"{p[-1]}a", f"{p[-1]}b"], "next": None if p.endswith("3")
                         else f"/api/items?page={int(p[-1]) + 1}"}).encode())})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider=ApiSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        items = crawl.items()
        assert sorted(i["id"] for i in items) == ["1a", "1b", "2a", "2b", "3a", "3b"]
        assert all(i["status"] == 200 and i["type"] == "application/json" for i in items)
        depths = {path_of(p["url"]): p["depth"] for p in crawl.pages()}
        assert depths == {"/": 0, "/api/items?page=1": 1, "/api/items?page=2": 2, "/api/items?page=3": 3}
        assert all(p["content_hash"] and p["title"] is None for p in crawl.pages() if "api" in p["url"])
    finally:
        rt.close()


def test_parse_types_send_json_to_parse(crawl_id):
    server = twin_site({"/": page("Home", ["/count.json"]), "/count.json": json_route({"total": 7})})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider=TypesSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert [i["total"] for i in crawl.items()] == [7]
    finally:
        rt.close()


def test_callbacks_errbacks_css_and_xpath(crawl_id):
    detail = page("Detail", extra='<h1 class="title">The detail</h1><p data-x="42">p</p><ul><li>a</li><li>b</li></ul>')
    server = twin_site({"/": page("Home"), "/detail": detail, "/fallback": detail})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider=ErrbackSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        items = crawl.items()
        errors = [i for i in items if i["kind"] == "error"]
        assert errors == [{**errors[0], "reason": "http_404", "status": 404, "k": "v"}]
        details = [i for i in items if i["kind"] == "detail"]
        assert len(details) == 2 and all(d["h1"] == "The detail" and d["x"] == "42" and d["texts"] == ["a", "b"]
                                          for d in details)
        failures = crawl.failures()
        assert [(path_of(f["url"]), f["reason"], f["outcome"]) for f in failures] == [("/gone", "http_404", "failed")]
        stats = crawl.stats()
        assert stats["failed"] == 1 and stats["stored"] == 3  # /, /detail and the errback's /fallback
        by_path = {path_of(p["url"]): p for p in crawl.pages()}
        assert by_path["/fallback"]["depth"] == 2 and by_path["/fallback"]["referer"].endswith("/gone")
    finally:
        rt.close()


def test_handle_statuses_parses_error_pages(crawl_id):
    server = twin_site({"/": page("Home", ["/nope"])})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/nope"), spider=NotFoundPagesSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert [(i["status"], i["text"]) for i in crawl.items()] == [(404, "not found")]
        assert [p["status"] for p in crawl.pages()] == [404] and crawl.failures() == []
    finally:
        rt.close()


def test_posts_with_different_bodies_are_two_requests(crawl_id):
    seen: list[tuple[str, str, str]] = []

    def search(s: SiteServer, path: str):
        body = posted(s).decode()
        seen.append((method(s), s.current.hit.headers.get("content-type"), body))
        return 200, {}, html(f"results for {body}", extra=f"<h1>{body}</h1>")

    server = twin_site({"/": page("Home"), "/search": search})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider=PostSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert sorted(seen) == [("POST", "application/json", '{"q":"gamma"}'),
                                ("POST", "application/x-www-form-urlencoded", "q=alpha"),
                                ("POST", "application/x-www-form-urlencoded", "q=beta")]
        assert sorted(i["result"] for i in crawl.items()) == ['q=alpha', 'q=beta', '{"q":"gamma"}']
        assert crawl.stats()["duplicates"] >= 1 and len(crawl.pages()) == 4
    finally:
        rt.close()


def login_routes(user: str = "ada", password: str = "pw") -> dict:
    def login(s: SiteServer, path: str):
        if method(s) == "GET":
            return 200, {}, html("Login", extra='<form method="post"><input type="hidden" name="csrf" value="t0k3n">'
                                                 '<input name="user"><input name="password"></form>')
        if form(s) == {"user": user, "password": password, "csrf": "t0k3n"}:
            return 200, {"X-Session": "s-123"}, html("Welcome", extra=f"<h1>Welcome, {user}</h1>")
        return 403, {}, b"bad login"

    def account(s: SiteServer, path: str):
        if "sid=s-123" not in s.current.hit.headers.get("cookie", ""):
            return 403, {}, b"no session"
        return 200, {}, html("Account", extra="<h1>ada's account</h1>")

    return {"/login": login, "/account": account}


def test_login_form_post(crawl_id):
    server = twin_site(login_routes())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/login"), spider=LoginSpider, crawl_id=crawl_id, rt=rt, **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        assert sorted(map(json.dumps, ({k: v for k, v in i.items() if k in ("welcome", "account")}
                                       for i in crawl.items()))) == [
            json.dumps({"account": "ada's account"}), json.dumps({"welcome": "Welcome, ada"})]
        assert crawl.failures() == []
    finally:
        rt.close()


def test_requests_without_depth_stop_at_max_depth(crawl_id):
    server = twin_site({f"/d/{i}": page(f"D{i}", [f"/d/{i + 1}"]) for i in range(6)})
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/d/0"), spider=PlainRequestSpider, crawl_id=crawl_id, rt=rt, max_depth=2,
                            **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
        by_path = {path_of(p["url"]): p for p in crawl.pages()}
        assert {p: d["depth"] for p, d in by_path.items()} == {"/d/0": 0, "/d/1": 1, "/d/2": 2}
        assert by_path["/d/2"]["referer"].endswith("/d/1")
        assert crawl.stats()["filtered_depth"] == 1 and "/d/3" not in server.counts
    finally:
        rt.close()


def test_recrawl_sends_validators_and_a_304_keeps_the_page(worker, rt, crawl_id):
    def tagged(s: SiteServer, path: str):
        if s.current.hit.headers.get("if-none-match") == '"v1"':
            return 304, {"ETag": '"v1"'}, b""
        return 200, {"ETag": '"v1"', "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"}, html("Tagged")

    server = serve({"/": tagged})
    try:
        first = start_crawl(server.url("/"), spider=RevisitSpider, crawl_id=crawl_id + "-1", visit_ttl=0.2, **FAST)
        assert first.wait(timeout=60), first.stats()
        [stored] = first.pages()
        assert stored["etag"] == '"v1"' and stored["last_modified"].startswith("Mon") and stored["content_hash"]
        time.sleep(0.4)  # past visit_ttl: the next crawl of the spider fetches the page again
        second = start_crawl(server.url("/"), spider=RevisitSpider, crawl_id=crawl_id + "-2", visit_ttl=0.2, **FAST)
        assert second.wait(timeout=60), second.stats()
        hits = [h for h in server.hits if h.path == "/"]
        assert len(hits) == 2 and hits[1].headers["if-none-match"] == '"v1"'
        assert hits[1].headers["if-modified-since"] == stored["last_modified"]
        stats = second.stats()
        assert stats["not_modified"] == 1 and stats["skipped"] == 1 and stats["failed"] == 0
        assert [(f["reason"], f["outcome"]) for f in second.failures()] == [("not_modified", "skipped")]
        [again] = first.pages()
        assert again["checked_at"] > stored["checked_at"] and again["content_hash"] == stored["content_hash"]
        assert second.pages() == []
    finally:
        server.stop()


# --- the README's example, as written --------------------------------------------------------------------
def readme_example(root: Path) -> str:
    text = (root / "README.md").read_text()
    section = text[text.index("### Callbacks, forms and JSON"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def shop_routes() -> dict:
    routes = login_routes("demo", "secret")
    routes["/account"] = page("unused")

    def products(s: SiteServer, path: str):
        if "sid=s-123" not in s.current.hit.headers.get("cookie", ""):
            return 403, {}, b"no session"
        n = int(path.rsplit("=", 1)[1])
        data = {"products": [{"sku": f"sku{2 * n - k}", "url": f"/products/{2 * n - k}"} for k in (1, 0)],
                "next": f"/api/products?page={n + 1}" if n < 2 else None}
        return 200, {"Content-Type": "application/json"}, json.dumps(data).encode()

    routes["/api/products"] = products
    for n in (1, 2, 4):
        routes[f"/products/{n}"] = page(f"P{n}", extra=f'<h1>Product {n}</h1><span class="price">{n}.50</span>')
    return routes


def test_readme_example_runs(worker, rt, project_root, crawl_id):
    server = serve(shop_routes())
    code = readme_example(project_root).replace("https://shop.example", server.base)
    SPIDERS.pop("shop", None)
    namespace = {"__name__": "readme_example"}
    try:
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the documented example, run as written
        crawl = namespace["crawl"]
        assert crawl.stats()["state"] == "finished", crawl.stats()
        items = sorted(crawl.items(), key=lambda i: i["sku"])
        assert [{k: v for k, v in i.items() if k in ("sku", "name", "price", "missing")} for i in items] == [
            {"sku": "sku1", "name": "Product 1", "price": 1.5}, {"sku": "sku2", "name": "Product 2", "price": 2.5},
            {"sku": "sku3", "missing": "http_404"}, {"sku": "sku4", "name": "Product 4", "price": 4.5}]
        assert [f["reason"] for f in crawl.failures()] == ["http_404"]
    finally:
        SPIDERS.pop("shop", None)
        server.stop()
