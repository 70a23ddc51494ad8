"""The README's Layout section names every module and package of crawltasks/ (so it matches the tree)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_layout_names_every_module():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    named = set(re.findall(r"([a-z_]+\.py|[a-z_]+/)", layout))
    package = ROOT / "crawltasks"
    present = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {p.name + "/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(present - named)
    assert not missing, f"the README's Layout does not name: {missing}"
