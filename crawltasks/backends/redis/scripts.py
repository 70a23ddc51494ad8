"""Lua scripts of one Redis client: registered once, and pipelined in one round trip.

Every Redis class of crawltasks (``RedisState``, ``RedisFrontier``, ``RedisGate``) takes its scripts
from here, so that a restarted or flushed Redis, which has lost them, is handled in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.commands.core import Script


def register(client: redis.Redis, *sources: str) -> tuple[Script, ...]:
    """The scripts of ``sources``, in order. A ``Script`` call loads its script again when Redis
    answers NOSCRIPT; only pipelined calls need ``pipelined``."""
    return tuple(client.register_script(source) for source in sources)


def pipelined(client: redis.Redis, build: Callable[[Any], None], *scripts: Script) -> list[Any]:
    """Run what ``build`` puts in a pipeline, in one round trip, and return the replies. Scripts go in
    as ``pipe.evalsha(script.sha, ...)`` by hand (a pipelined ``Script`` call costs a SCRIPT EXISTS
    first); when Redis has lost them, ``scripts`` are loaded and the pipeline runs once more, so the
    commands in it must bear running twice."""
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        build(pipe)
        try:
            return pipe.execute()
        except redis.exceptions.NoScriptError:
            if attempt == 2:
                raise
            for script in scripts:
                client.script_load(script.script)
    raise AssertionError("unreachable")
