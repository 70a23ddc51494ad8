"""Which worker processes are alive: heartbeats (the ``Heartbeat`` and ``Fleet`` ports; in Redis:
``backends.redis.liveness``), so that the requests a dead worker held go back to the frontier within
seconds (``crawltasks.worker.reclaimer``), while a busy one keeps them.

Every worker process that claims requests beats from a thread of its own every ``BEAT_EVERY``
seconds; one silent for ``dead_after()`` seconds is dead. A long parse or a slow response does not
stop the beat. Times are Redis' own clock, so the machines' clocks may disagree.
"""

from __future__ import annotations

import os
import secrets
import socket

BEAT_EVERY = 2.0  # seconds between heartbeats


def dead_after() -> float:
    """Seconds of silence after which a worker counts as dead (CRAWLTASKS_DEAD_AFTER, default 10)."""
    return float(os.environ.get("CRAWLTASKS_DEAD_AFTER", "10"))


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
