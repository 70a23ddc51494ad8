"""The crawltasks Celery app with a short broker visibility timeout, for crash tests only.

A worker killed whole leaves its reserved messages in Redis' ``unacked`` hash until the visibility
timeout passes (two hours in ``celeryconfig``). Here it is a few seconds, and the surviving workers
sweep often, so a crash test sees the redelivery within its run. Start with
``celery -A tests.crashapp worker``; CRASH_VISIBILITY_TIMEOUT overrides the timeout.
"""

import os

from crawltasks.worker.app import app

VISIBILITY_TIMEOUT = float(os.environ.get("CRASH_VISIBILITY_TIMEOUT", "6"))

app.conf.broker_transport_options = {
    **app.conf.broker_transport_options,
    "visibility_timeout": VISIBILITY_TIMEOUT,
    "unacked_restore_interval": 1.0,
}

__all__ = ["app"]

if os.environ.get("CRASH_TRACE"):  # a directory: one JSON line per task event, to trace a lost request
    import json
    import re
    import time

    from celery import signals

    _trace = open(os.path.join(os.environ["CRASH_TRACE"], f"trace-{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115

    def _urls(args: object) -> list[str]:
        text = json.dumps(args, default=str)
        return sorted(set(re.findall(r'"url": "([^"]+)"', text)))

    @signals.task_received.connect
    def _received(request=None, **_: object) -> None:
        _trace.write(json.dumps({"t": time.time(), "ev": "received", "id": request.id, "name": request.name,
                                 "redelivered": request.delivery_info.get("redelivered")}) + "\n")

    @signals.task_prerun.connect
    def _prerun(task_id=None, task=None, args=None, **_: object) -> None:
        _trace.write(json.dumps({"t": time.time(), "ev": "prerun", "id": task_id, "name": task.name,
                                 "urls": _urls(args)}) + "\n")

    @signals.task_postrun.connect
    def _postrun(task_id=None, task=None, state=None, retval=None, **_: object) -> None:
        _trace.write(json.dumps({"t": time.time(), "ev": "postrun", "id": task_id, "name": task.name,
                                 "state": state, "out": _urls(retval)}) + "\n")

    @signals.before_task_publish.connect
    def _publish(headers=None, body=None, **_: object) -> None:
        _trace.write(json.dumps({"t": time.time(), "ev": "publish", "id": (headers or {}).get("id"),
                                 "name": (headers or {}).get("task"), "urls": _urls(body)}) + "\n")
