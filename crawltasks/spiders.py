"""What users write: a Spider subclass with ``parse(response)`` yielding items and requests.

Workers find spiders by name: every subclass with a ``name`` is registered when its module is
imported, and workers import the modules listed in ``CRAWLTASKS_SPIDER_MODULES``. A spider can
also be named by import path, ``package.module:ClassName``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from requests.structures import CaseInsensitiveDict

from . import spiderfiles
from .errors import ConfigError, Instruction
from .models import Request
from .stages.html import base_url, detect_encoding, extract_links, is_html, parse_tree, text_of, title_of
from .urls import join, without_userinfo

SPIDERS: dict[str, type[Spider]] = {}


class SpiderNotFound(ConfigError, LookupError):
    """No spider of that name is registered in the configured modules."""


class StopCrawl(Instruction):  # noqa: N818 - it is an instruction, not an error
    """Raise it from parse() or a hook to stop the whole crawl: it is cancelled on every worker."""


class lazy:  # noqa: N801 - used like functools.cached_property
    """A property computed once per instance. Unlike functools.cached_property (Python < 3.12) it
    takes no lock shared by every instance, which serialised all fetch threads of a worker."""

    def __init__(self, func: Any) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.name = func.__name__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value


class Response:
    """A fetched page as user code sees it (HTML, or what the spider asks for: JSON, text, an error
    page it handles). Everything derived is computed on first use."""

    def __init__(self, url: str, status: int, body: bytes, request: Request,
                 content_type: str | None = None, crawl_id: str = "",
                 headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.status = status
        self.body = body
        self.request = request
        self.content_type = content_type
        self.crawl_id = crawl_id
        self.headers: CaseInsensitiveDict[str] = CaseInsensitiveDict(headers or {})

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.text)

    def css(self, query: str) -> list[Any]:
        """Elements of the lxml tree that match a CSS selector (``[]`` for no tree)."""
        return [] if self.tree is None else self.tree.cssselect(query)

    def xpath(self, query: str, **variables: Any) -> list[Any]:
        """What an XPath expression gives on the lxml tree: elements, strings (``//a/@href``,
        ``//h1/text()``) or a number."""
        return [] if self.tree is None else self.tree.xpath(query, **variables)

    @property
    def meta(self) -> dict[str, Any]:
        return self.request.meta

    @property
    def depth(self) -> int:
        return self.request.depth

    @property
    def is_html(self) -> bool:
        return is_html(self.content_type, self.body)

    @lazy
    def encoding(self) -> str:
        return detect_encoding(self.content_type, self.body)

    @lazy
    def text(self) -> str:
        return self.body.decode(self.encoding, "replace")

    @lazy
    def tree(self):  # lxml element, or None
        return parse_tree(self.body, self.encoding)

    @lazy
    def soup(self):
        """A BeautifulSoup tree (lxml parser), built only when asked for."""
        from bs4 import BeautifulSoup

        return BeautifulSoup(self.body, "lxml", from_encoding=self.encoding)

    @lazy
    def title(self) -> str | None:
        return title_of(self.tree)

    @lazy
    def links(self) -> list[str]:
        """Absolute <a href> URLs, resolved against <base> and the final URL."""
        return extract_links(self.tree, self.url, self.base)

    @lazy
    def visible_text(self) -> str:
        return text_of(self.tree)

    @lazy
    def base(self) -> str:
        """What relative links resolve against: <base href>, else the final URL."""
        return base_url(self.tree, self.url)

    def urljoin(self, href: str) -> str:
        return join(self.base, href) or href

    def follow(self, url: str, *, priority: str | None = None, meta: dict[str, Any] | None = None,
               dont_filter: bool = False, **kwargs: Any) -> Request:
        """A request for a link of this page: resolved, one level deeper, same priority by default.
        Other keywords are the Request's: ``callback``, ``errback``, ``method``, ``data`` (a form
        POST), ``json``, ``body``, ``headers``, ``cookies``."""
        absolute = url if url.startswith(("http://", "https://")) else self.urljoin(url)
        return Request(url=absolute, depth=(self.depth or 0) + 1,
                       priority=priority or self.request.priority, meta=dict(meta or {}),
                       dont_filter=dont_filter, referer=without_userinfo(self.url), **kwargs)

    def follow_all(self, urls: Iterable[str] | None = None, **kwargs: Any) -> Iterator[Request]:
        """``follow`` for each URL (default: every link of the page)."""
        if urls is not None or kwargs:
            for url in self.links if urls is None else urls:
                yield self.follow(url, **kwargs)
            return
        # The page's own links, already absolute: what they share is worked out once (this runs
        # for every link of every page; on pages of hundreds of links it was a tenth of parsing).
        depth, priority, referer = self.request.depth + 1, self.request.priority, without_userinfo(self.url)
        for url in self.links:
            yield Request(url=url, depth=depth, priority=priority, referer=referer)


class Spider:
    """Base class of crawl logic. The default ``parse`` follows every link of the page.

    HTML pages are parsed; other types only when listed in ``parse_types`` (e.g.
    ``("application/json",)``) or when their request names a ``callback``. Statuses of 400 and above
    listed in ``handle_statuses`` are parsed as pages too instead of failing the request."""

    name: ClassVar[str] = ""
    start_urls: ClassVar[list[str]] = []
    allowed_domains: ClassVar[list[str] | None] = None
    max_depth: ClassVar[int | None] = None
    store_html: ClassVar[bool] = False
    store_text: ClassVar[bool] = False
    custom_options: ClassVar[dict[str, Any]] = {}  # crawl options this spider always uses
    parse_types: ClassVar[tuple[str, ...]] = ()  # content types parsed beside HTML ("application/json")
    handle_statuses: ClassVar[frozenset[int] | set[int] | tuple[int, ...]] = ()  # e.g. {404}: parsed, not failed
    # item processors, first in the chain (crawltasks.items): "module.Class", {"class": ..., **args}, classes
    # or instances; the crawl option item_pipelines adds more after them
    item_pipelines: ClassVar[list[Any]] = []
    cookies: ClassVar[bool] = False  # keep the cookies sites set, per crawl, and send them back (sessions)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            SPIDERS[cls.name] = cls

    def __init__(self, crawl_id: str = "", **kwargs: Any) -> None:
        self.crawl_id = crawl_id
        for key, value in kwargs.items():
            setattr(self, key, value)

    def start_requests(self) -> Iterator[Request]:
        for url in self.start_urls:
            yield Request(url=url)

    def parse(self, response: Response) -> Iterable[Request | dict[str, Any]]:
        """Yield items (dicts) and follow-up requests. Override it."""
        yield from response.follow_all()

    # --- lifecycle hooks: return None to skip; raise StopCrawl to stop the crawl ----------------
    def before_request(self, request: Request) -> Request | None:
        """Called before fetching: change the request (e.g. build its URL from meta) or skip it.

        It runs again for each retry of the request, on the request as it left this hook."""
        return request

    def after_response(self, response: Response) -> Response | None:
        """Called on each fetched HTML page before parse(); None skips the page."""
        return response

    def before_store(self, kind: str, doc: dict[str, Any]) -> dict[str, Any] | None:
        """Called on each "page" and "item" document before it is written; None drops it."""
        return doc

    def after_store(self, pages: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
        """Called after a batch's documents are written."""

    @classmethod
    def ref(cls) -> str:
        """How workers find this spider: the file it was loaded from, its registered name, else its import path."""
        if cls.__dict__.get("crawltasks_ref"):  # loaded from a file (spiderfiles): workers load it from there
            return cls.__dict__["crawltasks_ref"]
        if cls.name and SPIDERS.get(cls.name) is cls:
            return cls.name
        return f"{cls.__module__}:{cls.__qualname__}"


class SiteSpider(Spider):
    """The default spider: stores every page of the seeds' sites and follows their links."""

    name = "site"


def resolve_spider(ref: str, modules: Iterable[str] = (), path: str | None = None) -> type[Spider]:
    """The spider class for a registered name, a ``module:Class`` path or a ``file.py[:Class]``.
    Modules are imported from ``path`` too: the directory the crawl found its spider in, or the
    command's own (a console script puts its own directory on ``sys.path``, not the current one).
    Raises SpiderNotFound whatever stops it, a module that fails to import included: a worker without
    the spider's code fails the crawl's requests (``spider_not_found``), it does not crash on them."""
    if ":" in ref or ref.endswith(".py"):
        module_name, _, attr = ref.rpartition(":") if ":" in ref else (ref, "", "")
        try:
            if spiderfiles.is_file_ref(module_name):
                obj: Any = spiderfiles.from_file(ref, Spider)
            else:
                obj = spiderfiles.import_from(module_name, path)
                for part in attr.split("."):
                    obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - user code: whatever its import raises
            raise SpiderNotFound(f"cannot import spider {ref!r}: {type(exc).__name__}: {exc}") from None
        if not (isinstance(obj, type) and issubclass(obj, Spider)):
            raise SpiderNotFound(f"{ref!r} is not a Spider subclass")
        return obj
    broken = []
    if ref not in SPIDERS:
        for module in modules:
            try:
                spiderfiles.import_from(module, path)
            except Exception as exc:  # noqa: BLE001 - another module may still have it
                broken.append(f"{module}: {type(exc).__name__}: {exc}")
    try:
        return SPIDERS[ref]
    except KeyError:
        known = ", ".join(sorted(SPIDERS)) or "none"
        failed = f"; modules that failed to import: {'; '.join(broken)}" if broken else ""
        raise SpiderNotFound(f"no spider named {ref!r} (known: {known}){failed}") from None


def locate_spider(ref: str, modules: list[str]) -> type[Spider]:
    """The spider a user names on the command line, looked for in the current directory too; the
    class remembers the directory when it came from there (saved with the crawl as ``spider_path``)."""
    cwd = os.getcwd()
    cls = resolve_spider(ref, modules, path=cwd)
    module = sys.modules.get(cls.__module__)
    if ":" in ref and not spiderfiles.is_file_ref(ref.rpartition(":")[0]) and module is not None:
        where = spiderfiles.found_in_cwd(module)
        if where:
            setattr(cls, spiderfiles.PATH_ATTR, where)
    return cls
