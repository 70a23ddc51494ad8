"""The values that travel between stages: plain dataclasses that turn into JSON and back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PRIORITIES = ("high", "default", "low")


@dataclass
class Request:
    """One URL to fetch, with what the crawl knows about it.

    ``fp`` is the dedupe fingerprint; ``ticket`` identifies this scheduling of it for the counters
    (equal to ``fp`` unless ``dont_filter`` lets the same URL be scheduled again). ``lease`` names its
    claim in the frontier once it is taken to be fetched; ``lost`` counts the deliveries of it that
    died with their worker.
    """

    url: str
    depth: int = 0
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

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {self.priority!r}")

    def to_dict(self) -> dict[str, Any]:
        # written out: dataclasses.asdict deep-copies recursively, and this runs for every link found
        return {"url": self.url, "depth": self.depth, "priority": self.priority, "method": self.method,
                "meta": self.meta, "dont_filter": self.dont_filter, "fp": self.fp, "ticket": self.ticket,
                "attempt": self.attempt, "referer": self.referer,
                "lease": self.lease, "lost": self.lost}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Request:
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
