"""Lua scripts of one Redis client, registered once.

Every Redis class of crawltasks (``RedisState``, ``RedisFrontier``, ``RedisGate``) takes its scripts
from here, so that a restarted or flushed Redis, which has lost them, is handled in one place.
"""

from __future__ import annotations

import redis
from redis.commands.core import Script


def register(client: redis.Redis, *sources: str) -> tuple[Script, ...]:
    """The scripts of ``sources``, in order. A ``Script`` call loads its script again when Redis
    answers NOSCRIPT (a script sent with ``evalsha`` in a pipeline would not be)."""
    return tuple(client.register_script(source) for source in sources)
