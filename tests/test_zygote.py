"""The supervisor of the command's worker processes (``local.zygote``), run in a forked copy of this
process as the command runs it, with workers that are tiny forked functions rather than Celery: it
restarts one that dies after it was ready, gives up on a crash loop, and passes a stop on. What a
Celery worker killed mid-crawl costs a crawl is tests/test_poison.py's (stack tier)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable

import pytest

from crawltasks.local import zygote
from crawltasks.local.zygote import MAX_FAILED_STARTS, Slot, Zygote, exit_reason, fork

Worker = Callable[[Zygote, int, int, Callable[[str], None]], int]  # (zygote, index, generation, say) -> exit code


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(zygote, "BACKOFF", 0.001)  # a forked copy keeps it


class Supervised:
    """A zygote of ``processes`` workers in a forked copy of this process; what it and its workers
    say comes back through a pipe, a line each."""

    def __init__(self, processes: int, worker: Worker) -> None:
        reader, writer = os.pipe()

        def say(line: str) -> None:
            os.write(writer, line.encode() + b"\n")

        def supervise() -> int:
            os.close(reader)
            parent = os.getpid()
            z = Zygote(processes, lambda i, g, p: fork(lambda: worker(z, i, g, say), parent), say)
            return z.run()

        self.pid = fork(supervise, os.getpid())
        os.close(writer)
        self.reader, self.pending, self.lines = reader, b"", []

    def read_until(self, done: Callable[[list[str]], bool], timeout: float = 10) -> list[str]:
        deadline = time.monotonic() + timeout
        while not done(self.lines):
            left = deadline - time.monotonic()
            assert left > 0, f"still waiting; said so far: {self.lines}"
            if select.select([self.reader], [], [], left)[0]:
                chunk = os.read(self.reader, 65536)
                if not chunk:
                    break
                *lines, self.pending = (self.pending + chunk).split(b"\n")
                self.lines += [line.decode() for line in lines]
        return self.lines

    def exit_code(self, timeout: float = 10) -> int:
        self.read_until(lambda _: False, timeout)  # until every writer has gone
        os.close(self.reader)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            assert time.monotonic() < deadline, "the zygote did not exit"
            time.sleep(0.01)


def test_a_worker_dying_after_it_was_ready_is_restarted_and_a_crash_loop_is_given_up():
    def worker(z: Zygote, index: int, generation: int, say: Callable[[str], None]) -> int:
        if generation == 0:
            z.mark_ready(index)
            return 7  # dies while it works: restarted
        return 3  # its replacements die before they are ready

    supervised = Supervised(1, worker)
    code = supervised.exit_code()
    lines = supervised.lines
    assert code == 1, lines
    assert lines[0].startswith("local worker 0 (pid ") and " died (exit code 3) " not in lines[0]
    assert " died (exit code 7) after " in lines[0] and "; restarted it (pid " in lines[0]
    before_ready = [line for line in lines if "before it was ready" in line]
    assert len(before_ready) == MAX_FAILED_STARTS
    assert before_ready[-1].endswith(f"{MAX_FAILED_STARTS} workers in a row died before they were ready, so none "
                                     "is restarted any more (the workers' log says why they die)")
    assert lines[-1] == "no local worker process is left"


def test_a_stop_is_passed_on_and_nothing_is_restarted_after_it():
    def worker(z: Zygote, index: int, generation: int, say: Callable[[str], None]) -> int:
        z.mark_ready(index)
        say(f"ready {index}")
        signal.pause()  # until the zygote passes the stop on (SIGTERM ends it)
        return 0

    supervised = Supervised(2, worker)
    supervised.read_until(lambda lines: {"ready 0", "ready 1"} <= set(lines))
    os.kill(supervised.pid, signal.SIGTERM)
    assert supervised.exit_code() == 0
    assert sorted(supervised.lines) == ["ready 0", "ready 1"]  # no death reported, none restarted


# --- its decisions, one at a time -------------------------------------------------------------------
def test_exit_reasons():
    assert [exit_reason(c) for c in (0, 3, -9, -15, -200)] == [
        "exit code 0", "exit code 3", "killed by SIGKILL", "killed by SIGTERM", "killed by signal 200"]


class Sleepers:
    """Real processes that sleep, as forked workers; each start is recorded."""

    def __init__(self) -> None:
        self.procs: dict[int, subprocess.Popen] = {}
        self.starts: list[tuple[int, int, int | None]] = []

    def start(self, index: int, generation: int, predecessor: int | None) -> int:
        proc = subprocess.Popen(["sleep", "30"])
        self.procs[proc.pid] = proc
        self.starts.append((index, generation, predecessor))
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture
def sleepers():
    s = Sleepers()
    yield s
    s.stop()


def test_a_death_after_a_stop_or_after_giving_up_starts_nothing(sleepers):
    said: list[str] = []
    z = Zygote(1, sleepers.start, said.append)
    first = z._fork(Slot(0, 0.0), None)
    z.mark_ready(0)
    z._died(z.running.pop(first), first, -9)
    [(second, slot)] = z.running.items()
    assert sleepers.starts == [(0, 0, None), (0, 1, first)] and slot.generation == 1
    assert said[-1].startswith(f"local worker 0 (pid {first}) died (killed by SIGKILL) after ")
    z.gave_up = True
    z._died(z.running.pop(second), second, 1)
    assert said[-1] == f"local worker 0 (pid {second}) died (exit code 1) before it was ready; not restarted"
    z.gave_up, z.stopping = False, True
    z._died(Slot(0, 0.0), second, 1)
    assert len(sleepers.starts) == 2 and len(said) == 2


def test_a_stop_reaches_every_worker_and_one_forked_during_it(sleepers):
    z = Zygote(2, sleepers.start, lambda line: None)
    pids = [z._fork(Slot(i, 0.0), None) for i in range(2)]
    z._stop(signal.SIGTERM, None)
    late = z._fork(Slot(0, 0.0, 1), pids[0])
    for pid in [*pids, late]:
        assert sleepers.procs[pid].wait(5) == -signal.SIGTERM
