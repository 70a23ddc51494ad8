"""The workers ``crawltasks crawl`` runs itself: ``--workers N`` worker processes, forked from the
command through a supervisor (``zygote``) that restarts one that dies. The command runs no task
itself, so a page whose processing kills its process kills a worker, which is replaced, never the
command. ``crawltasks.run()`` and the tests run a worker in a thread instead (``InProcessWorker``).
Fleets use ``celery -A crawltasks worker``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from celery.utils.nodenames import anon_nodename, gethostname

from ..errors import ServiceError
from ..settings import Settings
from ..worker.app import celeryconfig
from .embedded import EmbeddedError, stop_process
from .zygote import Zygote, fork

ALL_QUEUES = [q.name for q in celeryconfig.task_queues]  # in the order of celeryconfig


class InProcessWorker:
    """A Celery worker running in a thread of this process (thread pool). A task that kills its
    process (a spider calling ``os._exit``, a crashing parser) kills this process too: the command
    line's crawls use ``ChildWorkers`` instead."""

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
        from .. import runtime
        from ..worker.tasks import start_services

        self._thread.start()
        if not self._started.wait(timeout):
            raise EmbeddedError("the in-process Celery worker did not start")
        start_services(runtime.current().settings.fetch_concurrency)

    def stop(self, timeout: float = 30) -> None:
        """Ask the worker's own loop to shut down (closing it from this thread races with the loop),
        then stop its services."""
        from celery.worker import state

        from ..worker.tasks import stop_services

        state.should_terminate = 0
        self._thread.join(timeout)
        state.should_terminate = None
        stop_services()


class WorkersGone(ServiceError, RuntimeError):
    """The local worker processes died and are not restarted any more (a crash loop)."""


class ForkedProcess:
    """``target`` in a forked copy of this process, in a process group of its own (a terminal's
    Ctrl-C reaches the command, which stops its workers itself), dying with this process. Forked
    rather than started as a new interpreter: the copy has everything imported already and is ready
    in a few milliseconds, where a new interpreter took 0.55 s and as much CPU (measured), while the
    crawl was starting. Make it before this process starts threads or connects to anything: a fork
    copies only the calling thread."""

    def __init__(self, target: Callable[[], int]) -> None:
        def in_own_group() -> int:
            os.setpgid(0, 0)
            return target()

        self.pid = fork(in_own_group, os.getpid())
        with contextlib.suppress(OSError):  # its own group, from this side too: no race with a kill
            os.setpgid(self.pid, self.pid)
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
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0)
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
        """The whole group: the zygote, its workers and whatever they started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


class ChildWorkers:
    """``processes`` worker processes beside the command, one task at a time each (``concurrency``
    > 1: a thread pool of that many), under a zygote that replaces one that dies.

    Python runs one core per process, and threads of one process wait on each other for every
    network round trip (measured: Redis calls of 5-7 ms under load instead of 0.1 ms), so a crawl
    that should use several cores runs its tasks in several processes. A fetch task still fetches
    its batch concurrently, on threads of its own. One task at a time (the solo pool) because a
    prefork pool's parent decodes every message and hands it to a child through a pipe: 0.29 ms
    of CPU per page, an eighth of a crawl (measured)."""

    def __init__(self, app: Any, settings: Settings, processes: int, log_dir: Path, concurrency: int = 1,
                 loglevel: str = "WARNING") -> None:
        self.log_path = log_dir / "workers.log"
        self.stopping = False
        self._pending = b""
        importlib.import_module("crawltasks.worker.tasks")  # and all it needs: imported once, here, for every copy
        env = settings.to_env()
        prefix = f"embedded-{os.getpid()}"
        reader, writer = os.pipe()  # the zygote's reports, read by this side

        def worker(zygote: Zygote, index: int, generation: int, predecessor: int | None) -> int:
            os.close(writer)
            name = f"{prefix}-{index}{f'.{generation}' if generation else ''}@{gethostname()}"
            return run_worker(app, name, concurrency, loglevel, predecessor, lambda: zygote.mark_ready(index))

        def supervise() -> int:
            os.close(reader)
            os.set_blocking(writer, False)  # a command that does not read any more never blocks it
            _redirect(self.log_path)
            os.environ.update(env)
            parent = os.getpid()
            report = _reporter(writer)
            zygote = Zygote(processes, lambda *a: fork(lambda: worker(zygote, *a), parent), report)
            return zygote.run()

        try:
            self.zygote = ForkedProcess(supervise)
        finally:
            os.close(writer)
        self._reader = reader
        os.set_blocking(reader, False)

    def reports(self) -> list[str]:
        """What the zygote said since the last call: workers that died, and were restarted or not."""
        chunks = [self._pending]
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self._reader, 65536):
                chunks.append(chunk)
        *lines, self._pending = b"".join(chunks).split(b"\n")
        return [line.decode(errors="replace") for line in lines if line]

    def check(self, out: TextIO | None = None) -> None:
        """Print the zygote's reports; raise WorkersGone when no worker is left to crawl."""
        for line in self.reports():
            print(f"crawltasks: {line}", file=out or sys.stderr)
        if not self.stopping and self.zygote.poll() is not None:
            raise WorkersGone(f"the local worker processes died and are not restarted; see {self.log_path}")

    def stop(self, timeout: float = 30) -> None:
        """Warm shutdown: each finishes the tasks it holds (acks are late, so nothing is lost)."""
        self.signal_stop()
        self.wait(timeout)

    def signal_stop(self, kill: bool = False) -> None:
        """Ask for a warm shutdown (SIGTERM, which the zygote passes on). ``kill`` is for a private
        broker whose crawl has finished: nothing is left to run or to acknowledge, and a kill saves
        the moment a Celery shutdown takes."""
        self.stopping = True
        if kill:
            self.zygote.kill()
        else:
            self.zygote.terminate()

    def wait(self, timeout: float = 30) -> None:
        """Wait for the zygote, which waits for its workers; kill them all after ``timeout``."""
        stop_process(self.zygote, max(0.1, timeout), signal_=None)
        self.zygote.kill()  # a worker the zygote could not wait for (it was killed) goes with its group
        with contextlib.suppress(OSError):
            os.close(self._reader)


