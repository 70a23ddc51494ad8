"""Real parts for the tests: the machine's Redis (a database of our own), SecantusDB through pymongo
(or CRAWLTASKS_TEST_MONGO_URL), real Celery workers, and fixture sites on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pymongo
import pytest
import redis

from crawltasks import runtime
from crawltasks.backends.redis.registry import RedisState
from crawltasks.local.embedded import MongoProcess
from crawltasks.local.workers import InProcessWorker
from crawltasks.settings import Settings
from crawltasks.worker.app import app, use_broker

from .sites import SiteServer, basic_site, serve

REDIS_HOST = os.environ.get("CRAWLTASKS_TEST_REDIS", "redis://127.0.0.1:6379")
SESSION_KEY = "crawltasks-test-session"  # which test session owns a database (its pid)
FREE_DBS = range(13, 3, -1)  # databases a test session may take, when CRAWLTASKS_TEST_REDIS_DB names none

# The real-stack tests, marked ``stack`` (``pytest -m "not stack"`` is the quick loop: stages, policies,
# twins and the contract suites): every test with a real Celery worker, and the files whose tests start
# the command, kill or cut off processes, restart services, or drive a broker or a browser. It is the one
# marker (pyproject.toml's --strict-markers refuses others); a stack test elsewhere says @pytest.mark.stack.
STACK_FIXTURES = {"worker"}
STACK_FILES = {
    "test_bench.py", "test_bench_broad.py", "test_broker_restart.py", "test_cli.py", "test_cli_more.py",
    "test_crash.py", "test_docker.py", "test_fleet.py", "test_flower.py", "test_interrupt.py",
    "test_netns_fleet.py", "test_outage.py", "test_poison.py", "test_rabbitmq.py", "test_readme.py",
    "test_services_down.py", "test_web.py", "test_web_controls.py", "test_web_docker.py",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--screenshots", metavar="DIR", default=None,
                     help="where tests/test_web.py saves the dashboard's screenshots (docs: the README's own); "
                          "default: the test's temporary directory, so a test run leaves the checkout as it was")


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The folder of tests/test_web.py's screenshots: ``--screenshots DIR``, else a temporary one."""
    given = request.config.getoption("--screenshots")
    return Path(given) if given else tmp_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in STACK_FILES or STACK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)


def _owner_alive(client: redis.Redis) -> bool:
    owner = client.get(SESSION_KEY)
    if owner is None:
        return False
    try:
        os.kill(int(owner), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        pass
    return True


def _take_db(named: bool = True) -> int:
    """A database of our own: the one CRAWLTASKS_TEST_REDIS_DB names (unless not ``named``), else the
    first that no other live test session holds, so that two sessions on one Redis never flush each
    other's crawls."""
    given = os.environ.get("CRAWLTASKS_TEST_REDIS_DB")
    if named and given:
        return int(given)
    for db in FREE_DBS:
        if given and db == int(given):
            continue
        client = redis.Redis.from_url(f"{REDIS_HOST}/{db}")
        try:
            if not _owner_alive(client):
                client.flushdb()
                if client.set(SESSION_KEY, os.getpid(), nx=True):
                    return db
        finally:
            client.close()
    raise RuntimeError(f"every test database of {REDIS_HOST} is held by a live test session")


def _flush(url: str, keep_owner: bool) -> None:
    client = redis.Redis.from_url(url)
    client.flushdb()
    if keep_owner:
        client.set(SESSION_KEY, os.getpid())
    client.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = f"{REDIS_HOST}/{_take_db()}"
    _flush(url, keep_owner=True)
    yield url
    _flush(url, keep_owner=False)


@pytest.fixture
def state(redis_url: str) -> Iterator[RedisState]:
    """The crawl state on the test Redis, closed after the test."""
    s = RedisState.from_url(redis_url)
    yield s
    s.r.close()


@pytest.fixture(scope="session")
def mongo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A MongoDB wire-protocol server: the one named by CRAWLTASKS_TEST_MONGO_URL, else SecantusDB."""
    given = os.environ.get("CRAWLTASKS_TEST_MONGO_URL")
    if given:
        yield given
        return
    root = tmp_path_factory.mktemp("mongo")
    server = MongoProcess(root / "data", root / "log")
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def settings(redis_url: str, mongo_url: str) -> Settings:
    db = f"crawltasks_test_{os.getpid()}"
    yield Settings(broker_url=redis_url, redis_url=redis_url, mongo_url=mongo_url, mongo_db=db,
                   spider_modules=["tests.spiders"])
    client = pymongo.MongoClient(mongo_url)
    client.drop_database(db)
    client.close()


@pytest.fixture(scope="session")
def quiet_settings(settings: Settings) -> Settings:
    """The test services with a second Redis database of this session's, where no other test leaves
    crawls running: for crawls driven in this process on the real stores (``sites.on_stores``), whose
    dispatcher rounds take every running crawl of their Redis."""
    url = f"{REDIS_HOST}/{_take_db(named=False)}"
    _flush(url, keep_owner=True)
    yield replace(settings, broker_url=url, redis_url=url)
    _flush(url, keep_owner=False)


@pytest.fixture(scope="session")
def rt(settings: Settings) -> runtime.Runtime:
    """This process's runtime (workers in this process share it), pointed at the test services."""
    use_broker(settings.broker_url)
    current = runtime.configure(settings)
    current.storage.ensure_indexes()
    return current


@pytest.fixture(scope="module")
def worker(rt: runtime.Runtime) -> InProcessWorker:
    """A real Celery worker (thread pool) consuming every crawltasks queue from the test Redis."""
    w = InProcessWorker(app, concurrency=4, loglevel="WARNING")
    w.start()
    yield w
    w.stop()


@pytest.fixture
def crawl_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def basic_server() -> SiteServer:
    server = serve(basic_site())
    yield server
    server.stop()


@pytest.fixture
def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture
def keep_root_logging() -> Iterator[None]:
    """Put the root logger back after a test that runs the command in-process (``main`` sets up
    logging to the stderr of its moment)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:], root.level = handlers, level
