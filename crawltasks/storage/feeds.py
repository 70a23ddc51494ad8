"""Feeds as Scrapy users know them: the output file's extension chooses the format.

``.jsonl`` (JSON Lines), ``.json`` (one array) or ``.csv`` (one column per field, lists and objects as
JSON in their cell); ``-`` is JSON Lines on standard output. Pages and items go to separate outputs
(``--output`` and ``--items``) or, with one output, together with a ``type`` field ("page" or "item").
Paths are checked before a crawl starts: a typo should not cost the crawl.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..ports import Storage

FORMATS = (".jsonl", ".json", ".csv")
STDOUT = "-"

Source = Callable[[], Iterator[dict[str, Any]]]  # called once per pass (CSV reads twice, for its columns)


class FeedError(ConfigError, ValueError):
    """An output that cannot be written; the message is one line."""


def feed_format(path: str) -> str:
    """The format of an output path: its extension, or ``.jsonl`` for standard output."""
    if path == STDOUT:
        return ".jsonl"
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise FeedError(f"{path}: unknown output format {suffix or '(no extension)'!r}; use {', '.join(FORMATS)}")
    return suffix


def check_output(path: str | None, flag: str = "--output") -> None:
    """Refuse an output the crawl could not write at its end: unknown extension, missing or read-only
    directory, a directory in its place."""
    if path is None or path == STDOUT:
        return
    if Path(path).is_dir():
        raise FeedError(f"{flag} {path}: is a directory")
    try:
        feed_format(path)
    except FeedError as exc:
        raise FeedError(f"{flag} {exc}") from None
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FeedError(f"{flag} {path}: no directory {str(folder)!r}")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise FeedError(f"{flag} {path}: not writable")


def _docs(sources: list[tuple[str, Source]], tag: bool, counts: dict[str, int] | None = None,
          ) -> Iterator[dict[str, Any]]:
    for kind, source in sources:
        for doc in source():
            doc.pop("fp", None)
            if counts is not None:
                counts[kind] = counts.get(kind, 0) + 1
            yield {"type": kind, **doc} if tag else doc


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _write_csv(sources: list[tuple[str, Source]], tag: bool, out: IO[str], counts: dict[str, int]) -> None:
    columns: dict[str, None] = {}
    for doc in _docs(sources, tag):  # first pass: the columns, in the order they first appear
        columns.update(dict.fromkeys(doc))
    writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for doc in _docs(sources, tag, counts):
        writer.writerow({k: _cell(v) for k, v in doc.items()})


def _write_json(sources: list[tuple[str, Source]], tag: bool, out: IO[str], array: bool,
                counts: dict[str, int]) -> None:
    if array:
        out.write("[")
    for n, doc in enumerate(_docs(sources, tag, counts)):
        text = json.dumps(doc, ensure_ascii=False, default=str)
        out.write((",\n" if n else "\n") + text if array else text + "\n")
    if array:
        out.write("\n]\n")


@contextlib.contextmanager
def _open(path: str) -> Iterator[IO[str]]:
    if path == STDOUT:
        yield sys.stdout
        sys.stdout.flush()
        return
    newline = "" if path.lower().endswith(".csv") else None  # the csv module writes its own line ends
    with open(path, "w", encoding="utf-8", newline=newline) as out:
        yield out


def write_feed(path: str, sources: list[tuple[str, Source]], tag: bool) -> dict[str, int]:
    """Write the documents of ``sources`` (kind, source) to ``path`` in its format; returns how many
    of each kind."""
    fmt = feed_format(path)
    counts = dict.fromkeys((kind for kind, _ in sources), 0)
    with _open(path) as out:
        if fmt == ".csv":
            _write_csv(sources, tag, out, counts)
        else:
            _write_json(sources, tag, out, fmt == ".json", counts)
    return counts


def export(storage: Storage, crawl_id: str, output: str | None, items: str | None = None) -> tuple[int, int]:
    """A crawl's pages to ``output`` and its items to ``items``; with no ``items`` path, both to
    ``output`` with a ``type`` field. Returns (pages, items) written."""
    pages: Source = lambda: storage.pages(crawl_id)  # noqa: E731 - two sources, one line each
    found: Source = lambda: storage.items(crawl_id)  # noqa: E731
    if items is None:
        assert output is not None
        counts = write_feed(output, [("page", pages), ("item", found)], tag=True)
        return counts["page"], counts["item"]
    n_items = write_feed(items, [("item", found)], tag=False)["item"]
    n_pages = write_feed(output, [("page", pages)], tag=False)["page"] if output else 0
    return n_pages, n_items
