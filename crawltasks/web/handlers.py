"""The dashboard's pages, their JSON and its controls.

Pages are rendered on the server from ``templates/``. The live parts of a page are sections (partial
templates); its JSON endpoint returns the data plus those sections rendered again, and ``live.js``
swaps them in: one template per thing shown, nothing rendered twice in two languages.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urlencode

from tornado import web

from ..crawl import Crawl
from ..monitor.progress import human_seconds
from ..reasons import RECORDED_SKIPS
from . import data
from .chart import svg
from .security import BaseHandler

FAILURES_PER_PAGE = 100
ACTIONS = {"pause": "paused", "resume": "resumed", "cancel": "cancelled", "retry-failed": "sent again"}
CRAWL_SECTIONS = {"crawl-head": "_crawl_head.html", "crawl-counters": "_crawl_counters.html",
                  "crawl-failures": "_crawl_failures.html", "crawl-hosts": "_crawl_hosts.html",
                  "crawl-latest": "_crawl_latest.html"}


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def is_web_url(url: Any) -> bool:
    """Only http(s) URLs become links: a failure record may hold ``javascript:`` or worse."""
    return isinstance(url, str) and url.lower().startswith(("http://", "https://"))


class PageHandler(BaseHandler):
    """A page or its JSON: the helpers every template uses."""

    def get_template_namespace(self) -> dict[str, Any]:
        ns = super().get_template_namespace()
        ns.update(when=when, rate=rate, human_seconds=human_seconds, is_web_url=is_web_url, quote=quote,
                  flower_tasks=self.flower_tasks, refresh_ms=int(self.settings["refresh"] * 1000),
                  skip_reasons=RECORDED_SKIPS, flower_url=self.settings["flower_url"])
        return ns

    def flower_tasks(self, crawl_id: str) -> str:
        """Flower's task list filtered to the crawl: its page turns ``?name=`` into a search term, and
        that search takes the whole query (tasks named crawltasks.* whose arguments name the crawl)."""
        return f"{self.settings['flower_url'].rstrip('/')}/tasks?name={quote(f'crawltasks args:{crawl_id}')}"

    def section(self, template: str, **kwargs: Any) -> str:
        return self.render_string(template, **kwargs).decode()


class ListPage(PageHandler):
    async def get(self) -> None:
        rows, total = await self.run(data.crawl_rows, self.rt)
        self.render("crawls.html", rows=rows, total=total)


class ListApi(PageHandler):
    async def get(self) -> None:
        rows, total = await self.run(data.crawl_rows, self.rt)
        self.write({"crawls": [r.to_json() for r in rows], "total": total,
                    "sections": {"crawl-rows": self.section("_crawl_rows.html", rows=rows, total=total)}})


class CrawlPage(PageHandler):
    async def get(self, crawl_id: str) -> None:
        detail = await self.run(data.crawl_detail, self.rt, crawl_id)
        if detail is None:
            raise web.HTTPError(404, reason=f"no crawl named {crawl_id!r} in Redis")
        self.render("crawl.html", d=detail, chart=svg(detail.buckets, detail.bucket_width), notice=self.notice())

    def notice(self) -> str:
        """What the last control did (the POST redirects here with it)."""
        action, n = self.get_argument("done", ""), self.get_argument("n", "")
        if action not in ACTIONS:
            return ""
        if action == "retry-failed":
            return f"{n} failed request(s) sent again"
        return f"crawl {ACTIONS[action]}" if n == "1" else f"nothing to {action}: the crawl is not in a state for it"


class CrawlApi(PageHandler):
    async def get(self, crawl_id: str) -> None:
        detail = await self.run(data.crawl_detail, self.rt, crawl_id)
        if detail is None:
            raise web.HTTPError(404, reason=f"no crawl named {crawl_id!r} in Redis")
        sections = {name: self.section(template, d=detail) for name, template in CRAWL_SECTIONS.items()}
        sections["crawl-chart"] = svg(detail.buckets, detail.bucket_width)
        self.write({"crawl": detail.row.to_json(), "stats": detail.stats, "failures": detail.failures,
                    "hosts": [vars(h) | {"label": h.label} for h in detail.hosts], "sections": sections})


class FailuresPage(PageHandler):
    async def get(self, crawl_id: str) -> None:
        reason = self.get_argument("reason", "") or None
        try:
            page = max(0, int(self.get_argument("page", "0") or 0))
        except ValueError:
            raise web.HTTPError(400, reason="page must be a number") from None
        exists = await self.run(lambda: Crawl(crawl_id, self.rt).exists)
        if not exists:
            raise web.HTTPError(404, reason=f"no crawl named {crawl_id!r} in Redis")
        records = await self.run(data.failures_page, self.rt, crawl_id, reason, page, FAILURES_PER_PAGE)

        def link(p: int) -> str:
            return f"/crawl/{quote(crawl_id)}/failures?" + urlencode({"reason": reason or "", "page": p})

        self.render("failures.html", crawl_id=crawl_id, reason=reason, records=records, page=page,
                    prev=link(page - 1) if page else "", next=link(page + 1) if len(records) == FAILURES_PER_PAGE
                    else "")


class Control(PageHandler):
    """``POST /crawl/<id>/<action>``: authenticated (``security``) and carrying the XSRF token."""

    async def post(self, crawl_id: str, action: str) -> None:
        if action not in ACTIONS:
            raise web.HTTPError(404)
        crawl = Crawl(crawl_id, self.rt)
        if not await self.run(lambda: crawl.exists):
            raise web.HTTPError(404, reason=f"no crawl named {crawl_id!r} in Redis")
        method = getattr(crawl, action.replace("-", "_"))
        result = await self.run(method)
        self.redirect(f"/crawl/{quote(crawl_id)}?" + urlencode({"done": action, "n": int(result)}), status=303)


class Health(BaseHandler):
    """``GET /healthz``: 200 while Redis answers (for the compose healthcheck)."""

    public = True

    async def get(self) -> None:
        try:
            await self.run(self.rt.outages.ping)  # the store of the shared tables: Redis
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            raise web.HTTPError(503, reason=f"Redis: {type(exc).__name__}") from None
        self.write("ok\n")
