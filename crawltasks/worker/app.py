"""The Celery app. Its configuration is ``celeryconfig.py``; nothing connects at import."""

import importlib.util
import logging
from pathlib import Path
from types import ModuleType
from typing import TextIO

import kombu.pools
from celery import Celery
from kombu.transport import redis as kombu_redis

from ..monitor import flowerguard  # noqa: F401 - `celery -A crawltasks flower` refuses an open address without auth

log = logging.getLogger("crawltasks")
CONFIG_FILE = Path(__file__).resolve().parents[2] / "celeryconfig.py"  # beside the package, installed or not


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


class DetachedSafeQoS(kombu_redis.QoS):
    """kombu's Redis QoS, except that a channel cut off from Redis by a lost connection leaves its
    unacknowledged messages in Redis instead of stopping the worker with an AttributeError.

    Why (kombu 5.7.0, Celery 5.7.0): on a lost broker connection, ``Consumer.on_connection_error_
    after_connected`` calls ``connection.collect()``, then ``connection.close()``. With Redis down,
    ``collect()`` fails to close the task channel (its pending BRPOP read raises before the channel
    is marked closed) and detaches the transport anyway (``transport.client = None``); ``close()``
    closes that channel again: it drops its pools, then ``restore_unacked_once`` -> ``restore_unacked``
    -> ``conn_or_acquire`` -> a new pool -> ``Channel._connparams`` reads
    ``self.connection.client.hostname``: AttributeError. Later, a task that was running meanwhile
    is acknowledged on that closed channel: ``ack`` -> the same path, ``'NoneType' object has no
    attribute 'client'``. Neither is a connection error, so the worker stops ("Unrecoverable
    error"), whenever work was in flight (late acks) as Redis went away.

    Leaving the messages is safe: they stay in Redis' ``unacked`` hash, and kombu's
    ``restore_visible`` puts them back after ``visibility_timeout``, as after any worker's death.
    crawltasks does not wait for that: the reclaimer (``leases``) puts the requests that were not
    finished back in the frontier within seconds, and the late message finds its claims gone and is
    dropped. Remove this class and the line that installs it once tests/test_broker_restart.py
    passes without them on a newer kombu/Celery.
    """

    def _cut_off(self) -> bool:
        """True when kombu would need the detached transport's connection to reach Redis."""
        channel = self.channel
        return channel._pool is None and getattr(channel.connection, "client", None) is None

    def restore_unacked_once(self, stderr: TextIO | None = None) -> None:
        if not self._cut_off():
            return super().restore_unacked_once(stderr)
        self._on_collect.cancel()
        self._flush()
        if self._delivered:
            log.warning("broker connection lost: %d unacknowledged message(s) stay in Redis until the "
                        "visibility timeout; the reclaimer puts back the requests they held", len(self._delivered))
            self._delivered.clear()
        self._delivered.restored = True
        return None

    def ack(self, delivery_tag: str) -> None:
        if not self._cut_off():
            super().ack(delivery_tag)
            return
        log.warning("broker connection lost: a message received before stays in Redis until the visibility "
                    "timeout (its work is done: it will be dropped)")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if not self._cut_off():
            super().reject(delivery_tag, requeue=requeue)
            return
        log.warning("broker connection lost: a message received before stays in Redis until the visibility "
                    "timeout; the reclaimer puts back the requests it held")


if kombu_redis.Channel.QoS is kombu_redis.QoS:  # the Sentinel channel inherits it
    kombu_redis.Channel.QoS = DetachedSafeQoS


def use_broker(url: str) -> None:
    """Point the app at another broker (embedded mode, tests) before it has connected."""
    app.conf.update(broker_url=url, broker_read_url=url, broker_write_url=url)
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    kombu.pools.reset()  # kombu keeps pools per connection globally; the old ones are closed
    app.amqp._producer_pool = None
