"""The probes that name a service that is down in one line within moments, on the test Redis and
MongoDB and on ports where nothing listens; and what a command says of a crawl whose state was lost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crawltasks.monitor import health
from crawltasks.monitor.health import Problem, ServiceDown, StateLost
from crawltasks.settings import ENV_BROKER, ENV_MONGO, ENV_REDIS, Settings

from .helpers import free_port


@pytest.fixture(autouse=True)
def short_probes(monkeypatch):
    monkeypatch.setattr(health, "PROBE_TIMEOUT", 0.2)


def closed(scheme: str, auth: str = "") -> str:
    return f"{scheme}://{auth}127.0.0.1:{free_port()}/"


def test_services_that_answer_have_no_problem(settings):
    assert health.probe_redis(settings.redis_url) is None
    assert health.probe_broker(settings.redis_url) is None
    assert health.probe_mongo(settings.mongo_url) is None
    assert health.check_services(settings) == []


def test_a_service_that_is_down_is_named_without_its_password():
    redis_down = health.probe_redis(closed("redis", ":hunter2@") + "0")
    assert (redis_down.service, redis_down.variable) == ("Redis", ENV_REDIS)
    assert "hunter2" not in redis_down.line() and "Connection refused" in redis_down.reason
    broker_down = health.probe_broker(closed("redis") + "1")
    assert (broker_down.service, broker_down.variable) == ("the broker", ENV_BROKER)
    mongo_down = health.probe_mongo(closed("mongodb", "u:pw@"))
    assert (mongo_down.service, mongo_down.variable) == ("MongoDB", ENV_MONGO)
    assert "pw@" not in mongo_down.address and len(mongo_down.reason) <= 160
    assert mongo_down.line().startswith(f"MongoDB at {mongo_down.address} is unreachable (")


def test_every_service_is_probed_side_by_side(settings):
    down = Settings(broker_url=closed("redis") + "0", redis_url=closed("redis") + "0", mongo_url=settings.mongo_url)
    assert [p.service for p in health.check_services(down)] == ["Redis", "the broker"]


def test_start_crawl_with_nothing_configured_says_so_at_once(settings):
    nothing = SimpleNamespace(settings=Settings(redis_url=closed("redis") + "0", mongo_url=settings.mongo_url))
    with pytest.raises(ServiceDown, match="no services are configured: crawltasks.run"):
        health.check_unconfigured(nothing)
    answering = SimpleNamespace(settings=Settings(redis_url=settings.redis_url, mongo_url=settings.mongo_url))
    health.check_unconfigured(answering)
    answering.settings.redis_url = closed("redis") + "0"
    health.check_unconfigured(answering)  # checked once per runtime: not probed again
    health.check_unconfigured(SimpleNamespace(settings=Settings(broker_url="redis://configured/0")))


def test_the_lines_a_command_prints():
    problem = Problem("Redis", "redis://h:6379/0", "refused", ENV_REDIS)
    assert str(ServiceDown(problem)) == (f"Redis at redis://h:6379/0 is unreachable (refused); check that it runs "
                                         f"and that {ENV_REDIS} names it")
    lost = StateLost("c-1")
    assert lost.crawl_id == "c-1" and "continue it with 'crawltasks crawl --crawl-id c-1'" in str(lost)
    assert "'crawltasks --data-dir d crawl --crawl-id c-1'" in str(StateLost("c-1", "crawltasks --data-dir d crawl "
                                                                             "--crawl-id c-1"))


def test_the_outage_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("CRAWLTASKS_OUTAGE_LIMIT", raising=False)
    assert health.outage_limit() == 300.0
    monkeypatch.setenv("CRAWLTASKS_OUTAGE_LIMIT", "2.5")
    assert health.outage_limit() == 2.5
