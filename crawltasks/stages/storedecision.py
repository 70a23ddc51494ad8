"""What one part of a store batch comes to, decided before anything is written: the documents, the
outcomes that finish the tickets, the counters, the hook errors to log and whether a hook stopped
the crawl. No port is touched here, so it is tested on no service (``tests/test_storing_unit.py``);
``stages.storing`` reads what it needs, calls ``decide_store`` and carries the decision out.

It is "pure-ish": the spider's ``before_store`` and the item processors (user code) run here, on
copies, and a processor's drop or failure is logged where it happens; the arguments are left as
they were given."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..models import Fetched, Parsed, Request
from ..reasons import Reason
from ..settings import CrawlOptions
from ..spiders import Spider, StopCrawl
from .itempipes import Chain, run_chain
from .outcomes import IN_TRANSIT, Ending, hook_message, lost_message, now_iso, record_doc

Doc = dict[str, Any]


@dataclass(frozen=True)
class HookError:
    """A spider hook that raised: logged, and counted in ``hook_errors``, when the decision is carried out."""

    hook: str
    url: str | None
    message: str


@dataclass(frozen=True)
class StoreDecision:
    """What should happen for one part of a store batch, in the order it happens: stop the crawl
    (``cancel``), log the hook errors, count, write the documents, then finish ``outcomes``
    (ticket, outcome, lease)."""

    pages: list[Doc] = field(default_factory=list)  # page documents, as before_store left them
    items: list[Doc] = field(default_factory=list)  # items kept by before_store and the item processors
    records: list[Doc] = field(default_factory=list)  # failure records (no lease), those ended here too
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # hook_errors, items_dropped_*, items_failed_*
    hook_errors: list[HookError] = field(default_factory=list)
    cancel: str | None = None  # a before_store hook raised StopCrawl: cancel the crawl, for this reason

    @property
    def failed(self) -> list[Doc]:
        """The records of requests that ended failed (each is logged once finished)."""
        return [r for r in self.records if r["outcome"] == "failed"]


def lost_endings(batch: Parsed, options: CrawlOptions, lost: Mapping[str, int]) -> dict[str, Ending]:
    """The pages whose request was lost with its worker ``max_worker_lost`` times: they end ``worker_lost``."""
    return {p["ticket"]: Ending(reason=Reason.WORKER_LOST, message=lost_message(lost.get(p["lease"], 0)))
            for p in batch.pages if lost.get(p["lease"], 0) >= options.max_worker_lost}


def needs_spider(batch: Parsed, options: CrawlOptions, lost: Mapping[str, int]) -> bool:
    """True when some item or some page not ended ``worker_lost`` is left for the spider's hooks."""
    return bool(batch.items) or len(lost_endings(batch, options, lost)) < len(batch.pages)


def bodies_needed(batch: Parsed, options: CrawlOptions, lost: Mapping[str, int]) -> list[str]:
    """The parked bodies ``before_store`` sees (as the page's ``html``): those of pages not ended."""
    ended = lost_endings(batch, options, lost)
    return [p["body_key"] for p in batch.pages if p.get("body_key") and p["ticket"] not in ended]


