"""A deterministic generated web site to crawl: the same options and seed give the same bytes.

Two shapes:

* ``pages`` (default): N pages of about K KB with about L links each. Every page links to its
  children in a 4-ary tree (so all pages are reachable and the crawl is ~log4(N) levels deep), to
  its parent, and to random other pages; hrefs mix relative, root-relative and fragment forms.
* ``big``: documentation-like pages of 100-300 KB, each with a sidebar linking to every page, an
  in-page table of contents (fragment links) and cross references: hundreds of links per page.

Sites are cached on disk by their parameters, so a re-run does not regenerate 240 MB of HTML.
"""

from __future__ import annotations

import hashlib
import html
import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

FANOUT = 4  # tree children per page: keeps every page reachable within log4(N) levels
PAGE_DIR = "p"

_VOCABULARY = (
    "crawl fetch parse store queue worker broker redis mongo celery task batch request response page link "
    "title header body anchor index sitemap frontier scheduler dedupe bloom filter counter lease retry "
    "backoff politeness host delay concurrency socket buffer stream chunk encoding charset document tree "
    "element attribute node text paragraph section chapter appendix figure table reference manual guide "
    "tutorial install configure deploy monitor metric latency throughput memory process thread pool lock "
    "atomic script key value hash set list sorted stream event signal timeout deadline budget quota limit"
)
_WORDS = _VOCABULARY.split()


@dataclass(frozen=True)
class SiteSpec:
    """What to generate. ``key`` names the cached copy."""

    shape: str = "pages"  # "pages" or "big"
    pages: int = 20_000
    links: int = 20
    page_kb: float = 12.0
    seed: int = 1

    @property
    def key(self) -> str:
        raw = json.dumps(asdict(self), sort_keys=True)
        return f"{self.shape}-{self.pages}p-{hashlib.sha1(raw.encode()).hexdigest()[:10]}"

    @classmethod
    def big(cls, pages: int = 300, seed: int = 1) -> SiteSpec:
        """The documentation-like site: a few hundred pages of 100-300 KB, hundreds of links each."""
        return cls(shape="big", pages=pages, links=0, page_kb=200.0, seed=seed)


def page_path(i: int) -> str:
    return f"/{PAGE_DIR}/{i}.html"


def seed_path() -> str:
    """The crawl starts here (page 0)."""
    return page_path(0)


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choices(_WORDS, k=n_words))


def _href(rng: random.Random, j: int) -> str:
    """The same target in the forms real sites use: relative, ./relative, root-relative, with fragment."""
    form = rng.randrange(4)
    if form == 0:
        return f"{j}.html"
    if form == 1:
        return f"./{j}.html"
    if form == 2:
        return page_path(j)
    return f"{j}.html#s{rng.randrange(5)}"


def _targets(rng: random.Random, i: int, n: int, links: int) -> list[int]:
    out = [c for c in range(i * FANOUT + 1, i * FANOUT + FANOUT + 1) if c < n]
    if i:
        out.append((i - 1) // FANOUT)
    while len(out) < links and n > 1:
        out.append(rng.randrange(n))
    return out


def render_page(spec: SiteSpec, i: int) -> bytes:
    """One page of the ``pages`` shape; a pure function of (spec, i)."""
    rng = random.Random(f"{spec.seed}:{i}")
    target = int(spec.page_kb * 1024)
    hrefs = [_href(rng, j) for j in _targets(rng, i, spec.pages, spec.links)]
    head = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Page {i}: {html.escape(_text(rng, 4))}</title>"
            f"<link rel=\"stylesheet\" href=\"/style.css\"></head>\n<body>\n<h1>Page {i}</h1>\n")
    parts = [head]
    size = len(head)
    k = 0
    while k < len(hrefs) or size < target - 20:
        chunk = ["<p>", _text(rng, 40)]
        for _ in range(2):
            if k < len(hrefs):
                chunk.append(f' <a href="{hrefs[k]}">{_text(rng, 2)}</a> {_text(rng, 8)}')
                k += 1
        chunk.append("</p>\n")
        piece = "".join(chunk)
        parts.append(piece)
        size += len(piece)
    parts.append("</body></html>\n")
    return "".join(parts).encode()


def render_big_page(spec: SiteSpec, i: int) -> bytes:
    """One page of the ``big`` shape: sidebar to all pages, a TOC, sections with cross references."""
    rng = random.Random(f"big:{spec.seed}:{i}")
    target = rng.randrange(100, 290) * 1024
    sections = rng.randrange(20, 41)
    out = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>Manual {i}: {html.escape(_text(rng, 3))}</title></head>\n<body>\n<nav class=\"sidebar\"><ul>\n"]
    for j in range(spec.pages):
        out.append(f'<li><a class="ref" href="{j}.html">Chapter {j}</a></li>\n')
    out.append("</ul></nav>\n<main>\n<h1>Manual page</h1>\n<ul class=\"toc\">\n")
    for s in range(sections):
        out.append(f'<li><a href="#sec-{s}">Section {s}: {_text(rng, 3)}</a></li>\n')
    out.append("</ul>\n")
    size = sum(len(x) for x in out)
    body_budget = max(0, target - size - 40)
    per_section = body_budget // sections
    for s in range(sections):
        sec = [f'<h2 id="sec-{s}">Section {s}</h2>\n']
        written = 0
        while written < per_section:
            j = rng.randrange(spec.pages)
            para = (f"<p>{_text(rng, 60)} see <a href=\"{_href(rng, j)}\">{_text(rng, 2)}</a> "
                    f"<code>{_text(rng, 3)}</code> {_text(rng, 30)}</p>\n")
            if rng.random() < 0.15:
                para += f"<pre>{html.escape(_text(rng, 50))}</pre>\n"
            sec.append(para)
            written += len(para)
        out.extend(sec)
    out.append("</main></body></html>\n")
    return "".join(out).encode()


def generate(spec: SiteSpec, root: Path) -> Path:
    """Write the site under ``root/<spec.key>`` (reused when already complete); returns that directory."""
    site = Path(root) / spec.key
    manifest = site / "manifest.json"
    if manifest.exists():
        return site
    tmp = Path(root) / (spec.key + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / PAGE_DIR).mkdir(parents=True)
    render = render_big_page if spec.shape == "big" else render_page
    total = 0
    for i in range(spec.pages):
        body = render(spec, i)
        total += len(body)
        (tmp / PAGE_DIR / f"{i}.html").write_bytes(body)
    (tmp / "style.css").write_text("body { font-family: sans-serif }\n")
    (tmp / "manifest.json").write_text(json.dumps({**asdict(spec), "bytes": total}, indent=2))
    shutil.rmtree(site, ignore_errors=True)
    tmp.rename(site)
    return site


def manifest(site: Path) -> dict:
    """The spec and total HTML bytes of a generated site."""
    return json.loads((Path(site) / "manifest.json").read_text())


def digest(site: Path) -> str:
    """SHA-1 over every file's path and bytes: equal digests mean identical sites."""
    h = hashlib.sha1()
    for path in sorted(Path(site).rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(site)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()
