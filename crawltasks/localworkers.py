"""The workers ``crawltasks crawl`` runs itself: one in a thread of the command and, with
``--workers N``, N worker processes forked from it. Fleets use ``celery -A crawltasks worker``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from celery.utils.nodenames import anon_nodename, gethostname

import celeryconfig

from .embedded import EmbeddedError, die_with_parent, stop_process
from .settings import Settings

ALL_QUEUES = [q.name for q in celeryconfig.task_queues]  # in the order of celeryconfig


class InProcessWorker:
    """A Celery worker running in a thread of this process (thread pool)."""

    def __init__(self, app: Any, concurrency: int = 4, loglevel: str = "WARNING") -> None:
        self.app = app
        started = self._started = threading.Event()

        class Controller(app.WorkController):
            def on_consumer_ready(self, consumer: Any) -> None:
                super().on_consumer_ready(consumer)
                started.set()

        app.finalize()
        app.set_default()  # pool threads look up the current app; it must be this one, not a default
        app.set_current()
        self.worker = Controller(app=app, concurrency=concurrency, pool="threads", loglevel=loglevel,
                                 hostname=anon_nodename(hostname=None, prefix="embedded"),
                                 without_heartbeat=True, without_mingle=True, without_gossip=True)
        self._thread = threading.Thread(target=self.worker.start, name="celery-worker", daemon=True)

    def start(self, timeout: float = 30) -> None:
        """Start consuming, with the services of a worker (``celery worker`` starts them on its
        worker_ready signal, which a bare WorkController does not send)."""
        from . import runtime
        from .tasks import start_services

        self._thread.start()
        if not self._started.wait(timeout):
            raise EmbeddedError("the in-process Celery worker did not start")
        start_services(runtime.current().settings.fetch_concurrency)

    def stop(self, timeout: float = 30) -> None:
        """Ask the worker's own loop to shut down (closing it from this thread races with the loop),
        then stop its services."""
        from celery.worker import state

        from .tasks import stop_services

        state.should_terminate = 0
        self._thread.join(timeout)
        state.should_terminate = None
        stop_services()


class ForkedWorker:
    """A Celery worker (solo pool: one task at a time) in a forked copy of this process, in a
    process group of its own. Forked rather than started as ``celery worker``: the copy has
    everything imported already and is ready in a few milliseconds, where a new interpreter took
    0.55 s and as much CPU (measured), while the crawl was starting. Call it before this process
    starts threads or connects to anything: a fork copies only the calling thread."""

    def __init__(self, app: Any, env: dict[str, str], name: str, log_path: Path) -> None:
        for stream in (sys.stdout, sys.stderr):  # what is buffered is printed once, not by each copy
            stream.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the copy never returns from here
            die_with_parent(parent)  # a command killed with -9 takes its workers with it
            _run_forked(app, env, name, log_path)
        with contextlib.suppress(OSError):  # its own group, from this side too: no race with a kill
            os.setpgid(pid, pid)
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.poll() is None:  # the whole group: whatever the worker started goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)


def _run_forked(app: Any, env: dict[str, str], name: str, log_path: Path) -> None:
    """In the forked copy: a solo-pool worker on every queue until it is told to stop; never returns.

    It leaves with ``os._exit``: the objects it was copied with (the parent's clients and servers'
    handles) must not be finalized here, or the copy would close what belongs to the parent."""
    code = 1
    try:
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the command, which stops the workers itself
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ.update(env)
        app.conf.update(worker_send_task_events=False, task_send_sent_event=False)
        worker = app.Worker(hostname=name, pool_cls="solo", queues=ALL_QUEUES, loglevel="WARNING",
                            quiet=True, without_heartbeat=True, without_mingle=True, without_gossip=True)
        worker.start()
        code = worker.exitcode or 0
    except BaseException:  # noqa: BLE001 - reported in the log; the parent sees the exit code
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class ChildWorkers:
    """``processes`` worker processes beside the command, one task at a time each.

    Python runs one core per process, and threads of one process wait on each other for every
    network round trip (measured: Redis calls of 5-7 ms under load instead of 0.1 ms), so a crawl
    that should use several cores runs its tasks in several processes. A fetch task still fetches
    its batch concurrently, on threads of its own. One task at a time (the solo pool) because a
    prefork pool's parent decodes every message and hands it to a child through a pipe: 0.29 ms
    of CPU per page, an eighth of a crawl (measured)."""

    def __init__(self, app: Any, settings: Settings, processes: int, log_dir: Path) -> None:
        env = settings.to_env()
        self.procs: list[ForkedWorker] = []
        log = log_dir / "workers.log"
        importlib.import_module("crawltasks.tasks")  # and all it needs: imported once, here, for every copy
        try:
            for i in range(processes):
                self.procs.append(ForkedWorker(app, env, f"embedded-{os.getpid()}-{i}@{gethostname()}", log))
        except BaseException:
            self.signal_stop(kill=True)
            raise

    def stop(self, timeout: float = 30) -> None:
        """Warm shutdown: each finishes the tasks it holds (acks are late, so nothing is lost)."""
        self.signal_stop()
        self.wait(timeout)

    def signal_stop(self, kill: bool = False) -> None:
        """Ask for a warm shutdown (SIGTERM). ``kill`` is for a private broker whose crawl has
        finished: nothing is left to run or to acknowledge, and a kill saves the moment a Celery
        shutdown takes."""
        for proc in self.procs:
            if kill:
                proc.kill()
            else:
                proc.terminate()

    def wait(self, timeout: float = 30) -> None:
        """Wait for the processes to exit; kill those that are still there after ``timeout``."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            stop_process(proc, max(0.1, deadline - time.monotonic()), signal_=None)
