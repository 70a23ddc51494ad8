"""``crawltasks.run``: a whole crawl from a plain script, blocking, with nothing running beforehand.

It uses the services ``crawltasks crawl`` uses: the ones the environment names, or else the embedded
ones (a private Redis and store under the data directory). Unlike the command, it runs its Celery
worker in a thread of this process, not in forked processes: it runs inside the caller's program,
which may have threads of its own, and a fork copies only the calling thread (a lock another thread
held stays held in the copy). What the crawl produced is read before the services stop, so the result
outlives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..states import CrawlState
from .services import open_services, quiet_private_broker


@dataclass
class CrawlResult:
    """A finished crawl, read back before its services stopped."""

    id: str
    stats: dict[str, Any]
    pages: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.stats.get("state") == CrawlState.FINISHED


def run(seeds: Any = None, *, data_dir: str | None = None, timeout: float | None = None,
        concurrency: int = 8, **options: Any) -> CrawlResult:
    """Run a crawl to its end in this process and return what it found. ``seeds`` and ``options`` are
    those of ``start_crawl`` (URLs, Requests or a Spider subclass; CrawlOptions fields). ``timeout``:
    seconds after which the crawl is cancelled (None: no limit).

    The worker runs in this process: a spider that kills its process (``os._exit``, a crashing
    parser, the OOM killer) kills the caller too. Run such spiders with ``crawltasks crawl``, whose
    workers are processes of their own, restarted when they die."""
    from ..worker.app import app, use_broker
    from .workers import InProcessWorker

    with open_services(data_dir, wait=False) as (settings, embedded):
        use_broker(settings.broker_url)
        if embedded:
            quiet_private_broker(app)
        worker = InProcessWorker(app, concurrency=max(1, concurrency))
        worker.start()
        try:
            if embedded:
                embedded.wait_ready()
            return _crawl(seeds, timeout, options)
        finally:
            worker.stop()


def _crawl(seeds: Any, timeout: float | None, options: dict[str, Any]) -> CrawlResult:
    from ..crawl import start_crawl

    crawl = start_crawl(seeds, **options)
    if not crawl.wait(timeout=timeout):
        crawl.cancel()
        crawl.wait(timeout=60)
    return CrawlResult(crawl.id, crawl.stats(), crawl.pages(), crawl.items(), crawl.failures())
