"""crawltasks: a distributed web crawler on Celery.

Public API: ``run``, ``start_crawl``, ``Crawl``, ``Spider``, ``Request``, ``Response``, ``CrawlOptions``.
``app`` is the Celery app (what ``celery -A crawltasks worker`` finds). Names are imported on first
use, so importing the package is cheap and opens no connection.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "start_crawl": "crawltasks.crawl",
    "run": "crawltasks.local.runner",
    "CrawlResult": "crawltasks.local.runner",
    "Crawl": "crawltasks.crawl",
    "Spider": "crawltasks.spiders",
    "Response": "crawltasks.spiders",
    "Request": "crawltasks.models",
    "CrawlOptions": "crawltasks.settings",
    "Settings": "crawltasks.settings",
    "app": "crawltasks.worker.app",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crawltasks' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
