"""The SSRF guard: a crawl must not be steered by the pages it reads into the network it runs in.

A link or a redirect whose host resolves to a loopback, private, link-local, shared, reserved,
multicast or unspecified address (the cloud metadata endpoint 169.254.169.254 among them) is refused,
unless the crawl allows it: ``allow_private`` allows every such address, and ``private_hosts`` names
what a crawl may reach although it is private. By default that is each private seed's own origin
(``http://127.0.0.1:8000``: scheme, host and port), not the seed's whole machine: a page must not steer
the crawl to the other services on it (a link, a ``<base>`` or a redirect to another port). An entry
``"host:port"`` widens it to that port whatever the scheme, a bare ``"host"`` to every port of the host.

The check runs on the resolved addresses (``socket.getaddrinfo``), so a public-looking name pointing
inside, or an IP written in decimal, octal or IPv6-mapped form, is caught as well. It is a pure
decision given a resolver; ``fetch.fetch_one`` calls it before connecting and on every redirect hop,
and then connects to the very addresses it checked (a second lookup could answer otherwise: DNS
rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import FetchError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

METADATA_ADDRESSES = frozenset({
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
})
# Ranges that ``is_global`` calls global but which carry an embedded IPv4 address or are not routable.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


class Refused(FetchError):
    """The URL may not be fetched by this crawl; the message says why."""


class ResolutionFailed(FetchError):
    """The host name could not be resolved; the message says why."""


@dataclass(frozen=True)
class Allowance:
    """What a crawl may reach although it is not public."""

    allow_private: bool = False
    private_hosts: frozenset[str] = frozenset()  # "scheme://host:port", "host:port" or "host" (any port)

    @classmethod
    def of(cls, options: Any, cache: dict[int, tuple[object, Allowance]] | None = None) -> Allowance:
        """The allowance of a crawl's options, read defensively (older saved options lack the fields).

        ``private_hosts`` unset (None) falls back to the crawl's exact ``allowed_domains`` host names,
        which default to the seeds' hosts: a crawl of a site on a private address keeps working.
        ``cache`` (the process's, ``ProcessCaches.allowances``) keeps it per options object: a
        crawl's every fetch would otherwise build it again.
        """
        if cache is None:
            return cls._build(options)
        cached = cache.get(id(options))
        if cached is not None and cached[0] is options:
            return cached[1]
        allowance = cls._build(options)
        if len(cache) > 64:
            cache.clear()
        cache[id(options)] = (options, allowance)  # the options are kept, so the id is not reused
        return allowance

    @classmethod
    def _build(cls, options: object) -> Allowance:
        allow = bool(getattr(options, "allow_private", False))
        hosts = getattr(options, "private_hosts", None)
        if hosts is None:
            hosts = getattr(options, "allowed_domains", None) or ()
        return cls(allow, frozenset(_norm_entry(h) for h in hosts if h and h.strip()))

    def allows_host(self, host: str, port: int | None, scheme: str = "") -> bool:
        """True when the crawl allows this origin although it is private: its exact origin, its
        host and port, or its host (every port) is listed. ``port`` None means the scheme's default."""
        host = _host_token(host)
        if host in self.private_hosts:
            return True
        scheme = scheme.lower()
        port = port or _DEFAULT_PORTS.get(scheme)
        return port is not None and (f"{host}:{port}" in self.private_hosts
                                     or f"{scheme}://{host}:{port}" in self.private_hosts)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _norm_host(host: str) -> str:
    return host.strip().lower().rstrip(".").strip("[]")


def _host_token(host: str) -> str:
    """A host as entries spell it: lowercase, no trailing dot, an IPv6 address in brackets."""
    host = _norm_host(host)
    return f"[{host}]" if ":" in host else host


def _norm_entry(entry: str) -> str:
    """A ``private_hosts`` entry in the form ``allows_host`` looks up: ``scheme://host:port``,
    ``host:port`` or ``host`` (a bare IPv6 address is a host)."""
    entry = entry.strip()
    if "://" in entry:
        try:
            parts = urlsplit(entry)
            scheme, host, port = parts.scheme.lower(), _host_token(parts.hostname or ""), parts.port
        except ValueError:  # a bad port: an entry that matches nothing, not a failing fetch
            return entry.lower()
        port = port or _DEFAULT_PORTS.get(scheme)
        return f"{scheme}://{host}:{port}" if port else host
    if entry.startswith("["):  # "[v6]" or "[v6]:port"
        host, _, rest = entry[1:].partition("]")
        return f"{_host_token(host)}{rest}" if rest.startswith(":") and rest[1:].isdigit() else _host_token(host)
    host, colon, port = entry.rpartition(":")
    if colon and port.isdigit() and ":" not in host:
        return f"{_host_token(host)}:{int(port)}"
    return _host_token(entry)


def getaddrinfo_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for host (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise ResolutionFailed(f"cannot resolve {host!r}: {exc}") from None
    return [info[4][0] for info in infos]


class CachedResolver:
    """A resolver that remembers answers for ``ttl`` seconds (failures are not remembered).

    Without it every request of a crawl costs a DNS lookup before its connection is even looked at
    (the system resolver caches nothing), while requests reuses kept-alive connections. The check
    stays as strong: an address is checked whenever it is used, only not looked up again each time.
    """

    def __init__(self, resolve: Resolver = getaddrinfo_resolver, ttl: float = 60.0, size: int = 4096) -> None:
        self.resolve, self.ttl, self.size = resolve, ttl, size
        self._answers: dict[tuple[str, int], tuple[float, list[str]]] = {}

    def __call__(self, host: str, port: int) -> list[str]:
        key, now = (host, port), time.monotonic()
        known = self._answers.get(key)
        if known is not None and known[0] > now:
            return known[1]
        addresses = self.resolve(host, port)
        if len(self._answers) >= self.size:
            self._answers.clear()
        self._answers[key] = (now + self.ttl, addresses)
        return addresses


system_resolver = CachedResolver()


def non_public_reason(addr: Address) -> str | None:
    """Why an address is not a public unicast one, or None when it is."""
    if addr in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            return "a scoped IPv6 address"
        embedded = addr.ipv4_mapped or addr.sixtofour or (addr.teredo[1] if addr.teredo else None)
        if embedded is None and (addr in _NAT64 or addr in _NAT64_LOCAL):
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            inner = non_public_reason(embedded)
            return f"an IPv6 address embedding {embedded} ({inner})" if inner else None
    checks = (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_unspecified", "the unspecified address"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    )
    for attr, reason in checks:
        if getattr(addr, attr):
            return reason
    if not addr.is_global:
        return "a non-global address"
    return None


def check_url(url: str, allowance: Allowance, resolver: Resolver = system_resolver) -> list[str]:
    """Refuse (raise Refused) when url's host resolves to any non-public address the crawl does not allow.

    Every resolved address must pass, so a name with one public and one private record is refused.
    Returns the addresses checked ([] when nothing needed checking). Raises ResolutionFailed when the
    host cannot be resolved.
    """
    if allowance.allow_private:
        return []
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError as exc:
        raise Refused(f"unparsable URL: {exc}") from None
    if not host:
        raise Refused("URL has no host")
    if allowance.allows_host(host, port, parts.scheme):
        return []
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = [host] if _is_ip_literal(host) else resolver(host, port)
    if not addresses:
        raise ResolutionFailed(f"no address for {host!r}")
    for text in addresses:
        addr = ipaddress.ip_address(text.split("%", 1)[0])
        reason = non_public_reason(addr)
        if reason:
            shown = host if str(addr) == host else f"{host} ({addr})"
            raise Refused(f"{shown} is {reason}; the crawl does not allow it (allow_private / private_hosts)")
    return addresses


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def private_seed_hosts(urls: Iterable[str], resolver: Resolver = system_resolver) -> list[str]:
    """The origins (``scheme://host:port``) of seed URLs that resolve to non-public addresses: what a
    crawl allows itself. The origin, not the host: the seed's machine may run other services.

    Meant for crawl start (``private_hosts``). An unresolvable seed host is left out: it fails on its own.
    """
    origins: set[str] = set()
    for url in urls:
        try:
            check_url(url, Allowance(), resolver)
        except Refused:
            try:
                parts = urlsplit(url)
                scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
            except ValueError:
                continue
            port = port or _DEFAULT_PORTS.get(scheme)
            if host and port:
                origins.add(f"{scheme}://{_host_token(host)}:{port}")
        except (ResolutionFailed, ValueError):
            continue
    return sorted(origins)
