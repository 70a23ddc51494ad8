"""Starting a crawl and following it: ``start_crawl`` and the ``Crawl`` handle."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from . import logs, runtime
from .frontier.schedule import schedule
from .frontier.seeds import Feeder, first_chunk, hold, release
from .frontier.seeds import add as add_seeds
from .http.guard import private_seed_hosts
from .http.robots import Robots, origin_of
from .models import Request
from .monitor.health import StateLost, stalled_line
from .runtime import Runtime
from .settings import CrawlOptions
from .spiders import SiteSpider, Spider, resolve_spider
from .states import CrawlState
from .storage.mongo import FAILURES, ITEMS, PAGES, export_crawl
from .storage.recovery import rebuild_if_lost, save_record, saved_seeds
from .urls import check_seeds, host_of, restore_userinfo

OPTION_NAMES = frozenset(f.name for f in fields(CrawlOptions))



class Crawl:
    """A handle on a crawl, from any process that reaches the crawl's Redis and Mongo."""

    def __init__(self, crawl_id: str, rt: Runtime | None = None) -> None:
        self.id = crawl_id
        self.rt = rt or runtime.current()
        self.feeder: Feeder | None = None  # this process's thread feeding a long start_requests(), if any

    def __repr__(self) -> str:
        return f"Crawl({self.id!r})"

    @property
    def exists(self) -> bool:
        return bool(self.rt.state.crawl_meta(self.id))

    @property
    def finished(self) -> bool:
        return self.rt.state.is_finished(self.id)

    def stats(self) -> dict[str, Any]:
        """Counters plus state, start and finish times."""
        meta = self.rt.state.crawl_meta(self.id)
        out: dict[str, Any] = {"crawl_id": self.id, "state": meta.get("state", CrawlState.UNKNOWN)}
        if not meta and "finished_at" not in (self.rt.storage.crawl_record(self.id) or {"finished_at": 0}):
            out["state"] = CrawlState.LOST  # Redis forgot a crawl MongoDB knows, and it never finished there
        if out["state"] == CrawlState.RUNNING and not self.rt.fleet().read()[0]:
            out["state"] = CrawlState.INTERRUPTED  # nothing works on it: no worker is alive
        stalled = stalled_line(self.rt.outages.current()) if out["state"] == CrawlState.RUNNING else ""
        if stalled:
            out["stalled"] = stalled
        out.update(self.rt.state.stats(self.id))
        for key in ("started_at", "finished_at"):
            if key in meta:
                out[key] = float(meta[key])
        end = out.get("finished_at") or time.time()
        if "started_at" in out:
            out["elapsed"] = round(end - out["started_at"], 3)
        return out

    def wait(self, timeout: float | None = None, poll: float = 0.2,
             progress: Callable[[dict[str, Any]], None] | None = None) -> bool:
        """Block until the crawl is finished (True) or the timeout passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            shown = self.stats() if progress is not None else {}
            if progress is not None:
                progress(shown)
            state = shown.get("state") if shown else self.rt.state.state_of(self.id)
            if state in (CrawlState.LOST, CrawlState.UNKNOWN, ""):  # its registry is gone: nothing can finish it
                raise StateLost(self.id)
            if self.finished:
                self.rt.storage.crawl_ended(self.id, self.rt.state.state_of(self.id))
                if progress is not None and "finished_at" not in shown:  # it finished just after: show the end
                    progress(self.stats())
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    def pages(self) -> list[dict[str, Any]]:
        return list(self.rt.storage.pages(self.id))

    def items(self) -> list[dict[str, Any]]:
        return list(self.rt.storage.items(self.id))

    def failures(self, reason: str | None = None) -> list[dict[str, Any]]:
        return list(self.rt.storage.failures(self.id, reason))

    def counts(self) -> dict[str, int]:
        """Documents stored in Mongo for this crawl."""
        return {name: self.rt.storage.count(name, self.id) for name in (PAGES, ITEMS, FAILURES)}

    # --- control, on every worker within a batch ---------------------------------------------
    def pause(self) -> bool:
        """Stop fetching: nothing more leaves the frontier, and batches reaching a worker go back to it."""
        return self.rt.state.control(self.id, [CrawlState.RUNNING], CrawlState.PAUSED)

    def resume(self) -> bool:
        """Continue a paused or interrupted crawl: its hosts' queues are dispatched again."""
        return self.rt.state.control(self.id, [CrawlState.PAUSED, CrawlState.INTERRUPTED], CrawlState.RUNNING)

    def interrupt(self) -> bool:
        """Its command stopped (Ctrl-C, SIGTERM) or died: it waits, like a paused crawl, until it is
        resumed, instead of running in the background of the next crawl of the same services."""
        return self.rt.state.control(self.id, [CrawlState.RUNNING], CrawlState.INTERRUPTED)

    def cancel(self) -> bool:
        """Stop the crawl for good: what is queued ends as skipped; the crawl then finishes, cancelled."""
        from .stages.outcomes import cancel

        return cancel(self.rt, self.id)

    def add(self, urls: Iterable[str | Request]) -> int:
        """Push more seeds to the crawl while it runs (a finished one runs again); returns how many were new."""
        return add_seeds(self.rt, self.id, urls)

    def close(self) -> bool:
        """No more seeds: a feed crawl (or one fed by this process) finishes once nothing is pending.
        True if it was held open."""
        if self.feeder is not None:
            self.feeder.stop()
        return release(self.rt, self.id)

    def retry_failed(self, reason: str | None = None) -> int:
        """Send the crawl's failed requests through the pipeline again; returns how many."""
        records = [r for r in self.failures(reason) if r.get("outcome", "failed") == "failed"]
        # Stored URLs are redacted; the crawl's seeds (in Redis, like its queued requests) hold the credentials.
        seeds = json.loads(self.rt.state.crawl_meta(self.id).get("seeds") or "[]")
        requests = [Request(url=restore_userinfo(r["url"], seeds), depth=r["depth"], meta=r.get("meta") or {},
                            fp=r["fp"], ticket=r.get("ticket") or r["fp"], referer=r.get("referer")) for r in records]
        flags = self.rt.state.redrive(self.id, [r.ticket for r in requests])
        again = [r for r, ok in zip(requests, flags, strict=True) if ok]
        self.rt.frontier.add(self.id, again, counted=True)  # pending again already: queued, not counted
        self.rt.storage.delete_failures(self.id, [r.fp for r in again])
        return len(again)

    def export(self, path: str, items: bool = True) -> tuple[int, int]:
        """Write the crawl's pages (and items) as JSON Lines; returns (pages, items)."""
        return export_crawl(self.rt.storage, self.id, path, items)


