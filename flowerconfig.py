"""Flower's settings for crawltasks: read by ``celery -A crawltasks flower`` run from the project root.

Flower reads this file after its ``FLOWER_*`` environment variables and lets it win, so every value
here defers to the environment. Authentication is configured by environment only:

    FLOWER_BASIC_AUTH=user:password   (several: user1:pw1,user2:pw2)

Without it Flower listens on 127.0.0.1 only and its HTTP API stays off. Binding any other address
(``FLOWER_ADDRESS=0.0.0.0`` as in docker/docker-compose.yml, or ``--address``) without authentication
is refused by ``crawltasks/monitor/flowerguard.py``, which ``-A crawltasks`` loads wherever Flower is started
(this file is only read from the current directory, and the command line overrides it): a Flower
reachable from the network can revoke tasks and shut workers down.
"""

import os

import crawltasks.monitor.flowerguard  # noqa: F401 - the address check, for a `celery flower` started here without -A too

address = os.environ.get("FLOWER_ADDRESS", "127.0.0.1")
port = int(os.environ.get("FLOWER_PORT", "5555"))

# The task list shows what a crawl batch is (crawl id, batch size, first URL: the tasks' argsrepr),
# its state and where it ran; results are small counters, not page bodies.
tasks_columns = os.environ.get("FLOWER_TASKS_COLUMNS", "name,uuid,state,args,received,started,runtime,worker")
# A crawl sends three tasks per batch: keep enough history to look back, bounded in memory.
max_tasks = int(os.environ.get("FLOWER_MAX_TASKS", "20000"))
# Workers that went away (scaled down, crashed) drop off the dashboard after ten minutes.
purge_offline_workers = int(os.environ.get("FLOWER_PURGE_OFFLINE_WORKERS", "600"))

