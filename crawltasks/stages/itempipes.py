"""Running a crawl's item processors (``crawltasks.items``) in the store stage.

The chain is the spider's ``item_pipelines`` then the crawl option ``item_pipelines``, built once per
worker process and crawl (``open`` runs then; kept in ``ProcessCaches.chains``, so a forked child
opens its own) and closed when the crawl finishes. A spec is an
import path ("crawltasks.items.Required" or "module:Class"), a dict {"class": path, **arguments}
(the JSON-safe form crawl options take), a class, or an instance (copied for each crawl).
"""

from __future__ import annotations

import copy
import importlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import logs
from ..items import DropItem, processor_name
from ..runtime import Runtime
from ..spiders import Spider


def load_processor(spec: Any) -> Any:
    """A processor instance from a spec (see the module's docstring)."""
    kwargs: dict[str, Any] = {}
    if isinstance(spec, dict):
        kwargs = {k: v for k, v in spec.items() if k != "class"}
        spec = spec.get("class")
    if isinstance(spec, str):
        spec = _import(spec)
    if isinstance(spec, type):
        return spec(**kwargs)
    if kwargs or not hasattr(spec, "process_item"):
        raise ValueError(f"not an item processor: {spec!r}")
    return copy.copy(spec)  # an instance on a spider class: each crawl opens its own


def _import(path: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class Chain:
    """One crawl's processors in this process; ``broken`` holds those whose ``open`` raised."""

    processors: list[Any]
    broken: dict[int, str] = field(default_factory=dict)


def chain_for(rt: Runtime, crawl_id: str, spider: Spider) -> Chain:
    """The crawl's chain in this process, built and opened on first use."""
    chains = rt.caches.chains
    with rt.caches.chains_lock:
        chain = chains.get(crawl_id)
        if chain is None:
            specs = [*getattr(spider, "item_pipelines", ()), *rt.options(crawl_id).item_pipelines]
            chain = chains[crawl_id] = _open(rt, crawl_id, specs)
        return chain


class Unloadable:
    """Stands for a processor this worker cannot load or make: its items fail (``items_failed_<name>``)."""

    def __init__(self, spec: Any) -> None:
        ref = spec.get("class") if isinstance(spec, dict) else spec
        ref = ref if isinstance(ref, str) else getattr(ref, "__name__", type(ref).__name__)
        self.name = ref.replace(":", ".").rsplit(".", 1)[-1].lower()


def _open(rt: Runtime, crawl_id: str, specs: list[Any]) -> Chain:
    """Load and open the processors; one that cannot be loaded or opened is kept as broken."""
    from ..crawl import Crawl

    chain, crawl = Chain([]), Crawl(crawl_id, rt)
    for i, spec in enumerate(specs):
        try:
            processor = load_processor(spec)
        except Exception as exc:  # noqa: BLE001 - user code or a typo in the options
            chain.processors.append(Unloadable(spec))
            chain.broken[i] = f"load: {type(exc).__name__}: {exc}"
            continue
        chain.processors.append(processor)
        try:
            if hasattr(processor, "open"):
                processor.open(crawl)
        except Exception as exc:  # noqa: BLE001 - user code: its items fail, the crawl goes on
            chain.broken[i] = f"open: {type(exc).__name__}: {exc}"
    return chain


def run_chain(crawl_id: str, spider: Spider, chain: Chain, items: list[dict[str, Any]],
              fail_fast: bool) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The items that come out of ``chain``, and the drops and failures per processor to count: the
    store stage decides with it and counts afterwards (a processor's drop or failure is logged here)."""
    counts: Counter[str] = Counter()
    kept = []
    for item in items:
        out = _through(crawl_id, spider, chain, item, counts, fail_fast)
        if out is not None:
            kept.append(out)
    return kept, counts


def _through(crawl_id: str, spider: Spider, chain: Chain, item: dict[str, Any], counts: Counter[str],
             fail_fast: bool) -> dict[str, Any] | None:
    """One item through the chain: the item, or None when a processor dropped or failed it (fail fast)."""
    for i, processor in enumerate(chain.processors):
        name = processor_name(processor)
        try:
            if i in chain.broken:
                raise RuntimeError(chain.broken[i])
            out = processor.process_item(item, spider)
            if out is None:
                raise DropItem("process_item returned None")
            item = out
        except DropItem as exc:
            counts[f"items_dropped_{name}"] += 1
            counts["items_dropped"] += 1
            logs.event("item.dropped", logging.DEBUG, crawl_id=crawl_id, url=item.get("url"), processor=name,
                       reason=str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - user code: this item's failure, not the batch's
            counts[f"items_failed_{name}"] += 1
            counts["items_failed"] += 1
            logs.event("item.error", logging.WARNING, crawl_id=crawl_id, url=item.get("url"), processor=name,
                       message=f"{type(exc).__name__}: {exc}")
            if fail_fast:
                return None
    return item


def close_chain(rt: Runtime, crawl_id: str) -> None:
    """The crawl finished: close its processors in this process (errors logged, never raised)."""
    from ..crawl import Crawl

    with rt.caches.chains_lock:
        chain = rt.caches.chains.pop(crawl_id, None)
    for processor in chain.processors if chain else ():
        try:
            if hasattr(processor, "close"):
                processor.close(Crawl(crawl_id, rt))
        except Exception as exc:  # noqa: BLE001 - user code, after the fact
            logs.event("item.close_error", logging.WARNING, crawl_id=crawl_id, processor=processor_name(processor),
                       message=f"{type(exc).__name__}: {exc}")
