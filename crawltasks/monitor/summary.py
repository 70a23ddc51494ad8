"""The end-of-crawl report, like Scrapy's stats dump: counters, failures by reason, items, pages/s,
elapsed; as a table for people and (``--stats-json``) as JSON for scripts."""

from __future__ import annotations

import json
from typing import Any

ORDER = ("scheduled", "fetched", "parsed", "stored", "items", "failed", "skipped", "duplicates", "filtered",
         "retried", "reclaimed", "redriven", "pending")


def report(stats: dict[str, Any], failures: dict[str, int]) -> dict[str, Any]:
    """The summary as data: the crawl's stats plus failures by reason and its speed."""
    elapsed = float(stats.get("elapsed") or 0.0)
    out = dict(stats)
    out["failures_by_reason"] = dict(failures)
    out["pages_per_second"] = round(stats.get("stored", 0) / elapsed, 3) if elapsed else 0.0
    return out


def table(data: dict[str, Any]) -> str:
    """A two-column table of the report (filtered reasons and failures indented under their total)."""
    rows: list[tuple[str, Any]] = [("crawl", data.get("crawl_id")), ("state", data.get("state"))]
    rows.append(("elapsed", f"{float(data.get('elapsed') or 0):.1f} s"))
    rows.append(("pages/s", f"{data.get('pages_per_second', 0):.1f}"))
    for key in ORDER:
        rows.append((key, data.get(key, 0)))
        if key == "failed":
            rows += [(f"  {reason}", n) for reason, n in data.get("failures_by_reason", {}).items()]
        if key == "filtered":
            rows += [(f"  {k.split(':', 1)[1]}", v) for k, v in sorted(data.items()) if k.startswith("filtered:")]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2, sort_keys=True, default=str)
        out.write("\n")


def finish(crawl: Any, args: Any, out: Any) -> None:
    """What a command prints and writes once its crawl is done: the table (to ``out``), ``--stats-json``
    and the feeds (``--output``, ``--items``)."""
    from ..storage.feeds import export
    from .watch import failure_counts

    data = report(crawl.stats(), failure_counts(crawl.rt, crawl.id))
    print(table(data), file=out)
    if getattr(args, "stats_json", None):
        write_json(args.stats_json, data)
    output, items = getattr(args, "output", None), getattr(args, "items", None)
    if output or items:
        pages, n_items = export(crawl.rt.storage, crawl.id, output, items)
        where = " and ".join(p for p in (output, items) if p)
        print(f"wrote {pages} page(s) and {n_items} item(s) to {where}", file=out)
