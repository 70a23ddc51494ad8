"""Serving the broad-crawl lab: every host on its own loopback address, each answer delayed L seconds.

Preferred: nginx with Debian's ``libnginx-mod-http-echo``. One ``listen 127.1.x.y:PORT;`` line per
host, the root chosen by ``$server_addr``, and ``echo_sleep L`` (a timer, no thread, no CPU) before an
internal redirect to the static handler. A non-daemon child with its own config, as in bench/serve.py.

Fallback (no nginx or no echo module, or ``prefer="python"``): one asyncio process listening on every
address, ``asyncio.sleep(L)`` per request, HTTP/1.1 keep-alive, files read per request.

Both write the same access log, one line per request, which the politeness analysis reads:
``server_addr end_epoch request_seconds client_port connection_id status bytes uri``
(nginx: ``$msec $request_time``, both to the millisecond and from the same cached clock, so
``end - request_time`` is the request's start exactly).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psutil

from bench.labsite import LabSpec
from bench.serve import nginx_binary
from crawltasks.local.embedded import stop_process

LOG_FORMAT = "$server_addr $msec $request_time $remote_port $connection $status $body_bytes_sent $request_uri"
ECHO_MODULE_CONFS = ("/usr/share/nginx/modules-available/mod-http-echo.conf",
                     "/etc/nginx/modules-enabled/50-mod-http-echo.conf")
ECHO_MODULE_SO = "/usr/lib/nginx/modules/ngx_http_echo_module.so"

NGINX_CONF = """\
{user}load_module {module};
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    types {{ text/html html; text/plain txt; }}
    default_type application/octet-stream;
    log_format lab '{log_format}';
    access_log {tmp}/access.log lab buffer=64k flush=1s;
    log_not_found off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000;
    server {{
{listen}
        root {root}/$server_addr;
        location = / {{ echo_sleep {latency}; echo_exec @index; }}
        location / {{ echo_sleep {latency}; echo_exec @static; }}
        location @index {{ try_files /index.html =404; }}
        location @static {{ }}
    }}
}}
"""


def echo_module() -> str | None:
    """The echo module's shared object, from Debian's load_module line (or its usual place)."""
    for conf in ECHO_MODULE_CONFS:
        try:
            text = Path(conf).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.strip().startswith("load_module"):
                path = line.split(None, 1)[1].strip().rstrip(";")
                path = path if path.startswith("/") else f"/usr/share/nginx/{path}"
                if os.path.exists(path):
                    return os.path.realpath(path)
    return ECHO_MODULE_SO if os.path.exists(ECHO_MODULE_SO) else None


def wait_listening(addresses: list[str], port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Until the first and last address accept connections (all are bound at once)."""
    deadline = time.monotonic() + timeout
    for addr in dict.fromkeys((addresses[0], addresses[-1])):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"lab server exited with status {proc.returncode}")
            try:
                with socket.create_connection((addr, port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nothing listens on {addr}:{port} after {timeout}s") from None
                time.sleep(0.05)


class LabServer:
    """Every lab host with delay ``latency``; a fresh process (and log) per use. ``kind`` says which."""

    def __init__(self, lab: Path, spec: LabSpec, latency: float, workdir: Path, prefer: str = "nginx") -> None:
        self.lab, self.spec, self.latency = Path(lab).resolve(), spec, latency
        self.workdir = Path(workdir).resolve()
        self.module = echo_module() if prefer == "nginx" and nginx_binary() else None
        self.kind = "nginx" if self.module else "python"
        self.access_log = self.workdir / "access.log"
        self.proc: subprocess.Popen | None = None
        self.cpu_seconds = 0.0  # of the server's processes, read when stopped

    def __enter__(self) -> LabServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.access_log.unlink(missing_ok=True)
        addresses = self.spec.addresses
        if self.kind == "nginx":
            conf = self.workdir / "nginx.conf"
            listen = "\n".join(f"        listen {a}:{self.spec.port} backlog=1024;" for a in addresses)
            user = "user root;\n" if os.geteuid() == 0 else ""  # else nginx's worker would be "nobody"
            conf.write_text(NGINX_CONF.format(user=user, module=self.module, tmp=self.workdir, listen=listen,
                                              root=self.lab, latency=f"{self.latency:g}", log_format=LOG_FORMAT))
            cmd = [nginx_binary() or "nginx", "-c", str(conf), "-p", str(self.workdir),
                   "-e", str(self.workdir / "error.log")]
        else:
            (self.workdir / "addresses.txt").write_text("\n".join(addresses) + "\n")
            cmd = [sys.executable, "-m", "bench.labserve", str(self.lab), str(self.spec.port),
                   f"{self.latency:g}", str(self.access_log), str(self.workdir / "addresses.txt")]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=(self.workdir / "server.err").open("wb"),
                                     cwd=str(Path(__file__).resolve().parent.parent))
        try:
            wait_listening(addresses, self.spec.port, self.proc)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (nginx finishes its requests and flushes its log on SIGQUIT); keep its CPU."""
        if self.proc is None:
            return
        try:
            procs = [psutil.Process(self.proc.pid)]
            procs += procs[0].children(recursive=True)
            self.cpu_seconds = sum(sum(p.cpu_times()[:2]) for p in procs)
        except psutil.Error:
            pass
        stop_process(self.proc, 10, signal.SIGQUIT if self.kind == "nginx" else signal.SIGTERM)
        self.proc = None


# --- the fallback server (child process) ----------------------------------------------------------

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _resolve(host_root: Path, target: str) -> tuple[int, bytes, str]:
    """(status, body, content type) for a request target under one host's directory."""
    path = unquote(urlsplit(target).path) or "/"
    rel = "index.html" if path == "/" else path.lstrip("/")
    if ".." in Path(rel).parts:
        return 404, b"not found\n", "text/plain"
    try:
        body = (host_root / rel).read_bytes()
    except OSError:
        return 404, b"not found\n", "text/plain"
    return 200, body, "text/plain" if rel.endswith(".txt") else "text/html"


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bool] | None:
    """(method, target, keep-alive) of the next request on a connection; None when it closes."""
    line = await reader.readline()
    if not line.strip():
        return None
    keep = True
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"connection" and value.strip().lower() == b"close":
            keep = False
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        return "", "-", False
    return parts[0], parts[1], keep and parts[2] != "HTTP/1.0"


async def _serve(root: Path, port: int, latency: float, log_path: str, addresses: list[str]) -> None:
    log = open(log_path, "a", buffering=1 << 16)  # noqa: SIM115 - open for the server's lifetime
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        conn = connections
        addr, client_port = writer.get_extra_info("sockname")[0], writer.get_extra_info("peername")[1]
        try:
            while (req := await _read_request(reader)) is not None:
                start = time.time()
                method, target, keep = req
                await asyncio.sleep(latency)
                status, body, ctype = _resolve(root / addr, target) if method in ("GET", "HEAD") else \
                    (405 if method else 400, b"", "text/plain")
                head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                        f"\r\nConnection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode()
                writer.write(head + (body if method != "HEAD" else b""))
                await writer.drain()
                end = time.time()
                sent = len(body) if method != "HEAD" else 0
                log.write(f"{addr} {end:.6f} {end - start:.6f} {client_port} {conn} {status} {sent} {target}\n")
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    servers = [await asyncio.start_server(handle, addr, port, reuse_address=True, backlog=1024)
               for addr in addresses]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for s in servers:
        s.close()
    log.close()


if __name__ == "__main__":
    _addresses = Path(sys.argv[5]).read_text().split()
    asyncio.run(_serve(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], _addresses))
