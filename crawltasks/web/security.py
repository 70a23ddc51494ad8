"""Who may see the dashboard and press its buttons: the rules Flower follows (``flowerguard``).

* It listens on loopback unless basic auth is configured (``--basic-auth user:password`` or
  CRAWLTASKS_WEB_AUTH, several as ``u1:p1,u2:p2``); a non-loopback address without it is refused
  before anything binds (``refusal``).
* With auth, every page, the JSON and the controls need it; ``/metrics`` and ``/healthz`` stay open,
  as Flower's do, so Prometheus and health checks need no password (they show counts and crawl ids,
  never a URL).
* Without auth (loopback only), the machine's users are trusted: the controls work, as
  ``crawltasks pause`` would for them. Requests must then name a loopback host in ``Host``, so a web
  page whose name an attacker re-points at 127.0.0.1 (DNS rebinding) cannot drive it.
* Controls are POSTs that carry Tornado's XSRF token, checked after authentication; pages may not be
  framed (clickjacking) and send no Referer to the crawled sites they link to.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tornado import escape, web

from ..monitor.flowerguard import is_loopback

ENV_AUTH = "CRAWLTASKS_WEB_AUTH"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
}
T = TypeVar("T")


def parse_users(text: str | None) -> dict[str, str]:
    """``user:password[,user2:password2]`` -> {user: password}; a malformed entry is a ValueError."""
    users = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        user, sep, password = entry.strip().partition(":")
        if not sep or not user or not password:
            raise ValueError("basic auth must be user:password (several: user1:pw1,user2:pw2)")
        users[user] = password
    return users


def users_from(option: str | None) -> dict[str, str]:
    """The command line's ``--basic-auth``, else CRAWLTASKS_WEB_AUTH."""
    return parse_users(option if option is not None else os.environ.get(ENV_AUTH))


def refusal(host: str, users: dict[str, str]) -> str | None:
    """Why the dashboard must not listen on ``host`` (None: it may)."""
    if users or is_loopback(host):
        return None
    return (f"web: refusing to listen on {host} without authentication; set --basic-auth user:password "
            f"or {ENV_AUTH}=user:password, or listen on 127.0.0.1")


def check_basic(header: str | None, users: dict[str, str]) -> str | None:
    """The user an ``Authorization: Basic`` header proves, or None (compared in constant time)."""
    if not header or not header.startswith("Basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    expected = users.get(user)
    if expected is not None and hmac.compare_digest(password.encode(), expected.encode()):
        return user
    return None


class BaseHandler(web.RequestHandler):
    """Host check and authentication before anything else; XSRF checked after authentication."""

    public = False  # /metrics and /healthz: open like Flower's

    @property
    def rt(self) -> Any:
        return self.settings["runtime"]

    @property
    def users(self) -> dict[str, str]:
        return self.settings["users"]

    def set_default_headers(self) -> None:
        for name, value in HEADERS.items():
            self.set_header(name, value)

    def check_xsrf_cookie(self) -> None:
        """Tornado checks before ``prepare``: an unauthenticated POST should get 401, not 403, so the
        check runs in ``prepare``, after the user is known."""

    def prepare(self) -> None:
        if not self.users and not self.host_is_loopback():
            raise web.HTTPError(403, "this dashboard answers only to a loopback host name")
        if self.users and not self.public:
            user = check_basic(self.request.headers.get("Authorization"), self.users)
            if user is None:
                raise web.HTTPError(401)
            self.current_user = user
        if self.request.method not in ("GET", "HEAD", "OPTIONS"):
            super().check_xsrf_cookie()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A short page (no traceback); a 401 asks for the password (set here: an error clears headers)."""
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Basic realm="crawltasks"')
        reason = self._reason if status_code != 500 else "the dashboard could not read the crawl state"
        self.finish(f"<!doctype html><title>{status_code}</title><p>{status_code}: {escape.xhtml_escape(reason)}"
                    '</p><p><a href="/">crawls</a></p>')

    def host_is_loopback(self) -> bool:
        host = self.request.host.lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOOPBACK_HOSTS or name == self.settings.get("bound_host", "")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking read (Redis, Mongo) on the app's threads, not on the event loop."""
        loop_run: Callable[..., Awaitable[T]] = self.settings["run_blocking"]
        return await loop_run(fn, *args)
