"""Flower never listens beyond loopback without authentication: the rules (``flowerguard``) and the
check Celery's ``import_modules`` signal runs inside ``celery flower``, in this process. Flower itself
started as a command is tests/test_flower.py's."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import click
import pytest
import tornado.options

from crawltasks.monitor import flowerguard
from crawltasks.monitor.flowerguard import apply_broker_api, check_flower, is_loopback, management_api, refusal


def opts(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"address": "", "unix_socket": "", "basic_auth": None, "auth": "", "broker_api": None,
                              **kw})


def test_refusal_rules():
    unset = opts()
    assert refusal(unset) is None and unset.address == "127.0.0.1"
    for address in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"):
        assert refusal(opts(address=address)) is None, address
    for address in ("0.0.0.0", "::", "10.1.2.3", "192.168.0.5"):
        assert refusal(opts(address=address)).startswith(f"flower: refusing to listen on {address} "), address
        assert refusal(opts(address=address, basic_auth=[""])) is not None  # an empty --basic-auth is no auth
        assert refusal(opts(address=address, basic_auth=["u:p"])) is None
        assert refusal(opts(address=address, auth=".*@example\\.com")) is None
    assert refusal(opts(address="0.0.0.0", unix_socket="/tmp/flower.sock")) is None


def test_flower_gets_rabbitmqs_management_api_for_its_broker_tab():
    assert management_api("amqp://crawl:s3cr%40t@rabbitmq:5672//") == "http://crawl:s3cr%40t@rabbitmq:15672/api/"
    assert management_api("amqps://rabbitmq//") == "https://guest:guest@rabbitmq:15672/api/"
    assert management_api("redis://127.0.0.1:6379/0") is None and management_api("") is None
    given = SimpleNamespace(broker_api="http://u:p@elsewhere:15672/api/")
    apply_broker_api(given, "amqp://guest:guest@127.0.0.1:5672//")
    assert given.broker_api == "http://u:p@elsewhere:15672/api/", "--broker-api wins"
    unset = SimpleNamespace(broker_api=None)
    apply_broker_api(unset, "amqp://guest:guest@127.0.0.1:5672//")
    assert unset.broker_api == "http://guest:guest@127.0.0.1:15672/api/"


def test_a_name_is_loopback_only_when_every_address_it_resolves_to_is(monkeypatch):
    answers = {"inside.test": ["127.0.0.1", "::1"], "split.test": ["127.0.0.1", "10.0.0.7"],
               "scoped.test": ["fe80::1%eth0"]}

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, 0)) for addr in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert is_loopback("inside.test") and is_loopback(" LOCALHOST ")
    assert not is_loopback("split.test") and not is_loopback("scoped.test") and not is_loopback("nowhere.test")


def in_flower(command: str = "flower") -> click.Context:
    """A click context as ``celery ... flower`` has one while its options are parsed."""
    return click.Context(click.Command(command), parent=click.Context(click.Group("celery")))


def test_the_check_runs_only_inside_flower_and_refuses_an_open_address(monkeypatch, capsys):
    options = opts(address="0.0.0.0")
    monkeypatch.setattr(tornado.options, "options", options)
    check_flower()  # a worker importing its modules: not Flower, nothing checked
    assert not flowerguard._running_flower()
    with in_flower("worker"):
        check_flower()
    with in_flower(), pytest.raises(SystemExit) as stopped:
        check_flower()
    assert stopped.value.code == 1
    assert capsys.readouterr().err.startswith("flower: refusing to listen on 0.0.0.0 without authentication")


def test_the_check_lets_a_loopback_flower_start_with_rabbitmqs_api(monkeypatch):
    options = opts()
    monkeypatch.setattr(tornado.options, "options", options)
    app = SimpleNamespace(conf=SimpleNamespace(broker_url="amqp://u:p@rabbit:5672//"))
    with in_flower():
        check_flower(sender=app)
        assert (options.address, options.broker_api) == ("127.0.0.1", "http://u:p@rabbit:15672/api/")
