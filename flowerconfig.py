"""Flower's settings for crawltasks: read by ``celery -A crawltasks flower`` run from the project root.

Flower reads this file after its ``FLOWER_*`` environment variables and lets it win, so every value
here defers to the environment. Authentication is configured by environment only:

    FLOWER_BASIC_AUTH=user:password   (several: user1:pw1,user2:pw2)

Without it Flower listens on 127.0.0.1 only and its HTTP API stays off. Binding any other address
(``FLOWER_ADDRESS=0.0.0.0``, as in docker/docker-compose.yml) without authentication is refused:
a Flower reachable from the network can revoke tasks and shut workers down.
"""

import os
import sys

_LOOPBACK = ("127.", "::1", "localhost")

address = os.environ.get("FLOWER_ADDRESS", "127.0.0.1")
port = int(os.environ.get("FLOWER_PORT", "5555"))

# The task list shows what a crawl batch is (crawl id, batch size, first URL: the tasks' argsrepr),
# its state and where it ran; results are small counters, not page bodies.
tasks_columns = os.environ.get("FLOWER_TASKS_COLUMNS", "name,uuid,state,args,received,started,runtime,worker")
# A crawl sends three tasks per batch: keep enough history to look back, bounded in memory.
max_tasks = int(os.environ.get("FLOWER_MAX_TASKS", "20000"))
# Workers that went away (scaled down, crashed) drop off the dashboard after ten minutes.
purge_offline_workers = int(os.environ.get("FLOWER_PURGE_OFFLINE_WORKERS", "600"))

if (not address.startswith(_LOOPBACK) and not os.environ.get("FLOWER_BASIC_AUTH")
        and not os.environ.get("FLOWER_AUTH")):
    sys.exit(f"flower: refusing to listen on {address} without authentication; "
             "set FLOWER_BASIC_AUTH=user:password (or FLOWER_AUTH for OAuth)")
