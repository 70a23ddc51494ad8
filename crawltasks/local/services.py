"""Which services a command or a script uses, opened for the length of a ``with``: the ones the
environment names (probed first, so one that is down is named at once), a running embedded crawl's
(from a second terminal), or embedded ones started here under the data directory."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..settings import Settings


@contextmanager
def open_services(data_dir: str | None, wait: bool = True, attach: bool = False) -> Iterator[tuple[Settings, Any]]:
    """Yields (settings, the embedded services started here or None). ``wait=False``: the embedded
    store may still be starting (see ``wait_ready``). ``attach``: on a data directory where another
    command crawls, use that command's services (else that is an error: one crawl per directory)."""
    from .. import runtime

    settings = Settings.from_env()
    if settings.broker_url:
        from ..monitor.health import ServiceDown, check_services

        problems = check_services(settings)
        if problems:
            raise ServiceDown(problems[0])
        with _configured(runtime, settings):
            yield settings, None
        return
    from .embedded import EmbeddedError, EmbeddedServices
    from .embedded import data_dir as resolve

    root = resolve(data_dir)
    running = EmbeddedServices.running(root)
    if running is not None:
        if not attach:
            raise EmbeddedError(f"a crawl runs on {root} already: watch it with 'crawltasks stats ID --watch', "
                                "or give this one a --data-dir of its own")
        with _configured(runtime, running):  # a second terminal: the running command's services
            yield running, None
        return
    with EmbeddedServices(root, wait=wait) as emb:
        assert emb.settings is not None
        with _configured(runtime, emb.settings):
            yield emb.settings, emb


@contextmanager
def _configured(runtime: Any, settings: Settings) -> Iterator[None]:
    rt = runtime.configure(settings)
    try:
        yield
    finally:
        rt.close()


def quiet_private_broker(app: Any) -> None:
    """A private broker nobody can watch: no event messages, and an idle worker notices a stop
    request within one poll (0.2 s rather than 1 s)."""
    app.conf.update(worker_send_task_events=False, task_send_sent_event=False,
                    broker_transport_options={**app.conf.broker_transport_options, "polling_interval": 0.2})
