"""Crawl states and request outcomes are enums: the Lua scripts write only their members, and a view
that follows a crawl stops at every end state, not only at ``finished``."""

from __future__ import annotations

import io
import re
import threading
import time

from rich.console import Console

from crawltasks.backends.redis import lua
from crawltasks.backends.redis.keys import Keys
from crawltasks.monitor.watch import watch
from crawltasks.settings import CrawlOptions
from crawltasks.states import ENDED, CrawlState


def test_every_state_the_lua_scripts_write_is_a_member():
    scripts = "\n".join(v for v in vars(lua).values() if isinstance(v, str))
    written = set(re.findall(r"'state', '([a-z_]+)'", scripts))
    for pair in re.findall(r"and '([a-z_]+)' or '([a-z_]+)'", scripts):  # cancelled and 'x' or 'y'
        written |= set(pair)
    compared = set(re.findall(r"'state'\) == '([a-z_]+)'", scripts))
    assert written, "no state found in the scripts: the pattern no longer matches them"
    assert written | compared <= {s.value for s in CrawlState}, written | compared


def test_members_are_their_strings():
    assert CrawlState.RUNNING == "running" and f"{CrawlState.CANCELLED}" == "cancelled"
    assert "cancelled" in ENDED and "finished" in ENDED


def test_watch_ends_on_a_cancelled_crawl(rt, crawl_id):
    """It used to end on ``finished`` only, so ``stats ID --watch`` on a cancelled crawl never ended."""
    rt.state.create_crawl(crawl_id, CrawlOptions().to_dict(), ["http://127.0.0.1:9/"])
    rt.state.r.hset(Keys.meta(crawl_id), mapping={"state": CrawlState.CANCELLED, "finished_at": time.time()})
    watcher = threading.Thread(target=watch, args=(crawl_id,),
                               kwargs={"interval": 0.01, "rt": rt, "console": Console(file=io.StringIO())},
                               daemon=True)
    watcher.start()
    watcher.join(timeout=30)
    assert not watcher.is_alive(), "watch kept following a cancelled crawl"
