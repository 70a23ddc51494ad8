"""Structured log lines: one line per notable event, as ``event key=value ...``.

The message itself is the structured line, so it stays readable under any formatter (Celery's worker
format, ``logging.basicConfig``, a JSON shipper): ``grep crawl_id=X`` finds a crawl's story in a
worker log. The fields are also attached to the record (``record.event``, ``record.fields``) for
handlers that want them as data.

Levels: INFO for a crawl's lifecycle and for final failures that are the site's answer (4xx);
WARNING for final failures the crawl could not get past (5xx after retries, timeouts, refused
connections) and for a host asking us to back off; DEBUG for routine politeness waits and retries.
Expected failures never carry a traceback: they are data, not bugs.

No line shows a secret: every field and every message of the ``crawltasks`` loggers goes through
``urls.redact`` (passwords in URLs, sensitive headers and cookies), whatever formats it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from .urls import redact

LOGGER_NAME = "crawltasks.events"
log = logging.getLogger(LOGGER_NAME)

MAX_VALUE = 300  # characters of one field's value; a log line is not a place for a page body
FIRST_FIELDS = ("crawl_id", "url", "host", "reason", "status")
CLIENT_ERRORS_EXPECTED = frozenset({400, 401, 403, 404, 405, 406, 410, 451})
LINE_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"


def _value(value: Any) -> str:
    """One field value: bare when it is a plain token, else double-quoted with escapes."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0").rstrip(".") or "0"
    elif isinstance(value, (list, tuple, set, frozenset)):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    if len(text) > MAX_VALUE:
        text = text[: MAX_VALUE - 3] + "..."
    if text and not any(c in text for c in ' ="\\\n\r\t'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def format_fields(fields: Mapping[str, Any]) -> str:
    """``key=value`` pairs: crawl id, URL and host first, then the rest by name."""
    keys = [k for k in FIRST_FIELDS if k in fields] + sorted(k for k in fields if k not in FIRST_FIELDS)
    return " ".join(f"{k}={_value(fields[k])}" for k in keys)


def event(name: str, level: int = logging.INFO, logger: logging.Logger | None = None, **fields: Any) -> str:
    """Log one structured line ``name key=value ...`` and return it (tests read it back)."""
    fields = redact({k: v for k, v in fields.items() if v is not None})
    line = f"{name} {format_fields(fields)}".rstrip()
    (logger or log).log(level, "%s", line, extra={"event": name, "fields": fields})
    return line


# --- the notable events --------------------------------------------------------------------------
def crawl_started(crawl_id: str, seeds: Iterable[str], options: Mapping[str, Any] | None = None,
                  continued: bool = False) -> str:
    """A crawl was registered (or an existing one continued) and its seeds sent."""
    seeds = list(seeds)
    opts = dict(options or {})
    return event("crawl.continued" if continued else "crawl.started", crawl_id=crawl_id,
                 url=seeds[0] if seeds else None, seeds=len(seeds), spider=opts.get("spider"),
                 max_depth=opts.get("max_depth"), host_concurrency=opts.get("host_concurrency"),
                 host_delay=opts.get("host_delay"))


def crawl_finished(crawl_id: str, stats: Mapping[str, Any]) -> str:
    """Completion fired (exactly once per run of a crawl)."""
    keys = ("stored", "failed", "skipped", "duplicates", "filtered", "retried", "items", "elapsed")
    return event("crawl.finished", crawl_id=crawl_id, **{k: stats[k] for k in keys if k in stats})


def request_failed(crawl_id: str, url: str, reason: str | None, status: int | None = None,
                   attempts: int | None = None, message: str | None = None) -> str:
    """A request failed for good (no retry left, or not worth one). Never with a traceback."""
    level = logging.INFO if status in CLIENT_ERRORS_EXPECTED else logging.WARNING
    return event("request.failed", level, crawl_id=crawl_id, url=url, reason=reason, status=status,
                 attempts=attempts, message=message)


def request_retry(crawl_id: str, url: str, reason: str | None, attempt: int, countdown: float) -> str:
    """A transient failure will be tried again after ``countdown`` seconds."""
    return event("request.retry", logging.DEBUG, crawl_id=crawl_id, url=url, reason=reason,
                 attempt=attempt, countdown=countdown)


def host_backoff(crawl_id: str | None, host: str, seconds: float, reason: str, url: str | None = None) -> str:
    """A host is being given time: it asked (429/503 + Retry-After) or its politeness budget is used up.

    A host that asked is a WARNING; our own politeness waiting is routine (DEBUG).
    """
    asked = reason.startswith("http_") or reason == "retry_after"
    return event("host.backoff", logging.WARNING if asked else logging.DEBUG, crawl_id=crawl_id, url=url,
                 host=host, reason=reason, seconds=round(seconds, 3))


class Redacting(logging.Filter):
    """Redacts the message of every record its logger makes (plain ``log.warning("%r", exc)`` calls
    included), so the line is safe under any handler: Celery's worker format as much as ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args or "@" in str(record.msg):
            message = record.getMessage()
            safe = redact(message)
            if safe != message:
                record.msg, record.args = safe, None
        return True


for _name in ("crawltasks", LOGGER_NAME):  # every logger of the package (see its modules' getLogger)
    logging.getLogger(_name).addFilter(Redacting())


# --- setup -----------------------------------------------------------------------------------------
class LineFormatter(logging.Formatter):
    """``time level message`` on one line; a traceback only for unexpected errors.

    A record logged with ``extra={"expected": True}`` drops its exception info: a failure the
    crawler handles is reported by its reason, not by a stack.
    """

    def __init__(self, fmt: str = LINE_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "expected", False) and record.exc_info:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        line = redact(super().format(record))  # a traceback's text too
        fields = getattr(record, "fields", None)
        if fields is None:  # a plain log call: still show which crawl and URL it is about
            extra = redact({k: getattr(record, k) for k in ("crawl_id", "url") if getattr(record, k, None)})
            if extra:
                first, sep, rest = line.partition("\n")
                line = f"{first} {format_fields(extra)}{sep}{rest}"
        return line


def setup(level: int = logging.WARNING, stream: TextIO | None = None) -> logging.Handler:
    """Log to ``stream`` (stderr) with LineFormatter at ``level``; replaces handlers set by us before."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_crawltasks", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LineFormatter())
    handler._crawltasks = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    return handler
