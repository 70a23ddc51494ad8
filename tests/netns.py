"""Hosts with addresses of their own for tests: Linux network namespaces joined by a bridge.

``Network(["services", "w1", ...])`` makes one namespace per host, each with ``lo`` up and one veth
link (``eth0``) on a private subnet, all plugged into a bridge that lives in a namespace of its own
(the "switch"). The test process itself is one more host on that bridge (its address is
``Network.observer``), so it can watch the services without entering a namespace. Deleting the
namespaces removes every link with them, so nothing outlives the test; namespaces left by a killed
run (same prefix, dead pid) are removed first.

A host's link can be cut (``cut``: the switch port goes down, its packets are dropped as on a pulled
cable) and restored. ``popen`` runs a command on a host (``ip netns exec``); ``entered`` switches the
calling thread into a host's namespace, so that a socket made there (a listening test server, in
this process) belongs to that host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PREFIX = "ctnet"  # every namespace and root-side link these tests make starts with it
SUBNET = "10.231"  # 10.231.K.0/24, K picked per session among those the machine does not use
CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _kill_inside(ns: str) -> None:
    """SIGKILL every process still running in namespace ``ns`` (ours, from a run that died)."""
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _stale(pid: int) -> bool:
    """Left by a test process that is gone, or by an earlier process with our pid (a process makes
    one Network at a time, before which nothing of its own exists)."""
    return pid == os.getpid() or not _alive(pid)


def remove_stale() -> None:
    """Namespaces and links of earlier runs whose test process is gone (killed before its cleanup)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}(\d+)-.+", name)
        if m and _stale(int(m.group(1))):
            _kill_inside(name)
            _ip("netns", "delete", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(rf"\d+: ({PREFIX}(\d+)r)[@:]", line)
        if m and _stale(int(m.group(2))):
            _ip("link", "delete", m.group(1), check=False)


def _free_subnet() -> str | None:
    """A 10.231.K prefix that no address or route of this machine uses (K from our pid, then on)."""
    used = _ip("-4", "-o", "addr", check=False).stdout + _ip("-4", "route", "show", "table", "all", check=False).stdout
    start = os.getpid() % 200 + 20
    for k in [*range(start, 250), *range(20, start)]:
        prefix = f"{SUBNET}.{k}"
        if f"{prefix}." not in used:
            return prefix
    return None


def skip_unless_possible() -> None:
    """Skip the calling test, saying why, when namespaces cannot be made here."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need iproute2 (the ip command)")


class Network:
    """Hosts in namespaces on one bridge; a context manager that always removes them.

    ``address[host]`` is each host's IPv4 address, ``observer`` the test process's own.
    """

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = list(hosts)
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.root_link = f"{self.tag}r"
        self.address: dict[str, str] = {}
        self.observer = ""
        self._made: list[str] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def ns(self, host: str) -> str:
        """The namespace name of a host."""
        return f"{self.tag}-{host}"

    def port(self, host: str) -> str:
        """The host's port on the switch (a link in the switch namespace)."""
        return f"p{self.hosts.index(host)}"

    # --- making and removing ------------------------------------------------------------------
    def __enter__(self) -> Network:
        skip_unless_possible()
        remove_stale()
        prefix = _free_subnet()
        if prefix is None:
            pytest.skip(f"every {SUBNET}.K.0/24 subnet is in use on this machine")
        try:
            self._add_namespace(self.switch)
        except subprocess.CalledProcessError as exc:
            self.close()
            pytest.skip(f"cannot make a network namespace: {exc.stderr.strip() or exc}")
        try:
            self._build(prefix)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self, prefix: str) -> None:
        sw = ["-n", self.switch]
        _ip(*sw, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0")
        _ip(*sw, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns, addr = self.ns(host), f"{prefix}.{i + 2}"
            self._add_namespace(ns)
            _ip(*sw, "link", "add", self.port(host), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip(*sw, "link", "set", self.port(host), "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self.address[host] = addr
        # the test process's own leg: its end in the root namespace, the other end on the bridge
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", "proot", "netns", self.switch)
        _ip(*sw, "link", "set", "proot", "master", "br0", "up")
        self.observer = f"{prefix}.1"
        _ip("addr", "add", f"{self.observer}/24", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")

    def close(self) -> None:
        """Stop what runs on the hosts, then delete the namespaces (their links go with them)."""
        for proc in reversed(self._procs):  # the last started first: workers before the services they use
            stop_process(proc, timeout=5)
        for name in reversed(self._made):
            _kill_inside(name)
            _ip("netns", "delete", name, check=False)
        self._made.clear()
        _ip("link", "delete", self.root_link, check=False)  # gone with the switch already, normally

    # --- using ---------------------------------------------------------------------------------
    def command(self, host: str, cmd: list[str]) -> list[str]:
        """``cmd`` run on ``host``."""
        return ["ip", "netns", "exec", self.ns(host), *cmd]

    def popen(self, host: str, cmd: list[str], log: Path | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``cmd`` on ``host`` in a session of its own, its output in ``log``; it is stopped when
        the network closes."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child keeps its own copy
        try:
            proc = subprocess.Popen(self.command(host, cmd), start_new_session=True, stdout=out,
                                    stderr=subprocess.STDOUT, **kwargs)
        finally:
            if log:
                out.close()
        self._procs.append(proc)
        return proc

    def cut(self, host: str) -> None:
        """Pull the host's cable: its switch port goes down, nothing reaches it or leaves it."""
        _ip("-n", self.switch, "link", "set", self.port(host), "down")

    def restore(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self.port(host), "up")

    @contextlib.contextmanager
    def entered(self, host: str) -> Iterator[None]:
        """The calling thread is on ``host`` meanwhile: sockets it makes belong to that host (and
        keep doing so afterwards). Other threads stay where they are."""
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(NETNS_DIR / self.ns(host), os.O_RDONLY)
        try:
            if libc.setns(there, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.ns(host)}")
            try:
                yield
            finally:
                if libc.setns(home, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back home")
        finally:
            os.close(home)
            os.close(there)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM the process's session, then SIGKILL it if it has not exited within ``timeout``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