def run_worker(app: Any, name: str, concurrency: int, loglevel: str, predecessor: int | None,
               on_ready: Callable[[], None]) -> int:
    """In a worker process: a worker on every queue until it is told to stop; returns its exit code.
    A replacement first frees what its dead predecessor held."""
    from celery import signals

    if predecessor:
        _bury(predecessor)
    signals.worker_ready.connect(lambda **_: on_ready(), weak=False)
    app.conf.update(worker_send_task_events=False, task_send_sent_event=False)
    pool = "solo" if concurrency <= 1 else "threads"
    worker = app.Worker(hostname=name, pool_cls=pool, concurrency=concurrency, queues=ALL_QUEUES,
                        loglevel=loglevel, quiet=True, without_heartbeat=True, without_mingle=True,
                        without_gossip=True)
    worker.start()
    return worker.exitcode or 0


def _bury(pid: int) -> None:
    """The worker this one replaces is dead (the zygote reaped it): its requests go back to the
    frontier now, not after its heartbeat's silence (``CRAWLTASKS_DEAD_AFTER``)."""
    from .. import runtime
    from ..worker.reclaimer import reclaim_all

    try:
        rt = runtime.current()
        if rt.fleet().forget_process(pid):
            reclaim_all(rt)
    except Exception as exc:  # noqa: BLE001 - the reclaimers do it later anyway
        print(f"freeing what worker {pid} held: {exc!r}; the reclaimers will", file=sys.stderr)


def _redirect(log_path: Path) -> None:
    """Output to the workers' log (appended), input from nowhere: the terminal is the command's."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)


def _reporter(fd: int) -> Callable[[str], None]:
    """One line to the command (through ``fd``) and to the log, with the time."""
    def report(line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, line.encode() + b"\n")
        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] zygote: {line}", file=sys.stderr, flush=True)

    return report
