"""Spiders from files and modules of the user's directory, found the same way on every worker.

``--spider myspider.py`` and ``--spider module:Class`` work from the current directory without
PYTHONPATH: the crawl saves where the spider lives (an absolute ``/dir/file.py:Class`` reference, or
the module and the directory it was found in, ``spider_path``) and workers load it from there.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TypeVar

S = TypeVar("S", bound=type)  # the spider base class given: spiders.Spider (this module does not import it)

REF_ATTR = "crawltasks_ref"  # set on classes loaded from a file: how workers find them again
PATH_ATTR = "crawltasks_path"  # set on classes imported from a directory added to sys.path


def is_file_ref(module: str) -> bool:
    """A reference's module part names a file (``x.py``, ``dir/x.py``) rather than a module."""
    return module.endswith(".py") or "/" in module or os.sep in module


def load_file(path: str | Path) -> ModuleType:
    """Import a Python file once per process, under a name derived from its absolute path, so that
    the same file gives the same classes however often a crawl's spider is resolved."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no spider file {str(path)!r}")
    name = f"crawltasks_spiderfile_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {str(path)!r} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def spider_in(module: ModuleType, attr: str, base: S) -> S:
    """The class ``attr`` of the module, or with no ``attr`` its one Spider subclass."""
    if attr:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj  # type: ignore[return-value]
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, base) and v.__module__ == module.__name__]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise LookupError(f"{module.__file__} defines {len(found)} Spider classes ({names}): name one as FILE:Class")
    return found[0]


def from_file(ref: str, base: S) -> S:
    """The spider of a ``path.py[:Class]`` reference; the class remembers its absolute reference."""
    path, _, attr = ref.rpartition(":") if not ref.endswith(".py") else (ref, ":", "")
    cls = spider_in(load_file(path), attr, base)
    setattr(cls, REF_ATTR, f"{Path(path).resolve()}:{cls.__qualname__}")
    return cls


def import_from(module_name: str, path: str | None) -> ModuleType:
    """Import a module, looking in ``path`` too (a directory the crawl recorded)."""
    if path and path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module_name)


def found_in_cwd(module: ModuleType) -> str | None:
    """The current directory, when the module was imported from it (workers must look there too)."""
    where = getattr(module, "__file__", None)
    cwd = Path.cwd().resolve()
    if where and cwd in Path(where).resolve().parents:
        return str(cwd)
    return None
