"""Serving the generated site on 127.0.0.1: nginx when installed, else a Python fallback.

nginx (Debian's ``nginx`` package) runs as a non-daemon child with its own config in a temp
directory, on a free port, with an access log the harness reads to count each crawler's requests.
It needs no root: no user switch, pid/temp paths in the temp directory.

The fallback is ``http.server.ThreadingHTTPServer`` with HTTP/1.1 keep-alive in a child process.
It is several times slower than nginx and single-core, so with it the server, not the crawler,
can be the bottleneck: the table says which server was used.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from crawltasks.local.embedded import free_port, stop_process

NGINX_CONF = """\
{user}worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
    types {{ text/html html; text/css css; }}
    default_type application/octet-stream;
    log_format bench '$status $body_bytes_sent "$http_user_agent" $request_uri';
    access_log {tmp}/access.log bench;
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
    open_file_cache max=2000 inactive=60s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root};
        autoindex off;
    }}
}}
"""


def wait_port(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


class StaticServer:
    """A static server for ``root`` on 127.0.0.1. Use as a context manager; ``kind`` says which."""

    def __init__(self, root: Path, workdir: Path, prefer: str = "nginx") -> None:
        self.root = Path(root).resolve()
        self.workdir = Path(workdir)
        self.port = free_port()
        self.kind = "nginx" if prefer == "nginx" and nginx_binary() else "python"
        self.proc: subprocess.Popen | None = None
        self.access_log = self.workdir / "access.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StaticServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.kind == "nginx":
            conf = self.workdir / "nginx.conf"
            # As root, nginx would switch its worker to "nobody", who may not read a private temp dir.
            user = "user root;\n" if os.geteuid() == 0 else ""
            conf.write_text(NGINX_CONF.format(user=user, tmp=self.workdir, port=self.port, root=self.root))
            cmd = [nginx_binary() or "nginx", "-c", str(conf), "-p", str(self.workdir),
                   "-e", str(self.workdir / "error.log")]
        else:
            cmd = [sys.executable, "-m", "bench.serve", str(self.root), str(self.port), str(self.access_log)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=(self.workdir / "server.err").open("wb"),
                                     cwd=str(Path(__file__).resolve().parent.parent))
        wait_port(self.port, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None:  # nginx finishes its requests on SIGQUIT
            stop_process(self.proc, 10, signal.SIGQUIT if self.kind == "nginx" else signal.SIGTERM)
        self.proc = None

    def log_mark(self) -> int:
        """Current end of the access log; pass it to ``requests_since`` after a crawl."""
        return self.access_log.stat().st_size if self.access_log.exists() else 0

    def requests_since(self, mark: int) -> dict[str, int]:
        """Requests logged after ``mark``: total, 200s, and other statuses."""
        if self.kind == "nginx":
            time.sleep(0.2)  # nginx writes its log line after the response; let the last ones land
        counts = {"requests": 0, "ok": 0, "other": 0}
        if not self.access_log.exists():
            return counts
        with self.access_log.open("rb") as f:
            f.seek(mark)
            for line in f:
                counts["requests"] += 1
                counts["ok" if line.startswith(b"200 ") else "other"] += 1
        return counts


def _serve_python(root: str, port: int, log_path: str) -> None:
    """The fallback server (child process): threaded, HTTP/1.1 keep-alive, logs like the nginx config."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    lock = threading.Lock()
    log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - open for the server's lifetime

    class Handler(SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            ua = self.headers.get("User-Agent", "-") if self.headers else "-"
            line = f'{int(code) if str(code).isdigit() else code} {size} "{ua}" {self.path}\n'.encode()
            with lock:
                log.write(line)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    httpd = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=root))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    httpd.serve_forever()


if __name__ == "__main__":
    _serve_python(sys.argv[1], int(sys.argv[2]), sys.argv[3])