def new_crawl_id(name: str = "crawl") -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def build_options(spider_cls: type[Spider], seeds: list[str], options: dict[str, Any]) -> CrawlOptions:
    """Crawl options from defaults, the spider's class attributes and the caller's options."""
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise ValueError(f"unknown crawl option(s): {', '.join(unknown)}")
    merged: dict[str, Any] = dict(spider_cls.custom_options)
    if spider_cls.max_depth is not None:
        merged["max_depth"] = spider_cls.max_depth
    if spider_cls.allowed_domains is not None:
        merged["allowed_domains"] = list(spider_cls.allowed_domains)
    if spider_cls.handle_statuses:  # fetch workers must keep those bodies: an option, saved with the crawl
        merged["handle_statuses"] = sorted(spider_cls.handle_statuses)
    if getattr(spider_cls, "cookies", False) is True:
        merged["cookie_jar"] = True  # a spider that logs in: the crawl keeps a cookie jar
    if isinstance(options.get("cookies"), bool):  # cookies=True / False: the jar on or off, no fixed cookies
        options = {**options, "cookie_jar": options["cookies"], "cookies": None}
    merged.update({k: v for k, v in options.items() if v is not None})
    merged["spider"] = spider_cls.ref()
    if spider_cls.__dict__.get("crawltasks_path"):  # imported from the user's directory: workers look there
        merged["spider_path"] = spider_cls.__dict__["crawltasks_path"]
    if merged.get("allowed_domains") is None:
        merged["allowed_domains"] = sorted({host_of(u) for u in seeds})
    if merged.get("private_hosts") is None:
        merged["private_hosts"] = private_seed_hosts(seeds)  # a local seed may be crawled, nothing else local
    return CrawlOptions(**merged)


