"""Sitemaps as seeds: urlset and sitemap-index XML, gzip included. Pure functions."""

from __future__ import annotations

import gzip
import zlib

from lxml import etree

MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # the sitemap protocol's own limit, uncompressed


def looks_like_sitemap(url: str, content_type: str | None, body: bytes) -> bool:
    """XML whose root is <urlset> or <sitemapindex>, possibly gzipped."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if not (ctype.endswith("xml") or ctype in ("application/gzip", "application/x-gzip")
            or url.lower().split("?", 1)[0].endswith((".xml", ".xml.gz"))):
        return False
    head = _plain(body)[:2048].lower()
    return b"<urlset" in head or b"<sitemapindex" in head


def _plain(body: bytes) -> bytes:
    if body[:2] == b"\x1f\x8b":
        try:
            return gzip.GzipFile(fileobj=_Capped(body)).read(MAX_SITEMAP_BYTES)
        except (OSError, EOFError, zlib.error):
            return b""
    return body


class _Capped:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk


def parse_sitemap(body: bytes) -> tuple[str, list[str]]:
    """("index", sitemap URLs) or ("urlset", page URLs); ("", []) for anything else."""
    data = _plain(body)
    try:
        root = etree.fromstring(data, parser=etree.XMLParser(recover=True, resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return "", []
    if root is None:
        return "", []
    kind = etree.QName(root).localname.lower()
    locs = [(el.text or "").strip() for el in root.iter("{*}loc")]
    locs = [loc for loc in locs if loc]
    if kind == "sitemapindex":
        return "index", locs
    if kind == "urlset":
        return "urlset", locs
    return "", []
