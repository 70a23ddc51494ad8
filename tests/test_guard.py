"""The SSRF guard: pure decisions with a stub resolver, then fetch_one proven to refuse before any
connection is attempted (socket connects are recorded; only loopback ever sees a packet)."""

from __future__ import annotations

import ipaddress
import socket
from types import SimpleNamespace

import pytest

from crawltasks.http.fetch import fetch_one
from crawltasks.http.guard import Allowance, Refused, ResolutionFailed, check_url, private_seed_hosts
from crawltasks.models import Request
from crawltasks.settings import CrawlOptions

from .sites import page, redirect, serve

FAKE_DNS = {
    "internal.example": ["10.0.0.7"],
    "metadata.example": ["169.254.169.254"],
    "mixed.example": ["93.184.216.34", "192.168.0.10"],
    "public.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "v6ula.example": ["fd12:3456::1"],
    "localhost": ["127.0.0.1", "::1"],
}


def fake_resolver(host: str, port: int) -> list[str]:
    if host not in FAKE_DNS:
        raise ResolutionFailed(f"cannot resolve {host!r}")
    return FAKE_DNS[host]


STRICT = Allowance()


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/", "http://172.16.5.4:8080/", "http://192.168.1.1/",
    "http://127.0.0.1:6379/", "http://127.8.9.10/", "http://0.0.0.0/", "http://100.64.0.1/", "http://224.0.0.1/",
    "http://255.255.255.255/", "http://[::1]/", "http://[::]/", "http://[fe80::1]/", "http://[fd00::1]/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:a9fe:a9fe]/", "http://[2002:7f00:1::]/", "http://[64:ff9b::a00:1]/",
    "http://[fd00:ec2::254]/", "http://internal.example/", "http://metadata.example/", "http://mixed.example/",
    "http://v6ula.example/", "http://198.18.0.1/", "http://192.0.2.1/",
])
def test_non_public_addresses_are_refused(url):
    with pytest.raises(Refused):
        check_url(url, STRICT, fake_resolver)


def test_public_addresses_pass():
    assert check_url("http://public.example/", STRICT, fake_resolver) == FAKE_DNS["public.example"]
    assert check_url("https://93.184.216.34/x", STRICT, fake_resolver) == ["93.184.216.34"]


def test_the_metadata_address_is_named():
    with pytest.raises(Refused, match="metadata"):
        check_url("http://169.254.169.254/", STRICT, fake_resolver)


def test_allowances():
    own = Allowance(private_hosts=frozenset({"127.0.0.1", "internal.example:8080"}))
    assert check_url("http://127.0.0.1:5000/", own, fake_resolver) == []
    assert check_url("http://internal.example:8080/", own, fake_resolver) == []
    for url in ("http://internal.example/", "http://localhost/", "http://127.0.0.2/", "http://169.254.169.254/"):
        with pytest.raises(Refused):
            check_url(url, own, fake_resolver)
    assert check_url("http://10.0.0.1/", Allowance(allow_private=True), fake_resolver) == []


def test_unresolvable_hosts_are_not_guessed():
    with pytest.raises(ResolutionFailed):
        check_url("http://nowhere.example/", STRICT, fake_resolver)


def test_allowance_read_from_options_defensively():
    assert Allowance.of(CrawlOptions(private_hosts=["127.0.0.1"])).private_hosts == {"127.0.0.1"}
    assert Allowance.of(CrawlOptions(allow_private=True)).allow_private
    old = SimpleNamespace(allowed_domains=["Seed.Example."])  # options saved before the guard existed
    assert Allowance.of(old) == Allowance(False, frozenset({"seed.example"}))
    assert Allowance.of(SimpleNamespace()) == Allowance()


def test_private_seed_hosts():
    """The seeds' origins, not their hosts: other ports of a seed's machine stay refused."""
    seeds = ["http://127.0.0.1:8000/", "http://localhost/", "http://93.184.216.34/", "http://[::1]:81/"]
    assert private_seed_hosts(seeds) == ["http://127.0.0.1:8000", "http://[::1]:81", "http://localhost:80"]
    own = Allowance.of(CrawlOptions(private_hosts=private_seed_hosts(seeds)))
    assert check_url("http://127.0.0.1:8000/x", own, fake_resolver) == []
    for url in ("http://127.0.0.1:8001/", "https://127.0.0.1:8000/", "http://localhost:6379/", "http://[::1]:82/"):
        with pytest.raises(Refused):
            check_url(url, own, fake_resolver)


