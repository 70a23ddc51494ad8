"""Celery configuration for crawltasks: broker, queues, every task route, delivery guarantees.

Read by ``crawltasks.worker.app`` (and so by ``celery -A crawltasks worker``). Only environment
variables are read here; nothing connects at import time.
"""

import os

from kombu import Exchange, Queue

broker_url = os.environ.get("CRAWLTASKS_BROKER_URL", "redis://127.0.0.1:6379/0")

# --- Queues -------------------------------------------------------------------------------------
# One queue per stage, and three fetch queues by priority. The order matters on Redis: with the
# "priority" queue order strategy a worker always pops from the first non-empty queue in this list.
# Fetch comes first: a fetch task only hands its batch to the process's fetch engine (a millisecond),
# and the dispatcher sends no more of them than the fetch workers can take, so they never starve the
# rest, while a fetch waiting behind parse work would leave its host idle. High before default before
# low; then store before parse, so that work already fetched is finished first.
STORE_QUEUE = "crawl.store"
PARSE_QUEUE = "crawl.parse"
FETCH_QUEUES = {
    "high": "crawl.fetch.high",
    "default": "crawl.fetch.default",
    "low": "crawl.fetch.low",
}
CONTROL_QUEUE = "crawl.control"
# The stage tasks (crawltasks.worker.tasks), sent by name (crawltasks.worker.sending).
FETCH_TASK, PARSE_TASK, STORE_TASK = "crawltasks.fetch", "crawltasks.parse", "crawltasks.store"

_exchange = Exchange("crawl", type="direct")
task_queues = [
    Queue(name, _exchange, routing_key=name, queue_arguments={"x-max-priority": 10})
    for name in (*FETCH_QUEUES.values(), STORE_QUEUE, PARSE_QUEUE, CONTROL_QUEUE)
]
task_default_queue = FETCH_QUEUES["default"]
task_default_exchange = "crawl"
task_default_routing_key = FETCH_QUEUES["default"]

# Every route lives here. Fetch batches are sent to the queue of their priority by
# ``crawltasks.dispatch`` through FETCH_QUEUES; this route is the default.
task_routes = {
    FETCH_TASK: {"queue": FETCH_QUEUES["default"], "routing_key": FETCH_QUEUES["default"]},
    PARSE_TASK: {"queue": PARSE_QUEUE, "routing_key": PARSE_QUEUE},
    STORE_TASK: {"queue": STORE_QUEUE, "routing_key": STORE_QUEUE},
    "crawltasks.control.*": {"queue": CONTROL_QUEUE, "routing_key": CONTROL_QUEUE},
}
imports = ["crawltasks.worker.tasks"]

# --- Serialization: JSON only, never pickle -----------------------------------------------------
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
event_serializer = "json"

# --- Delivery: at least once --------------------------------------------------------------------
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
# Visibility timeout is far above the longest task plus its longest retry countdown (60 s).
broker_transport_options = {
    "queue_order_strategy": "priority",
    "visibility_timeout": 2 * 3600,
    "priority_steps": list(range(10)),
}
if broker_url.startswith(("amqp", "pyamqp")):
    # RabbitMQ: the Redis-only options above are ignored; publisher confirms make a publish
    # return only once the broker has the message (at least once, end to end). Priorities: every
    # queue is declared with x-max-priority (above); a worker reads its queues round-robin, so run
    # one worker per queue family (docker/docker-compose.yml) to keep store/parse from waiting on fetch.
    broker_transport_options = {"confirm_publish": True}
broker_connection_retry_on_startup = True
broker_connection_max_retries = None
task_publish_retry = True
task_publish_retry_policy = {"max_retries": 10, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 3}
task_time_limit = 600
task_soft_time_limit = 540
worker_max_memory_per_child = 400_000  # KiB; a prefork child is replaced past this

# --- Results: ignored; crawl state lives in Redis counters ---------------------------------------
task_ignore_result = True
result_backend = None

# --- Monitoring: events on, so Flower shows tasks -------------------------------------------------
# CRAWLTASKS_TASK_EVENTS=0 turns them off where nobody watches (the embedded mode's own workers).
worker_send_task_events = os.environ.get("CRAWLTASKS_TASK_EVENTS", "1") != "0"
task_send_sent_event = worker_send_task_events
# Flower lists each task's argsrepr (crawl id, batch size, first URL: set by crawltasks.worker.sending) and the
# repr of its result; keep that repr short so a fetch result (metadata of a batch) stays one line.
task_annotations = {name: {"resultrepr_maxsize": 200}
                    for name in (FETCH_TASK, PARSE_TASK, STORE_TASK)}
worker_hijack_root_logger = False
