"""One exception tree: every exception class crawltasks defines derives from CrawltasksError, and
the tree drawn in crawltasks/errors.py names each of them under its family."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import crawltasks
from crawltasks import errors
from crawltasks.errors import CrawltasksError


def defined_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(crawltasks.__path__, "crawltasks."):
        if info.name.endswith("__main__"):  # running it is what importing it does
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_exception_of_the_package_has_the_common_base():
    found = defined_exceptions()
    assert len(found) > 15
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, CrawltasksError))
    assert not outside, f"not under CrawltasksError: {outside}"


def test_the_drawn_tree_names_every_leaf_under_its_family():
    tree = errors.__doc__ or ""
    families = {cls.__name__: cls for cls in vars(errors).values()
                if inspect.isclass(cls) and issubclass(cls, CrawltasksError)}
    current = None
    for line in tree.splitlines():
        words = line.replace("├──", " ").replace("└──", " ").replace("│", " ").split()
        if not words:
            continue
        if words[0] in families:
            current = families[words[0]]
            continue
        if current is None or "." not in words[0]:
            continue
        for ref in words[0].rstrip(",").split(",") + [w.rstrip(",") for w in words[1:] if "." in w and "(" not in w]:
            module, _, name = f"crawltasks.{ref}".rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            assert issubclass(cls, current), f"{ref} is drawn under {current.__name__}"
    leaves = {name.rsplit(".", 1)[1] for name in defined_exceptions() if not name.startswith("crawltasks.errors.")}
    missing = sorted(leaf for leaf in leaves if leaf not in tree)
    assert not missing, f"crawltasks/errors.py does not draw: {missing}"