@pytest.fixture
def connects(monkeypatch):
    """Every socket connect of this process, recorded; anything but loopback is refused on the spot."""
    seen: list[tuple] = []
    real = socket.socket.connect

    def connect(self, address):
        seen.append(address)
        if not ipaddress.ip_address(address[0]).is_loopback:
            raise AssertionError(f"attempted a connection to {address}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    real_resolve = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in FAKE_DNS:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in FAKE_DNS[host] if ":" not in a]
        return real_resolve(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return seen


@pytest.fixture
def site():
    server = serve({
        "/": page("Home"),
        "/to-metadata": redirect("http://169.254.169.254/latest/meta-data/"),
        "/to-ten": redirect("http://10.0.0.1/admin", 302),
        "/to-other-loopback": redirect("http://127.0.0.2:8080/", 307),
        "/to-internal-name": redirect("http://internal.example/"),
        "/to-home": redirect("/", 308),
    })
    yield server
    server.stop()


OWN_HOST = CrawlOptions(timeout=5, private_hosts=["127.0.0.1"])


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://192.168.0.1:8080/x",
    "http://internal.example/", "http://metadata.example/", "http://[fd00::1]/", "http://127.0.0.2/",
])
def test_fetch_refuses_links_before_connecting(connects, url):
    fetched, body = fetch_one(Request(url=url), OWN_HOST)
    assert fetched.error == "ssrf_blocked" and body is None, fetched
    assert connects == [], "a connection was attempted"


def test_fetch_refuses_redirect_hops_before_connecting(connects, site):
    for path in ("/to-metadata", "/to-ten", "/to-other-loopback", "/to-internal-name"):
        connects.clear()
        fetched, _ = fetch_one(Request(url=site.url(path)), OWN_HOST)
        assert fetched.error == "ssrf_blocked", (path, fetched)
        assert fetched.message.startswith("redirect 1 to ")
        assert {a[0] for a in connects} <= {"127.0.0.1"}, connects
    assert site.counts.get("/to-home") is None


def test_a_crawl_reaches_its_own_private_host_only(connects, site):
    fetched, body = fetch_one(Request(url=site.url("/to-home")), OWN_HOST)
    assert fetched.ok and fetched.url == site.url("/") and b"Home" in body
    strict = CrawlOptions(timeout=5, private_hosts=[])
    fetched, _ = fetch_one(Request(url=site.url("/")), strict)
    assert fetched.error == "ssrf_blocked"
    everything = CrawlOptions(timeout=5, allow_private=True)
    assert fetch_one(Request(url=site.url("/")), everything)[0].ok
    assert {a[0] for a in connects} == {"127.0.0.1"}


def test_resolutions_are_remembered_for_a_while_but_failures_are_not():
    from crawltasks.http.guard import CachedResolver

    calls = []

    def counting(host, port):
        calls.append(host)
        return fake_resolver(host, port)

    resolve = CachedResolver(counting, ttl=0.2)
    assert resolve("public.example", 80) == resolve("public.example", 80) == FAKE_DNS["public.example"]
    assert calls == ["public.example"]
    for _ in range(2):
        with pytest.raises(ResolutionFailed):
            resolve("nowhere.example", 80)
    assert calls.count("nowhere.example") == 2
    import time

    time.sleep(0.25)
    resolve("public.example", 80)
    assert calls.count("public.example") == 2
    # The guard's decision is the same through the cache: a private answer is refused every time.
    for _ in range(2):
        with pytest.raises(Refused):
            check_url("http://internal.example/", STRICT, resolve)


def test_the_connection_goes_to_the_address_the_guard_checked(monkeypatch, connects, site):
    """DNS rebinding: a name answers the guard with one address and a second lookup with another. The
    connection must go to the checked one. Loopback stands in for both: 127.0.0.1 counts as public
    here, 127.0.0.2 stays private, and only 127.0.0.1 has the server."""
    import crawltasks.http.guard as guard

    lookups = []
    real_resolve = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.example":
            return real_resolve(host, port, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "127.0.0.2"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    private = guard.non_public_reason
    monkeypatch.setattr(guard, "non_public_reason", lambda addr: None if str(addr) == "127.0.0.1" else private(addr))
    fetched, body = fetch_one(Request(url=f"http://rebind.example:{site.port}/"), CrawlOptions(timeout=5))
    assert fetched.status == 200 and body, fetched
    assert connects == [("127.0.0.1", site.port)]
    assert site.hits[-1].headers["host"] == f"rebind.example:{site.port}"  # the name is still the one asked for
