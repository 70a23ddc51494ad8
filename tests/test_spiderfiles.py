"""Spiders from the user's files and directory (``--spider myspider.py[:Class]``, ``module:Class``):
found from the current directory, loaded once per process, and remembered so workers find them too."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawltasks import spiderfiles
from crawltasks.spiders import Spider, SpiderNotFound, locate_spider, resolve_spider


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty current directory; what the test imports from it is forgotten after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def spider_source(*classes: str) -> str:
    body = "from crawltasks.spiders import Spider\n\n"
    for cls in classes:
        body += f"class {cls}(Spider):\n    name = 'files-{cls.lower()}-{uuid.uuid4().hex[:8]}'\n\n"
    return body


def test_a_spider_file_is_loaded_once_and_remembers_where_it_is(workdir):
    (workdir / "shop.py").write_text(spider_source("Shop"))
    cls = spiderfiles.from_file("shop.py", Spider)
    assert cls.__name__ == "Shop" and getattr(cls, spiderfiles.REF_ATTR) == f"{workdir / 'shop.py'}:Shop"
    assert spiderfiles.from_file(f"{workdir}/shop.py:Shop", Spider) is cls  # the same module, not a new one
    assert resolve_spider("shop.py") is cls


def test_a_file_must_say_which_spider_when_it_has_several_or_none(workdir):
    (workdir / "two.py").write_text(spider_source("One", "Two"))
    (workdir / "none.py").write_text("X = 1\n")
    with pytest.raises(LookupError, match=r"two.py defines 2 Spider classes \(One, Two\): name one as FILE:Class"):
        spiderfiles.from_file("two.py", Spider)
    assert spiderfiles.from_file("two.py:Two", Spider).__name__ == "Two"
    with pytest.raises(LookupError, match=r"defines 0 Spider classes \(none\)"):
        spiderfiles.from_file("none.py", Spider)


def test_a_missing_or_broken_file_is_said_and_not_half_loaded(workdir):
    with pytest.raises(FileNotFoundError, match="no spider file"):
        spiderfiles.load_file(workdir / "missing.py")
    (workdir / "notes.txt").write_text("not Python")
    with pytest.raises(ImportError, match="cannot load .*notes.txt.* as Python"):
        spiderfiles.load_file(workdir / "notes.txt")
    broken = workdir / "broken.py"
    broken.write_text("raise RuntimeError('bad import')\n")
    with pytest.raises(RuntimeError, match="bad import"):
        spiderfiles.load_file(broken)
    assert not [name for name in sys.modules if name.startswith("crawltasks_spiderfile_broken_")]
    with pytest.raises(SpiderNotFound, match=r"cannot import spider 'broken.py': RuntimeError: bad import"):
        resolve_spider("broken.py")


def test_a_module_of_the_current_directory_is_found_and_its_directory_remembered(workdir):
    (workdir / "myspiders.py").write_text(spider_source("Local"))
    cls = locate_spider("myspiders:Local", [])
    assert cls.__name__ == "Local" and getattr(cls, spiderfiles.PATH_ATTR) == str(workdir.resolve())
    assert spiderfiles.found_in_cwd(sys.modules["myspiders"]) == str(workdir.resolve())
    assert spiderfiles.found_in_cwd(spiderfiles) is None  # imported from elsewhere
    assert locate_spider("tests.spiders:TitleSpider", []).__name__ == "TitleSpider"


def test_import_from_looks_in_the_recorded_directory(workdir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "farmod.py").write_text("VALUE = 42\n")
    assert spiderfiles.import_from("farmod", str(elsewhere)).VALUE == 42
    assert sys.path[0] == str(elsewhere)
    spiderfiles.import_from("farmod", str(elsewhere))
    assert sys.path.count(str(elsewhere)) == 1


def test_what_counts_as_a_file_reference():
    assert [spiderfiles.is_file_ref(m) for m in ("x.py", "dir/x", "pkg.mod", "mod")] == [True, True, False, False]


def test_spider_in_follows_a_dotted_attribute(workdir):
    (workdir / "nested.py").write_text(spider_source("Inner") + "class Holder:\n    Kept = Inner\n")
    module = spiderfiles.load_file(workdir / "nested.py")
    assert spiderfiles.spider_in(module, "Holder.Kept", Spider) is module.Inner
