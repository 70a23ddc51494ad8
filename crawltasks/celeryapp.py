"""The Celery app. Its configuration is ``celeryconfig.py``; nothing connects at import."""

import importlib.util
from pathlib import Path
from types import ModuleType

import kombu.pools
from celery import Celery

from . import flowerguard  # noqa: F401 - `celery -A crawltasks flower` refuses an open address without auth

CONFIG_FILE = Path(__file__).resolve().parent.parent / "celeryconfig.py"  # beside the package, installed or not


def _load_config() -> ModuleType:
    """The project's ``celeryconfig.py``, loaded by its path: ``celery`` puts the current directory
    first on ``sys.path``, so a user's own ``celeryconfig.py`` there would otherwise replace it, and
    the worker would start with no routes and listen on the wrong queue without a word."""
    spec = importlib.util.spec_from_file_location("crawltasks_celeryconfig", CONFIG_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {CONFIG_FILE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


celeryconfig = _load_config()  # its queues and routes, for the modules that name them
app = Celery("crawltasks")
app.config_from_object(celeryconfig)


def use_broker(url: str) -> None:
    """Point the app at another broker (embedded mode, tests) before it has connected."""
    app.conf.update(broker_url=url, broker_read_url=url, broker_write_url=url)
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    kombu.pools.reset()  # kombu keeps pools per connection globally; the old ones are closed
    app.amqp._producer_pool = None
