"""The Celery app. Its configuration is ``celeryconfig.py``; nothing connects at import."""

import kombu.pools
from celery import Celery

from . import flowerguard  # noqa: F401 - `celery -A crawltasks flower` refuses an open address without auth

app = Celery("crawltasks")
app.config_from_object("celeryconfig")


def use_broker(url: str) -> None:
    """Point the app at another broker (embedded mode, tests) before it has connected."""
    app.conf.update(broker_url=url, broker_read_url=url, broker_write_url=url)
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    kombu.pools.reset()  # kombu keeps pools per connection globally; the old ones are closed
    app.amqp._producer_pool = None
