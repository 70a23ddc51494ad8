"""The parts of the no-services mode and of the command's processes that can be tried in moments:
the data directory's lock as a second terminal sees it, stopping children (and killing those that
hang), stale servers of a command that died, forked processes, which services a command opens. The
embedded servers and the command's Celery workers themselves are started by the stack tier."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery import Celery

from crawltasks import runtime
from crawltasks.local import embedded, services
from crawltasks.local.embedded import EmbeddedError, EmbeddedServices, MongoProcess, stop_process
from crawltasks.local.workers import ForkedProcess, _reporter
from crawltasks.monitor.health import ServiceDown
from crawltasks.settings import ENV_BROKER, ENV_MONGO, ENV_REDIS, Settings

from .helpers import free_port


@contextmanager
def held(root: Path) -> Iterator[None]:
    """The data directory's lock, held as a running command holds it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


def python(code: str, *args: str) -> subprocess.Popen:
    """A child Python running ``code``; it prints 'ready' once it is set up (read here before returning)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


SLEEPER = "import time; print('ready', flush=True); time.sleep(30)"
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(30)"


# --- the data directory ------------------------------------------------------------------------------
def test_the_data_directory_is_given_or_from_the_environment(monkeypatch):
    monkeypatch.delenv("CRAWLTASKS_DATA_DIR", raising=False)
    assert embedded.data_dir() == Path("~/.local/share/crawltasks").expanduser()
    monkeypatch.setenv("CRAWLTASKS_DATA_DIR", "/srv/crawls")
    assert embedded.data_dir() == Path("/srv/crawls") and embedded.data_dir("~/mine") == Path.home() / "mine"


def test_a_second_terminal_finds_the_running_commands_services(tmp_path):
    root = tmp_path / "data"
    assert EmbeddedServices.running(root) is None  # nothing ever ran here
    root.mkdir()
    (root / "lock").touch()
    assert EmbeddedServices.running(root) is None  # a lock nobody holds
    given = Settings(broker_url="redis+socket:///tmp/r.sock", redis_url="unix:///tmp/r.sock",
                     mongo_url="mongodb://127.0.0.1:4000/")
    with held(root):
        assert EmbeddedServices.running(root) is None  # held, but its addresses are not written yet
        (root / embedded.ADDRESSES).write_text(json.dumps({**given.to_env(), "pid": 1}))
        found = EmbeddedServices.running(root)
        assert (found.broker_url, found.redis_url, found.mongo_url) == (given.broker_url, given.redis_url,
                                                                        given.mongo_url)
        (root / embedded.ADDRESSES).write_text("{half")
        assert EmbeddedServices.running(root) is None


def test_a_data_directory_in_use_is_refused_before_anything_starts(tmp_path):
    with held(tmp_path), pytest.raises(EmbeddedError, match=f"data directory {tmp_path} is in use"):
        EmbeddedServices(tmp_path).start()
    assert not (tmp_path / "mongo.log").exists()


# --- children: stopped, killed when they hang, stale ones of a dead command ------------------------------
def test_stopping_a_child_asks_then_kills_one_that_hangs():
    polite = python(SLEEPER)
    stop_process(polite, timeout=5)
    assert polite.returncode == -signal.SIGTERM
    stubborn = python(STUBBORN)
    stop_process(stubborn, timeout=0.1)
    assert stubborn.returncode == -signal.SIGKILL
    asked = python(SLEEPER)
    asked.terminate()
    stop_process(asked, timeout=5, signal_=None)  # asked already: only waited for
    assert asked.returncode == -signal.SIGTERM


def test_alive_until_reaped():
    assert embedded._alive(os.getpid())
    child = subprocess.Popen(["true"])
    child.wait()
    assert not embedded._alive(child.pid)


def test_a_store_left_running_by_a_dead_command_is_stopped_and_no_other_process(tmp_path):
    storage = tmp_path / "mongo"
    store = MongoProcess(storage, tmp_path / "mongo.log")
    store._pid_file.write_text("not a pid")
    store._stop_stale()  # nothing to stop
    bystander = python(SLEEPER, "crawltasks.local.embedded", str(tmp_path / "other"))
    stale = python(SLEEPER, "crawltasks.local.embedded", str(storage))
    try:
        store._pid_file.write_text(str(bystander.pid))
        store._stop_stale()
        assert bystander.poll() is None, "a store of another data directory is not ours to stop"
        store._pid_file.write_text(str(stale.pid))
        store._stop_stale()  # SIGTERM, then waits until it is gone (reaping it: it is our child here)
        with pytest.raises(ProcessLookupError):
            os.kill(stale.pid, 0)
    finally:
        for proc in (bystander, stale):
            proc.kill()
            proc.wait()


def test_the_private_redis_of_a_dead_command_is_stopped(tmp_path):
    embedded._stop_private_redis(tmp_path)  # no registry: nothing to do
    server = python(SLEEPER, "redis-server")
    other = python(SLEEPER)
    try:
        pidfile = tmp_path / "redis.pid"
        (tmp_path / "redis.rdb.settings").write_text(json.dumps({"pidfile": str(pidfile)}))
        pidfile.write_text(str(other.pid))
        embedded._stop_private_redis(tmp_path)
        assert other.poll() is None, "only a redis-server is stopped"
        pidfile.write_text(str(server.pid))
        embedded._stop_private_redis(tmp_path)
        assert server.wait(5) == -signal.SIGTERM
    finally:
        for proc in (server, other):
            proc.kill()
            proc.wait()


def test_a_store_that_cannot_start_is_said_clearly(tmp_path):
    store = MongoProcess(tmp_path / "mongo", tmp_path / "mongo.log", port=free_port())
    store.proc = subprocess.Popen(["true"])
    store.proc.wait()
    with pytest.raises(EmbeddedError, match=f"the MongoDB-protocol store exited; see {tmp_path}/mongo.log"):
        store.wait_ready(5)
    store.proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(EmbeddedError, match="did not start within 0 s"):
            store.wait_ready(0.05)
        store._uri_file.write_text(store.uri)
        assert store.wait_ready(1) == f"mongodb://127.0.0.1:{store.port}/"
    finally:
        store.terminate()
        store.stop()
    assert store.proc is None


# --- forked processes -----------------------------------------------------------------------------------------
def test_a_forked_process_reports_its_exit_and_can_be_stopped_or_killed():
    done = ForkedProcess(lambda: 5)
    assert done.wait(5) == 5 and done.poll() == 5
    paused = ForkedProcess(lambda: signal.pause() or 0)
    assert os.getpgid(paused.pid) == paused.pid  # a process group of its own
    with pytest.raises(subprocess.TimeoutExpired):
        paused.wait(0.05)
    paused.terminate()
    assert paused.wait(5) == -signal.SIGTERM
    paused.send_signal(signal.SIGTERM)  # gone already: nothing happens
    group = ForkedProcess(lambda: signal.pause() or 0)
    group.kill()
    assert group.wait(5) == -signal.SIGKILL


def test_a_report_goes_to_the_command_and_the_log(capsys):
    reader, writer = os.pipe()
    try:
        _reporter(writer)("local worker 0 died")
        assert os.read(reader, 100) == b"local worker 0 died\n"
        assert capsys.readouterr().err.endswith("] zygote: local worker 0 died\n")
        os.close(reader)
        _reporter(writer)("nobody reads")  # a command gone does not stop the zygote
    finally:
        os.close(writer)


# --- which services a command opens ------------------------------------------------------------------------------
@pytest.fixture
def configured(monkeypatch) -> list[Settings]:
    """What the command points the process at: recorded, on runtimes of their own (closed after)."""
    seen: list[Settings] = []

    def configure(settings: Settings) -> runtime.Runtime:
        seen.append(settings)
        return runtime.Runtime(settings)

    monkeypatch.setattr(runtime, "configure", configure)
    return seen


def test_configured_services_are_probed_first(monkeypatch, settings, configured):
    monkeypatch.setenv(ENV_BROKER, f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv(ENV_REDIS, settings.redis_url)
    monkeypatch.setenv(ENV_MONGO, settings.mongo_url)
    with pytest.raises(ServiceDown, match="the broker at redis://127.0.0.1:.* is unreachable"), \
            services.open_services(None):
        pass
    monkeypatch.setenv(ENV_BROKER, settings.redis_url)
    with services.open_services(None) as (opened, started):
        assert (opened.redis_url, opened.mongo_url, started) == (settings.redis_url, settings.mongo_url, None)
    assert configured == [opened]


def test_a_second_terminal_attaches_to_a_running_crawl_and_a_second_crawl_is_refused(monkeypatch, tmp_path,
                                                                                     configured):
    monkeypatch.delenv(ENV_BROKER, raising=False)
    running = Settings(broker_url="redis://127.0.0.1:1/0", redis_url="redis://127.0.0.1:1/0",
                       mongo_url="mongodb://127.0.0.1:1/")
    with held(tmp_path):
        (tmp_path / embedded.ADDRESSES).write_text(json.dumps(running.to_env()))
        with pytest.raises(EmbeddedError, match=f"a crawl runs on {tmp_path} already"), \
                services.open_services(str(tmp_path)):
            pass
        with services.open_services(str(tmp_path), attach=True) as (opened, started):
            assert (opened.redis_url, started) == (running.redis_url, None)
    assert [s.redis_url for s in configured] == [running.redis_url]


def test_a_private_broker_is_quiet():
    app = Celery("quiet-test", broker_transport_options={"visibility_timeout": 60})
    services.quiet_private_broker(app)
    assert not app.conf.worker_send_task_events and not app.conf.task_send_sent_event
    assert app.conf.broker_transport_options == {"visibility_timeout": 60, "polling_interval": 0.2}
