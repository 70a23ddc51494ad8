"""HTML handling for the parse stage, with lxml: charset, title, links, text. Pure functions.

Links are never extracted with BeautifulSoup (about 30 times slower on large pages); the soup is
built only when user code asks for ``response.soup``.
"""

from __future__ import annotations

import re
from functools import lru_cache

import lxml.html
from lxml import etree
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom

from ..urls import join

HTML_TYPES = ("text/html", "application/xhtml+xml")
SKIPPED_SCHEMES = ("javascript:", "mailto:", "data:", "tel:", "ftp:", "file:", "about:", "blob:", "sms:")
_WS = re.compile(r"\s+")
# libxml2 drops everything after </html> (and often after </body>); browsers keep it in the body.
_CLOSING_ROOT = re.compile(rb"</\s*(?:html|body)\s*>", re.IGNORECASE)


def is_html(content_type: str | None, body: bytes) -> bool:
    """True for HTML responses; a missing Content-Type is sniffed from the first bytes."""
    if content_type:
        return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def detect_encoding(content_type: str | None, body: bytes) -> str:
    """Encoding from BOM, Content-Type charset or <meta>, falling back to UTF-8: the order of
    w3lib's ``html_to_unicode``, without decoding anything (lxml decodes the document once)."""
    head = body[:4096]
    bom_encoding, _ = read_bom(head)
    if bom_encoding is not None:
        return bom_encoding
    encoding = http_content_type_encoding(content_type or "") or html_body_declared_encoding(head)
    if encoding is None:
        return "utf8"  # w3lib's default, spelt as it spells it
    return encoding + "-be" if encoding in ("utf-16", "utf-32") else encoding


@lru_cache(maxsize=32)
def _parser(encoding: str) -> lxml.html.HTMLParser:
    try:
        return lxml.html.HTMLParser(encoding=encoding, recover=True, remove_comments=True)
    except LookupError:
        return lxml.html.HTMLParser(encoding="utf-8", recover=True, remove_comments=True)


def parse_tree(body: bytes, encoding: str) -> etree._Element | None:
    """An lxml tree of the document, or None when nothing parseable is there."""
    if not body.strip():
        return None
    body = _CLOSING_ROOT.sub(b"", body)  # the end tags are implied; content after them is kept
    try:
        return lxml.html.document_fromstring(body, parser=_parser(encoding))
    except (etree.ParserError, ValueError, LookupError):
        try:
            return lxml.html.document_fromstring(body.decode(encoding, "replace").encode(), parser=_parser("utf-8"))
        except (etree.ParserError, ValueError):
            return None


def title_of(tree: etree._Element | None) -> str | None:
    if tree is None:
        return None
    node = tree.find("head/title")  # the first in document order when there; else search it all
    if node is None:
        node = tree.find(".//title")
    if node is None:
        return None
    text = _WS.sub(" ", "".join(node.itertext())).strip()
    return text or None


def base_url(tree: etree._Element | None, url: str) -> str:
    """The URL links resolve against: <base href> if present, else the page's final URL."""
    if tree is not None:
        for base in tree.iter("base"):
            href = (base.get("href") or "").strip()
            if href:
                return join(url, href) or url
    return url


def extract_links(tree: etree._Element | None, url: str, base: str | None = None) -> list[str]:
    """Absolute URLs of <a href> links, in document order, without duplicates or unfollowable schemes."""
    if tree is None:
        return []
    base = base or base_url(tree, url)
    seen: set[str] = set()
    hrefs_met: set[str] = set()  # a page repeats its hrefs (menus, sidebars): each is resolved once
    links: list[str] = []
    for anchor in tree.iter("a"):
        href = anchor.get("href")
        if not href or href in hrefs_met:
            continue
        hrefs_met.add(href)
        href = href.strip()
        if not href or href[0] == "#" or (":" in href and href.lower().replace(" ", "").startswith(SKIPPED_SCHEMES)):
            continue
        absolute = join(base, href.split("#", 1)[0] if "#" in href else href)  # a fragment changes nothing
        if absolute is None:  # unresolvable (e.g. "http://[::1"): passed on so it fails once, on record
            absolute = href
        absolute = absolute.split("#", 1)[0]
        if absolute not in seen:
            seen.add(absolute)
            links.append(absolute)
    return links


def text_of(tree: etree._Element | None) -> str:
    """Visible text, whitespace folded (scripts and styles left out)."""
    if tree is None:
        return ""
    body = tree.find("body")
    node = body if body is not None else tree
    chunks: list[str] = []
    for el in node.iter():
        if isinstance(el.tag, str) and el.tag not in ("script", "style", "noscript") and el.text:
            chunks.append(el.text)
        if el is not node and el.tail:
            chunks.append(el.tail)
    return _WS.sub(" ", " ".join(chunks)).strip()
