"""The reasons a request can end with come from one list (crawltasks.reasons): the README's table is
that list, and every reason the code writes is in it (and nothing else is). No services needed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from crawltasks.reasons import REASONS, Reason, markdown_table

ROOT = Path(__file__).resolve().parent.parent
REASON_CALLS = {"_failure", "skip", "fail"}  # (request, reason, message, ...)


def _text(node: ast.expr) -> str | None:
    """A string literal, a ``Reason`` member, or an f-string with its fields as <name>
    (f"http_{status}" -> "http_<status>")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "Reason":
        return Reason[node.attr].value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else f"<{getattr(v.value, 'id', 'x')}>" for v in node.values]
        return "".join(str(p) for p in parts)
    return None


def _reasons_written(tree: ast.AST) -> set[str]:
    """Literals given as a reason: to _failure/skip/fail, as error= or reason=, or set as .error."""
    found: list[str | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in REASON_CALLS and len(node.args) >= 2:
                found.append(_text(node.args[1]))
            found += [_text(kw.value) for kw in node.keywords if kw.arg in ("error", "reason")]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "error":
                    found.append(_text(node.value))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    found += [_text(v) for t, v in zip(target.elts, node.value.elts, strict=False)
                              if isinstance(t, ast.Attribute) and t.attr == "error"]
    return {r for r in found if r is not None}


def test_the_readme_table_is_the_list_of_reasons():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| reason | outcome | meaning |"):].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert rows == list(REASONS), "the README's table of reasons is not crawltasks/reasons.py"
    assert markdown_table() in readme, "re-render the table: python -m crawltasks.reasons"


def test_every_reason_the_code_writes_is_listed_and_every_listed_one_is_written():
    written: dict[str, set[str]] = {}
    for path in sorted((ROOT / "crawltasks").rglob("*.py")):
        if "web" in path.relative_to(ROOT / "crawltasks").parts:  # its HTTP errors have a reason of their own
            continue
        for reason in _reasons_written(ast.parse(path.read_text())):
            written.setdefault(reason, set()).add(path.name)
    unlisted = {r: sorted(files) for r, files in written.items() if r not in REASONS}
    assert not unlisted, f"reasons written but not in crawltasks/reasons.py: {unlisted}"
    assert set(REASONS) <= set(written), f"listed but never written: {sorted(set(REASONS) - set(written))}"


def test_the_scan_sees_each_way_a_reason_is_written():
    source = '''
_failure(request, "a1", "m")
self.fail(f, "a2", "m")
Fetched(request=r, error="a3")
Ending(reason="a4", message="m")
f.error, f.message = "a5", "m"
f.error = "a6"
_failure(request, f"http_{status}", "m")
logs.event("x", reason=reason)
'''
    assert _reasons_written(ast.parse(source)) == {"a1", "a2", "a3", "a4", "a5", "a6", "http_<status>"}
