"""Flower never listens beyond loopback without authentication, however it is started.

A Flower reachable from the network can revoke tasks and shut workers down. ``flowerconfig.py`` is
read only from the current directory and loses to ``--address``, so the check lives here, with the
Celery app: ``celery -A crawltasks flower`` imports it wherever it runs, and Flower sends Celery's
``import_modules`` signal once all its options (environment, config file, command line) are parsed,
just before it binds its socket. Without an address Flower would listen on every interface: here it
means 127.0.0.1. A refusal is one line on stderr and exit status 1, not a traceback.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from celery import signals

LOCAL_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback(address: str) -> bool:
    """True when every address ``address`` names is a loopback one (a name is resolved)."""
    host = address.strip().strip("[]")
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]).is_loopback for i in infos)


def refusal(options: Any) -> str | None:
    """Why Flower with these options must not start (None: it may). An unset address becomes 127.0.0.1."""
    if getattr(options, "unix_socket", ""):
        return None  # a file on this machine, not a network address
    if not getattr(options, "address", ""):
        options.address = "127.0.0.1"
    if is_loopback(options.address):
        return None
    if any(getattr(options, "basic_auth", None) or ()) or getattr(options, "auth", ""):
        return None
    return (f"flower: refusing to listen on {options.address} without authentication; "
            "set FLOWER_BASIC_AUTH=user:password or --basic-auth=user:password (or --auth/FLOWER_AUTH for OAuth), "
            "or listen on 127.0.0.1")


def management_api(broker_url: str) -> str | None:
    """RabbitMQ's management API for Flower's Broker tab (queue lengths): the broker's host on port
    15672 with the broker's user, as the rabbitmq:3-management image serves it. None for Redis."""
    parts = urlsplit(broker_url or "")
    if parts.scheme not in ("amqp", "amqps", "pyamqp") or not parts.hostname:
        return None
    user, password = (quote(unquote(part or "guest"), safe="") for part in (parts.username, parts.password))
    scheme = "https" if parts.scheme == "amqps" else "http"
    return f"{scheme}://{user}:{password}@{parts.hostname}:15672/api/"


def apply_broker_api(options: Any, broker_url: str) -> None:
    """Give Flower the management API of a RabbitMQ broker unless --broker-api/FLOWER_BROKER_API did."""
    if not getattr(options, "broker_api", None):
        options.broker_api = management_api(broker_url)


def _running_flower() -> bool:
    """True inside the ``celery ... flower`` command (the signal also fires in workers)."""
    try:
        import click
    except ImportError:
        return False
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.command is not None and ctx.command.name == "flower":
            return True
        ctx = ctx.parent
    return False


@signals.import_modules.connect
def check_flower(sender: Any = None, **_: object) -> None:
    """Stop a Flower about to listen on a non-loopback address without authentication; point its
    Broker tab at RabbitMQ's management API."""
    if not _running_flower():
        return
    from tornado.options import options  # Flower's parsed options

    reason = refusal(options)
    if reason:
        print(reason, file=sys.stderr, flush=True)
        raise SystemExit(1)
    if sender is not None:
        apply_broker_api(options, str(sender.conf.broker_url or ""))
