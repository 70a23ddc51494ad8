"""URL rules, all pure: canonical form, fingerprints, hosts and domain scope."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

FOLLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class InvalidURL(ValueError):
    """A URL that cannot be fetched; the message says why."""


@lru_cache(maxsize=32_768)  # the same links recur on many pages of a site
def canonicalize(url: str) -> str:
    """Canonical form used for identity: lowercase scheme and host, no default port, no fragment,
    sorted query, normalised percent-encoding. Raises InvalidURL for what cannot be fetched."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidURL(f"unparsable URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in FOLLOWED_SCHEMES:
        raise InvalidURL(f"unsupported scheme {scheme!r}" if scheme else "relative URL without a base")
    if not parts.hostname:
        raise InvalidURL("URL has no host")
    if any(c.isspace() for c in parts.netloc):
        raise InvalidURL("whitespace in host")
    try:
        canonical = canonicalize_url(url, keep_fragments=False)
        parts = urlsplit(canonical)
        port = parts.port
    except (ValueError, UnicodeError) as exc:
        raise InvalidURL(str(exc) or "invalid URL") from None
    netloc = parts.netloc.lower()
    if port is not None and DEFAULT_PORTS.get(parts.scheme) == port:
        netloc = netloc.rsplit(":", 1)[0]
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def fingerprint(canonical_url: str, method: str = "GET", meta: dict[str, Any] | None = None,
                meta_fields: Iterable[str] = ()) -> str:
    """SHA-1 (hex) of method, canonical URL and the chosen metadata fields."""
    key = f"{method.upper()} {canonical_url}"
    chosen = {name: meta[name] for name in meta_fields if meta and name in meta}
    if chosen:
        key += " " + json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def raw_fingerprint(url: str, method: str = "GET") -> str:
    """Fingerprint for a URL that has no canonical form (it will fail, but once)."""
    return hashlib.sha1(f"{method.upper()} !{url.strip()}".encode()).hexdigest()


@lru_cache(maxsize=32_768)
def host_of(url: str) -> str:
    """Lowercase host name of a URL ('' if it has none)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


@lru_cache(maxsize=32_768)
def host_key(url: str) -> str:
    """Host and port: the unit that politeness limits apply to."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        return ""
    return f"{(parts.hostname or '').lower()}:{port}"


def in_domains(host: str, domains: Iterable[str]) -> bool:
    """True when host is one of the domains or a subdomain of one."""
    host = host.lower().rstrip(".")
    for domain in domains:
        domain = domain.lower().lstrip(".").rstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def join(base: str, href: str) -> str | None:
    """Absolute URL of href against base, or None when it cannot be resolved."""
    href = href.strip()
    if href.startswith("/") and not href.startswith("//") and "/." not in href and "\\" not in href:
        origin = _origin(base)  # the common case, a root-relative link, without urljoin's full parse
        if origin:
            return origin + href
    try:
        return urljoin(base, href)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _origin(base: str) -> str | None:
    """scheme://netloc of an absolute http(s) URL, else None."""
    try:
        parts = urlsplit(base)
    except ValueError:
        return None
    if parts.scheme.lower() not in FOLLOWED_SCHEMES or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"
