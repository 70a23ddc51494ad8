"""URL rules, all pure: canonical form, fingerprints, hosts and domain scope."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from .errors import FetchError

FOLLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class InvalidURL(FetchError, ValueError):
    """A URL that cannot be fetched; the message says why."""


# A URL already in canonical form: lowercase http(s) and host, no query, fragment, dot segment or
# character that needs quoting. Most links of most sites look like this; they skip w3lib.
_PLAIN = re.compile(r"(https?)://([a-z0-9]+(?:[.-][a-z0-9]+)*)(?::([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*)?")


@lru_cache(maxsize=32_768)  # the same links recur on many pages of a site
def canonicalize(url: str) -> str:
    """Canonical form used for identity: lowercase scheme and host, no default port, no fragment,
    sorted query, normalised percent-encoding. Raises InvalidURL for what cannot be fetched."""
    url = url.strip()
    return _plain_canonical(url) or _full_canonical(url)


def _plain_canonical(url: str) -> str | None:
    """The canonical form of a URL that needs no rewriting but the default port; else None."""
    m = _PLAIN.fullmatch(url)
    if m is None or "/." in url:
        return None
    scheme, host, port, path = m.groups()
    if port is not None and (int(port) > 65535 or DEFAULT_PORTS[scheme] == int(port)):
        return None
    return f"{scheme}://{host}{':' + port if port else ''}{path or '/'}"


def _full_canonical(url: str) -> str:
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
    userinfo, at, netloc = parts.netloc.rpartition("@")  # user and password are case-sensitive: kept exact
    netloc = netloc.lower()
    if port is not None and DEFAULT_PORTS.get(parts.scheme) == port:
        netloc = netloc.rsplit(":", 1)[0]
    return urlunsplit((parts.scheme, userinfo + at + netloc, parts.path or "/", parts.query, ""))


MASK = "***"
# scheme://userinfo@ anywhere in a text; the userinfo runs to the authority's last "@" (an unencoded
# "@" in a password must not leave its tail on show).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)((?:[^/?#@\s'\"<>]*@)+)")
# Header, cookie or option names whose values are secrets: Authorization, Proxy-Authorization,
# Cookie, X-Api-Key, X-Auth-Token, session ids, ...
SENSITIVE_NAME = re.compile(r"(?i)auth|cookie|token|secret|passw|key|session|credential")


def redact(value: Any) -> Any:
    """``value`` safe to show or store: the one place that decides what a secret looks like.

    In a string, every URL's password becomes ``***`` and its user name stays
    (``http://Alice:***@host/``); a user name without a password is masked whole (``http://***@host/``),
    since that is how tokens travel. In a mapping (headers, cookies, options, log fields), the value
    of every sensitive name (``SENSITIVE_NAME``) is masked; under a sensitive name holding a mapping
    (``cookies``), names stay and values go. Lists and tuples are redacted item by item; anything
    else is returned as it is. Only requests themselves (the queued request) keep credentials.
    """
    if isinstance(value, str):
        return _USERINFO.sub(_mask_userinfo, value) if "@" in value else value
    if isinstance(value, dict):
        return {k: _mask_value(v) if isinstance(k, str) and SENSITIVE_NAME.search(k) else redact(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def _mask_userinfo(m: re.Match[str]) -> str:
    user, colon, _ = m.group(2)[:-1].partition(":")
    return f"{m.group(1)}{user}:{MASK}@" if colon else f"{m.group(1)}{MASK}@"


def _mask_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: MASK for k in value}
    return MASK if value else value


def without_userinfo(url: str) -> str:
    """url without ``user:password@``: what a Referer may carry (RFC 9110 forbids userinfo there)."""
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def restore_userinfo(url: str, sources: Iterable[str]) -> str:
    """A redacted url with its credentials put back from the first source URL (a seed) of the same
    scheme, host and port whose redacted userinfo is the url's; url as it is when there is none
    (``retry-failed`` sends stored URLs, which are redacted, again)."""
    if MASK not in url:
        return url
    try:
        parts = urlsplit(url)
        masked, _, hostport = parts.netloc.rpartition("@")
        origin = (parts.scheme.lower(), host_key(url))
        for source in sources:
            userinfo = urlsplit(source).netloc.rpartition("@")[0]
            if (userinfo and (urlsplit(source).scheme.lower(), host_key(source)) == origin
                    and urlsplit(redact(source)).netloc.rpartition("@")[0] == masked):
                return urlunsplit(parts._replace(netloc=f"{userinfo}@{hostport}"))
    except ValueError:
        pass
    return url


def check_seeds(urls: Iterable[str]) -> list[str]:
    """Canonical seed URLs; raises ValueError naming the first bad one."""
    out = []
    for url in urls:
        try:
            out.append(canonicalize(url))
        except InvalidURL as exc:
            raise ValueError(f"invalid seed URL {redact(url)!r}: {redact(str(exc))}") from None
    return out


def fingerprint(canonical_url: str, method: str = "GET", meta: dict[str, Any] | None = None,
                meta_fields: Iterable[str] = (), body: bytes = b"", headers: dict[str, str] | None = None,
                header_fields: Iterable[str] = ()) -> str:
    """SHA-1 (hex) of method, canonical URL, the body and the chosen metadata fields and headers:
    two POSTs of different forms to one URL are two requests."""
    if not meta_fields and not body and not header_fields:
        return _plain_fingerprint(method, canonical_url)
    key = f"{method.upper()} {canonical_url}"
    chosen = {name: meta[name] for name in meta_fields if meta and name in meta}
    if chosen:
        key += " " + json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=str)
    if body:
        key += " body:" + hashlib.sha1(body).hexdigest()
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    picked = {name.lower(): lowered[name.lower()] for name in header_fields if name.lower() in lowered}
    if picked:
        key += " headers:" + json.dumps(picked, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


@lru_cache(maxsize=32_768)  # links recur: most fingerprints are of URLs this process has seen
def _plain_fingerprint(method: str, canonical_url: str) -> str:
    return hashlib.sha1(f"{method.upper()} {canonical_url}".encode()).hexdigest()


def raw_fingerprint(url: str, method: str = "GET") -> str:
    """Fingerprint for a URL that has no canonical form (it will fail, but once)."""
    return hashlib.sha1(f"{method.upper()} !{url.strip()}".encode()).hexdigest()


@lru_cache(maxsize=32_768)
def host_of(url: str) -> str:
    """Lowercase host name of a URL ('' if it has none)."""
    plain = _PLAIN.fullmatch(url)  # most URLs here are canonical: no full parse for them
    if plain is not None:
        return plain.group(2)
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


@lru_cache(maxsize=32_768)
def host_key(url: str) -> str:
    """Host and port: the unit that politeness limits apply to."""
    plain = _PLAIN.fullmatch(url)
    if plain is not None and (plain.group(3) is None or int(plain.group(3)) <= 65535):
        return f"{plain.group(2)}:{plain.group(3) or DEFAULT_PORTS[plain.group(1)]}"
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        return ""
    return f"{(parts.hostname or '').lower()}:{port}"


def in_domains(host: str, domains: Iterable[str] | frozenset[str]) -> bool:
    """True when host is one of the domains or a subdomain of one (``domains`` may be a
    ``domain_set``: a crawl of many seed hosts checks each link against all of them)."""
    names = domains if isinstance(domains, frozenset) else domain_set(tuple(domains))
    host = host.lower().rstrip(".")
    while host:
        if host in names:
            return True
        host = host.partition(".")[2]
    return False


@lru_cache(maxsize=64)
def domain_set(domains: tuple[str, ...]) -> frozenset[str]:
    """The domains as ``in_domains`` looks them up: lowercase, no dots at either end."""
    return frozenset(d.lower().strip(".") for d in domains if d.strip("."))


# A root-relative reference whose path and query urljoin leaves as they are ("/docs/a?page=2").
_SIMPLE_ROOT = re.compile(r"/[A-Za-z0-9._~/%-]*(?:\?[A-Za-z0-9._~/=&%+,:@-]+)?")
# A relative reference to the base's directory or one of its parents: no scheme, query,
# fragment, backslash or dot segment but leading ones ("page.html", "./next", "../../docs/intro").
_SIMPLE_RELATIVE = re.compile(r"(?:\./)*((?:\.\./)*)([A-Za-z0-9_~-][A-Za-z0-9._~/-]*)")


def join(base: str, href: str) -> str | None:
    """Absolute URL of href against base, or None when it cannot be resolved. The common shapes
    of links (root-relative, or relative without dot segments) skip urljoin's full parse."""
    href = href.strip()
    if href.startswith("/"):
        if not href.startswith("//") and "/." not in href and _SIMPLE_ROOT.fullmatch(href):
            origin = _origin(base)
            if origin:
                return origin + href
    else:
        m = _SIMPLE_RELATIVE.fullmatch(href)
        if m is not None and "/." not in m.group(2) and "//" not in href:  # urljoin folds "//"
            directory = _directory(base)
            if directory:
                return _up(directory, len(m.group(1)) // 3) + m.group(2)
    try:
        return urljoin(base, href)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _directory(base: str) -> str | None:
    """scheme://netloc/dir/ of an absolute http(s) URL (what a plain relative link appends to)."""
    origin = _origin(base)
    if origin is None:
        return None
    path = urlsplit(base).path
    if "//" in path or "/." in path:  # urljoin would rewrite these segments
        return None
    return origin + path[:path.rfind("/") + 1] if path else origin + "/"


def _up(directory: str, levels: int) -> str:
    """scheme://netloc/dir/ raised by ``levels`` "../" (never above the root, as urljoin does)."""
    if not levels:
        return directory
    start = directory.index("/", directory.index("://") + 3)
    kept = directory[start:].strip("/").split("/")[:-levels] if directory[start:] != "/" else []
    return directory[:start] + "/" + "".join(segment + "/" for segment in kept)


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
