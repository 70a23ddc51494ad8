"""The values that travel between stages: plain dataclasses that turn into JSON and back."""

from __future__ import annotations

import base64
import json as _json
from dataclasses import InitVar, dataclass, field
from typing import Any
from urllib.parse import urlencode

PRIORITIES = ("high", "default", "low")
FORM_TYPE = "application/x-www-form-urlencoded"


def pack_body(body: bytes) -> str | dict[str, str] | None:
    """A body as JSON can carry it: text when it is UTF-8 (forms, JSON), else base64."""
    if not body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}


def unpack_body(packed: str | dict[str, str] | None) -> bytes:
    """The inverse of ``pack_body``."""
    if not packed:
        return b""
    if isinstance(packed, dict):
        return base64.b64decode(packed["base64"])
    return packed.encode("utf-8")


def _name_of(handler: Any) -> str | None:
    """A callback as it travels: the spider method's name (a bound method gives its ``__name__``)."""
    if handler is None or isinstance(handler, str):
        return handler
    name = getattr(handler, "__name__", None)
    if not name:
        raise TypeError(f"a callback must be a spider method or its name, not {handler!r}")
    return name


@dataclass
class Request:
    """One URL to fetch, with what the crawl knows about it.

    ``fp`` is the dedupe fingerprint; ``ticket`` identifies this scheduling of it for the counters
    (equal to ``fp`` unless ``dont_filter`` lets the same URL be scheduled again). ``lease`` names its
    claim in the frontier once it is taken to be fetched; ``lost`` counts the deliveries of it that
    died with their worker.

    ``depth`` None means "not said": a seed is depth 0, a request yielded by a callback one level
    below its page. ``data`` (a form) or ``json`` build the body and make a GET a POST; ``callback``
    and ``errback`` name spider methods (a bound method is kept by its name, so it survives JSON).
    """

    url: str
    depth: int | None = None
    priority: str = "default"
    method: str = "GET"
    meta: dict[str, Any] = field(default_factory=dict)
    dont_filter: bool = False
    fp: str = ""
    ticket: str = ""
    attempt: int = 0
    referer: str | None = None
    lease: str = ""
    lost: int = 0
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    callback: Any = None  # str | None once made: the spider method that parses the response
    errback: Any = None  # str | None once made: the spider method called if the request fails
    data: InitVar[dict[str, Any] | None] = None
    json: InitVar[Any] = None

    def __post_init__(self, data: dict[str, Any] | None = None, json: Any = None) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {self.priority!r}")
        self.callback, self.errback = _name_of(self.callback), _name_of(self.errback)
        if isinstance(self.body, str):
            self.body = self.body.encode("utf-8")
        if data is not None:
            self._set_body(urlencode(data, doseq=True).encode(), FORM_TYPE)
        elif json is not None:
            self._set_body(_json.dumps(json, separators=(",", ":"), sort_keys=True).encode(), "application/json")

    def _set_body(self, body: bytes, content_type: str) -> None:
        self.body = body
        self.method = "POST" if self.method == "GET" else self.method
        if not any(k.lower() == "content-type" for k in self.headers):
            self.headers = {**self.headers, "Content-Type": content_type}

    @classmethod
    def form(cls, url: str, data: dict[str, Any], **kwargs: Any) -> Request:
        """A form POST (Scrapy's ``FormRequest``): ``data`` URL-encoded as the body."""
        return cls(url, data=data, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        # written out: dataclasses.asdict deep-copies recursively, and this runs for every link found
        return {"url": self.url, "depth": self.depth, "priority": self.priority, "method": self.method,
                "meta": self.meta, "dont_filter": self.dont_filter, "fp": self.fp, "ticket": self.ticket,
                "attempt": self.attempt, "referer": self.referer,
                "lease": self.lease, "lost": self.lost, "body": pack_body(self.body), "headers": self.headers,
                "cookies": self.cookies, "callback": self.callback, "errback": self.errback}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Request:
        if "body" in data:
            data = {**data, "body": unpack_body(data["body"])}
        return cls(**data)


@dataclass
class Fetched:
    """The outcome of fetching one request: a response (body parked in Redis) or an error."""

    request: Request
    status: int | None = None
    url: str | None = None  # final canonical URL after redirects
    fp: str | None = None  # fingerprint of the final URL: the page's identity in the store
    content_type: str | None = None
    body_key: str | None = None
    size: int = 0
    truncated: bool = False
    fetched_at: str | None = None
    elapsed: float = 0.0
    error: str | None = None  # reason code, e.g. "http_404", "timeout", "invalid_url"
    message: str | None = None
    transient: bool = False
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)  # shallow: its fields are plain values
        data["request"] = self.request.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fetched:
        data = dict(data)
        data["request"] = Request.from_dict(data["request"])
        return cls(**data)


@dataclass
class Parsed:
    """What a parse task hands its store task, through the broker: documents shaped and the requests
    they end. Pages and failure records carry their request's ``ticket`` and ``lease`` (and, only
    on the way, what ``stages.outcomes.IN_TRANSIT`` names); a page's body stays parked in Redis."""

    crawl_id: str
    pages: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    item_tickets: list[str] = field(default_factory=list)  # each item's request ("": none known)
    records: list[dict[str, Any]] = field(default_factory=list)  # failure records, with their outcome
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (ticket, lease) ending skipped, unrecorded
    body_keys: list[str] = field(default_factory=list)  # parked bodies to drop once their pages are stored

    def to_dict(self) -> dict[str, Any]:
        return {"crawl_id": self.crawl_id, "pages": self.pages, "items": self.items,
                "item_tickets": self.item_tickets, "records": self.records,
                "skipped": [[ticket, lease] for ticket, lease in self.skipped], "body_keys": self.body_keys}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Parsed:
        items = data.get("items") or []
        return cls(crawl_id=data["crawl_id"], pages=data.get("pages") or [], items=items,
                   item_tickets=data.get("item_tickets") or [""] * len(items), records=data.get("records") or [],
                   skipped=[(ticket, lease) for ticket, lease in data.get("skipped") or []],
                   body_keys=data.get("body_keys") or [])
