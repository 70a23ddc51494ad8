"""``python -m crawltasks.cli``: the console script."""

from . import entry

entry()
