"""``crawltasks.run``: a whole crawl from a plain script, blocking, with nothing running beforehand.

It uses what ``crawltasks crawl`` uses: the services the environment names, or else the embedded ones
(a private Redis and store under the data directory) and a Celery worker inside this process. What the
crawl produced is read before the services stop, so the result outlives them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .health import ServiceDown, check_services
from .settings import Settings


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
        return self.stats.get("state") == "finished"


def require_services(settings: Settings) -> None:
    """With no service configured, say at once that none answers, rather than wait on the defaults."""
    problems = check_services(settings)
    if problems:
        down = ServiceDown(problems[0])
        down.args = (f"{problems[0].line()}; no services are configured: crawltasks.run() or "
                     "`crawltasks crawl` run embedded ones",)
        raise down


@contextlib.contextmanager
def _services(data_dir: str | None) -> Iterator[tuple[Settings, Any]]:
    """The environment's services, or embedded ones: (settings, the embedded services or None)."""
    from . import runtime

    settings = Settings.from_env()
    if settings.broker_url:
        problems = check_services(settings)
        if problems:
            raise ServiceDown(problems[0])
        rt = runtime.configure(settings)
        try:
            yield settings, None
        finally:
            rt.close()
        return
    from .embedded import EmbeddedServices
    from .embedded import data_dir as default_dir

    with EmbeddedServices(default_dir(data_dir), wait=False) as emb:
        assert emb.settings is not None
        rt = runtime.configure(emb.settings)
        try:
            yield emb.settings, emb
        finally:
            rt.close()


def run(seeds: Any = None, *, data_dir: str | None = None, timeout: float | None = None,
        concurrency: int = 8, **options: Any) -> CrawlResult:
    """Run a crawl to its end in this process and return what it found. ``seeds`` and ``options`` are
    those of ``start_crawl`` (URLs, Requests or a Spider subclass; CrawlOptions fields). ``timeout``:
    seconds after which the crawl is cancelled (None: no limit)."""
    from .celeryapp import app, use_broker
    from .localworkers import InProcessWorker

    with _services(data_dir) as (settings, embedded):
        use_broker(settings.broker_url)
        if embedded:
            app.conf.update(worker_send_task_events=False, task_send_sent_event=False,
                            broker_transport_options={**app.conf.broker_transport_options, "polling_interval": 0.2})
        worker = InProcessWorker(app, concurrency=max(1, concurrency))
        worker.start()
        try:
            if embedded:
                embedded.wait_ready()
            return _crawl(seeds, timeout, options)
        finally:
            worker.stop()


def _crawl(seeds: Any, timeout: float | None, options: dict[str, Any]) -> CrawlResult:
    from .crawl import start_crawl

    crawl = start_crawl(seeds, **options)
    if not crawl.wait(timeout=timeout):
        crawl.cancel()
        crawl.wait(timeout=60)
    return CrawlResult(crawl.id, crawl.stats(), crawl.pages(), crawl.items(), crawl.failures())


_checked: set[int] = set()  # runtimes whose default services answered once already


def check_unconfigured(rt: Any) -> None:
    """``start_crawl`` on a runtime nobody configured (no CRAWLTASKS_BROKER_URL, no ``configure``):
    the defaults must answer, else one clear line at once."""
    if rt.settings.broker_url or id(rt) in _checked:
        return
    require_services(rt.settings)
    _checked.add(id(rt))
