"""The README's Layout section names every module and folder of crawltasks/ (so it matches the tree)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "crawltasks"


def layout_names() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[layout.index("```"):layout.index("```", layout.index("```") + 3)]
    return set(re.findall(r"([a-z_]+\.py|[a-z_]+/)", layout))


def test_the_readme_layout_names_every_module_and_folder():
    present = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name not in {"__init__.py", "__main__.py"}:
            present.add(path.name)
    present |= {p.name + "/" for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(present - layout_names())
    assert not missing, f"the README's Layout does not name: {missing}"


def test_the_top_level_holds_only_the_shared_vocabulary_and_the_api():
    """New modules go into the folder of their concern; the top level stays a short list."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 16, f"{len(top)} modules at the top level: {top}"