def decide_store(batch: Parsed, options: CrawlOptions, spider: Spider | None, lost: Mapping[str, int],
                 bodies: Mapping[str, bytes | None] | None = None, *, missing: str | None = None,
                 chain: Callable[[], Chain] | None = None) -> StoreDecision:
    """What storing ``batch`` comes to. ``spider`` is None when it was not needed or could not be
    loaded (``missing``: why; every page then ends ``spider_not_found`` and the items are dropped);
    ``lost`` counts each lease's deaths with a worker; ``bodies`` are the parked bodies by key;
    ``chain`` opens the item processors, and is called only when items reach them."""
    ended = lost_endings(batch, options, lost)
    if missing is not None:
        gone = Ending(reason=Reason.SPIDER_NOT_FOUND, message=missing)
        ended = {p["ticket"]: ended.get(p["ticket"], gone) for p in batch.pages}
    hooks = _Hooks(spider, ended)
    pages, items = hooks.before_store(batch, bodies or {}) if spider else ({}, [])
    ended = hooks.ended  # with those a hook ended
    counts = Counter({"hook_errors": len(hooks.errors)})
    if spider is not None and items and chain is not None:
        processors = chain()
        if processors.processors:
            items, dropped = run_chain(batch.crawl_id, spider, processors, items, options.item_fail_fast)
            counts.update(dropped)
    records = [dict(r) for r in batch.records]
    records += [_ended_record(batch.crawl_id, p, ended[p["ticket"]]) for p in batch.pages if p["ticket"] in ended]
    outcomes = [(p["ticket"], "stored" if pages.get(p["ticket"]) is not None else "skipped", p["lease"])
                for p in batch.pages if p["ticket"] not in ended]
    outcomes += [(r["ticket"], r["outcome"], r.pop("lease", "")) for r in records]
    outcomes += [(ticket, "skipped", lease) for ticket, lease in batch.skipped]
    return StoreDecision(pages=[doc for doc in pages.values() if doc is not None], items=items, records=records,
                         outcomes=outcomes, counters={k: v for k, v in counts.items() if v},
                         hook_errors=hooks.errors, cancel=hooks.cancel)


class _Hooks:
    """``before_store`` over one part: what it kept, the requests it ended (``hook_error``, added to
    ``ended``, a copy of the caller's), its errors, and the first StopCrawl's reason."""

    def __init__(self, spider: Spider | None, ended: dict[str, Ending]) -> None:
        self.spider, self.ended = spider, dict(ended)
        self.errors: list[HookError] = []
        self.cancel: str | None = None

    def before_store(self, batch: Parsed, bodies: Mapping[str, bytes | None]) -> tuple[dict[str, Doc | None],
                                                                                       list[Doc]]:
        """(ticket -> page document, None if the hook dropped it; the items kept) of the requests not
        ended. A hook that raises ends its request, every document of that request with it."""
        pages: dict[str, Doc | None] = {}
        for page in batch.pages:
            if page["ticket"] in self.ended:
                continue
            doc = {k: v for k, v in page.items() if k not in IN_TRANSIT}
            if bodies.get(page.get("body_key")) is not None:
                doc["html"] = bodies[page["body_key"]].decode("utf-8", "replace")
            kept = self.one("page", doc, page["ticket"])
            if kept is not None and page.get("discovered"):
                kept["discovered"] = page["discovered"]  # written with the page (crawltasks.storage.recovery)
            pages[page["ticket"]] = kept
        items = [(ticket, self.one("item", dict(item), ticket))
                 for item, ticket in zip(batch.items, batch.item_tickets, strict=True) if ticket not in self.ended]
        return ({t: doc for t, doc in pages.items() if t not in self.ended},
                [doc for t, doc in items if doc is not None and t not in self.ended])

    def one(self, kind: str, doc: Doc, ticket: str) -> Doc | None:
        """``before_store`` on one document; if it raises, the document's request ends ``hook_error``."""
        assert self.spider is not None
        try:
            return self.spider.before_store(kind, doc)
        except StopCrawl as exc:
            self.cancel = str(exc) if self.cancel is None else self.cancel
            return doc
        except Exception as exc:  # user code: its failure is this request's, not the worker's
            hook = f"before_store({kind})"
            self.errors.append(HookError(hook, doc.get("url"), hook_message(hook, exc)))
            if ticket:
                self.ended.setdefault(ticket, Ending(reason=Reason.HOOK_ERROR, message=self.errors[-1].message))
            return None


def _ended_record(crawl_id: str, page: Doc, ending: Ending) -> Doc:
    """The failure record of a parsed page that ends in the store stage."""
    raw = page.get("request") or {"url": page.get("requested_url") or page["url"], "depth": page["depth"],
                                  "fp": page["fp"], "ticket": page["ticket"], "referer": page.get("referer")}
    req = Request.from_dict({**raw, "lease": page["lease"]})
    f = Fetched(request=req, error=ending.reason, message=ending.message, status=page["status"], url=page["url"],
                fetched_at=now_iso())
    return record_doc(crawl_id, f)
