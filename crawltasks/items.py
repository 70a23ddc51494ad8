"""Item processors: what a spider's items go through in the store stage before they are written.

A processor has ``process_item(item, spider)`` returning the item (changed or not); it raises
``DropItem(reason)`` to leave the item out (counted ``items_dropped_<name>``), any other exception
fails it (counted ``items_failed_<name>``, logged). ``open(crawl)`` runs once per worker process and
crawl before its first item, ``close(crawl)`` when the crawl finishes. Two ship here: ``Required``
(fields present and of a type) and ``Dedupe`` (one item per key across every worker: ``rt.item_keys``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import Instruction

if TYPE_CHECKING:
    from .crawl import Crawl
    from .ports import ItemKeys
    from .spiders import Spider

TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str, "int": int, "float": (int, float), "bool": bool, "list": list, "dict": dict,
    "number": (int, float),
}


class DropItem(Instruction):  # noqa: N818 - Scrapy's name: an instruction, not an error
    """Raise it from ``process_item`` to leave the item out; the reason is logged, the drop counted."""


class ItemProcessor:
    """Base class of item processors (any object with ``process_item`` will do)."""

    name: str = ""  # in stats: items_dropped_<name>; defaults to the class name, lowercased

    def open(self, crawl: Crawl) -> None:
        """Once per worker process and crawl, before the first item."""

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        return item

    def close(self, crawl: Crawl) -> None:
        """When the crawl finishes (in the process that finished it)."""


def processor_name(processor: Any) -> str:
    """The processor's name in stats: its ``name``, else its class name lowercased."""
    return getattr(processor, "name", "") or type(processor).__name__.lower()


def _type_of(spec: Any) -> type | tuple[type, ...] | None:
    """A type from a class, a tuple of them, a JSON-safe name ("str", "float", ...) or None (any)."""
    if spec is float:
        return (int, float)  # JSON does not tell 3 from 3.0
    if spec is None or isinstance(spec, type | tuple):
        return spec
    if spec in TYPES:
        return TYPES[spec]
    raise ValueError(f"unknown field type {spec!r} (one of {', '.join(TYPES)})")


class Required(ItemProcessor):
    """Drops items missing a field (absent, None or "") or whose field has the wrong type.

    ``fields`` is a mapping field -> type (a class, or a name such as "str" or "float" in crawl
    options, which must be JSON) or a list of fields that only have to be there. A float field
    takes ints too (JSON does not tell 3 from 3.0); a bool is never a number."""

    name = "required"

    def __init__(self, fields: Mapping[str, Any] | Iterable[str]) -> None:
        pairs = fields.items() if isinstance(fields, Mapping) else ((f, None) for f in fields)
        self.fields = {name: _type_of(kind) for name, kind in pairs}

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        for field, kind in self.fields.items():
            value = item.get(field)
            if value is None or value == "":
                raise DropItem(f"missing {field}")
            wrong_bool = isinstance(value, bool) and kind is not bool and not (
                isinstance(kind, tuple) and bool in kind)
            if kind is not None and (wrong_bool or not isinstance(value, kind)):
                expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
                raise DropItem(f"{field} is {type(value).__name__}, not {expected}")
        return item


class Dedupe(ItemProcessor):
    """Keeps the first item of each key (the values of ``fields``) across every worker of the crawl.

    Each key's hash is claimed in the runtime's ``ItemKeys`` (Redis: HSETNX in the crawl's hash) by the
    claiming item's own fingerprint: a store batch delivered again (its worker died before it
    acknowledged) finds its own claims and stores its items, it does not drop them."""

    name = "dedupe"

    def __init__(self, fields: Iterable[str]) -> None:
        self.fields = list(fields)
        if not self.fields:
            raise ValueError("Dedupe needs at least one field")
        self.keys: ItemKeys | None = None
        self.crawl_id = ""

    def open(self, crawl: Crawl) -> None:
        self.keys, self.crawl_id = crawl.rt.item_keys, crawl.id

    def digest(self, item: dict[str, Any]) -> str:
        values = json.dumps([item.get(f) for f in self.fields], sort_keys=True, default=str)
        return hashlib.sha1(values.encode()).hexdigest()

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        if self.keys is None:
            raise RuntimeError("Dedupe.process_item before open(crawl)")
        digest, owner = self.digest(item), item.get("fp") or ""
        first = self.keys.claim(self.crawl_id, digest, owner)
        if first is None:
            return item
        if owner and first == owner:
            return item  # this very item, delivered again
        shown = ", ".join(f"{f}={item.get(f)!r}" for f in self.fields)
        raise DropItem(f"duplicate of an earlier item ({shown})")
