"""Command-line spellings of crawl options: ``-s NAME=VALUE``, ``-a NAME=VALUE`` and ``--seeds-file``.

Every CrawlOptions field is reachable without writing Python: a value is read as JSON when it is JSON
(``-s max_pages=100``, ``-s 'headers={"X-A": "1"}'``), as plain text otherwise, and checked against the
field's type and CrawlOptions' own validation before any service starts, so a mistake is one line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from typing import Any

from ..errors import ConfigError
from ..settings import CrawlOptions

FIELD_TYPES = {f.name: str(f.type) for f in fields(CrawlOptions)}
NOT_SETTABLE = {"spider": "--spider", "spider_args": "-a NAME=VALUE"}
TRUE, FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


class OptionError(ConfigError, ValueError):
    """A bad -s/-a/--seeds-file value; the message is one line."""


def split_pair(text: str, flag: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise OptionError(f"{flag} expects NAME=VALUE, got {text!r}")
    return name.strip(), value


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def convert(name: str, raw: str) -> Any:
    """The value of one option as its field's type wants it, or OptionError."""
    kind = FIELD_TYPES[name]
    optional = "None" in kind
    if optional and raw.strip().lower() in ("", "none", "null"):
        return None
    base = kind.replace(" | None", "")
    if base == "bool":
        if raw.strip().lower() in TRUE | FALSE:
            return raw.strip().lower() in TRUE
        raise OptionError(f"-s {name}: expected true or false, got {raw!r}")
    if base == "str":
        value = _json(raw)
        return value if isinstance(value, str) else raw
    value = _json(raw)
    if base == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if base == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if base.startswith("list") and isinstance(value, str):  # a comma-separated list of words
        return [part.strip() for part in value.split(",") if part.strip()]
    if (base.startswith("list") and isinstance(value, list)) or (base.startswith("dict") and isinstance(value, dict)):
        return value
    raise OptionError(f"-s {name}: expected {base}, got {raw!r}")


def parse_settings(pairs: list[str] | None) -> dict[str, Any]:
    """``-s NAME=VALUE`` pairs as crawl options, each typed and the whole checked by CrawlOptions."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        name, raw = split_pair(pair, "-s")
        if name in NOT_SETTABLE:
            raise OptionError(f"-s {name}: use {NOT_SETTABLE[name]}")
        if name not in FIELD_TYPES:
            raise OptionError(f"-s {name}: unknown crawl option (see the README's option table)")
        out[name] = convert(name, raw)
    try:
        CrawlOptions(**out)
    except (ValueError, TypeError) as exc:
        raise OptionError(f"-s: {exc}") from None
    return out


def parse_spider_args(pairs: list[str] | None) -> dict[str, str]:
    """``-a NAME=VALUE`` pairs: keyword arguments of the spider's ``__init__``, as strings (as in Scrapy)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        name, value = split_pair(pair, "-a")
        if not name.isidentifier() or name == "crawl_id":
            raise OptionError(f"-a {name}: not a usable argument name")
        out[name] = value
    return out


def read_seeds(path: str | None) -> list[str]:
    """URLs of a seeds file, one a line (``-``: standard input); blank lines and ``#`` comments skipped."""
    if not path:
        return []
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise OptionError(f"--seeds-file: {exc.strerror or exc}: {path}") from None
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


FLAG_OPTIONS = ("max_depth", "host_concurrency", "host_delay", "max_retries", "batch_size", "timeout",
                "allowed_domains", "store_html", "store_text", "dedupe", "notify", "notify_failure_rate")


def crawl_options(args: Any) -> dict[str, Any]:
    """The crawl options a command line gives: ``-s`` pairs, then the dedicated flags (which win),
    and ``-a`` spider arguments as ``spider_args``."""
    options = parse_settings(getattr(args, "set", None))
    options.update({n: getattr(args, n) for n in FLAG_OPTIONS if getattr(args, n, None) is not None})
    spider_args = parse_spider_args(getattr(args, "spider_arg", None))
    if spider_args:
        options["spider_args"] = spider_args
    return options


def locate(ref: str | None) -> Any:
    """The spider class a command line names (a name, module:Class or a file), or None; OptionError
    when it cannot be loaded, before any service starts."""
    if not ref:
        return None
    from ..settings import Settings
    from ..spiders import SpiderNotFound, locate_spider

    try:
        return locate_spider(ref, Settings.from_env().spider_modules)
    except SpiderNotFound as exc:
        raise OptionError(f"--spider: {exc}") from None