Seeds = str | Request | Iterable[str | Request] | type[Spider] | None


def start_crawl(seeds: Seeds = None, *, spider: str | type[Spider] | None = None,
                crawl_id: str | None = None, rt: Runtime | None = None, **options: Any) -> Crawl:
    """Start (or continue) a crawl and return its handle at once; workers do the crawling.

    ``seeds`` is a URL or Request, a list of them, or a Spider subclass (its ``start_requests()``).
    Options are the fields of ``CrawlOptions``. Starting a crawl id again continues it with its
    saved options: pages already stored are not fetched twice.
    """
    if rt is None:
        from .monitor.health import check_unconfigured

        rt = runtime.current()
        check_unconfigured(rt)  # nothing configured and nothing answering: say so now, not wait on it
    if isinstance(seeds, type) and issubclass(seeds, Spider):
        spider, seeds = seeds, None
    if isinstance(spider, str):
        spider = resolve_spider(spider, rt.settings.spider_modules)
    spider_cls: type[Spider] = spider or SiteSpider
    given = [seeds] if isinstance(seeds, str | Request) else list(seeds or [])
    if not given and crawl_id:  # continuing a crawl by its id alone: its own seeds (they are seen already)
        given = saved_seeds(rt, crawl_id)
    requests = [s if isinstance(s, Request) else Request(url=s) for s in given]
    rest = None  # the seeds of a long start_requests() after its first chunk: fed as the crawl needs them
    if not requests:
        requests, rest = first_chunk(spider_cls(**(options.get("spider_args") or {})).start_requests())
    if not requests and not options.get("feed"):
        raise ValueError("nothing to crawl: give seed URLs or a spider with start_urls")
    check_seeds(r.url for r in requests if not r.url.startswith(("javascript:", "mailto:")))
    crawl_id = crawl_id or new_crawl_id(spider_cls.name or "crawl")
    opts = build_options(spider_cls, [r.url for r in requests], options)
    if not requests and not opts.allowed_domains:
        raise ValueError("a feed crawl without seeds needs allowed_domains: pushed seeds are scoped like links")
    state = rt.state
    rebuild_if_lost(rt, crawl_id, opts.to_dict(), [r.url for r in requests])
    created = state.create_crawl(crawl_id, opts.to_dict(), [r.url for r in requests])
    if not created:
        opts = rt.options(crawl_id)  # continuing: the saved options win
        state.reopen(crawl_id)
    save_record(rt, crawl_id, opts.to_dict(), [r.url for r in requests] if created else saved_seeds(rt, crawl_id))
    logs.crawl_started(crawl_id, [r.url for r in requests], opts.to_dict(), continued=not created)
    if opts.sitemap_from_robots:
        robots = Robots(opts, rt=rt)
        origins = {origin_of(r.url): r.url for r in requests}
        requests += [Request(url=s) for url in origins.values() for s in robots.sitemaps(url)]
    if rest is not None or opts.feed:  # more seeds to come: not finished between two of them
        hold(rt, crawl_id, "feed" if opts.feed else "seeds")
    schedule(state, rt.frontier, crawl_id, requests, opts, rt.caches.known)
    state.check_finished(crawl_id)
    crawl = Crawl(crawl_id, rt)
    if rest is not None:
        crawl.feeder = Feeder(rt, crawl_id, rest, release_at_end=not opts.feed).start()
    return crawl
