"""The crawltasks benchmark: a generated local site, a fast static server, crawltasks and its peers.

Run it with ``python bench/run.py`` (see bench/README.md). Nothing here is imported by the package.
"""
