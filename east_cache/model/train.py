"""Moved to east_cache.train.train in this release (docs/guide.md, "Moved"): its names re-exported, and
`python -m east_cache.model.train` (the resume command older runs printed) still runs east-train, until the next one.
Nothing in the package imports it (tests/test_imports.py SHIMS)."""
import sys

from east_cache.train.train import *  # noqa: F401,F403
from east_cache.train import train as moved_to

if __name__ == "__main__":
    sys.argv[0] = moved_to.__file__   # usage and the resume command name the new path: python -m east_cache.train.train
    moved_to.entry()
