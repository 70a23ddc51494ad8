"""Real worker processes (`celery -A crawltasks worker`) for tests that need several of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from crawltasks.local import workers
from crawltasks.settings import Settings

from .helpers import wait_for

__all__ = ["ALL_QUEUES", "ROOT", "WorkerProcess", "wait_for", "worker_env"]

ROOT = Path(__file__).resolve().parent.parent
ALL_QUEUES = ",".join(workers.ALL_QUEUES)


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")}
    env.update(settings.to_env(), PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


class WorkerProcess:
    """One `celery worker` subprocess; stop() is safe to call twice."""

    def __init__(self, settings: Settings, name: str, queues: str = ALL_QUEUES, pool: str = "threads",
                 concurrency: int = 4, log_path: Path | None = None, env: dict[str, str] | None = None,
                 app: str = "crawltasks", loglevel: str = "warning") -> None:
        self.name = name
        cmd = [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", queues, "-P", pool,
               "-c", str(concurrency), "-n", f"{name}@%h", "-l", loglevel,
               "--without-gossip", "--without-mingle", "--without-heartbeat"]
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(settings, **(env or {})), stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        if log_path:
            out.close()  # the child has its own copy

    def stop(self, timeout: float = 15) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
