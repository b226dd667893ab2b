"""Moved to east_cache.predict.predict (and its images' loading to east_cache.predict.pages) in this release
(docs/guide.md, "Moved"): their names re-exported, and `python -m east_cache.model.predict` still runs
east-predict, until the next one. Nothing in the package imports it (tests/test_imports.py SHIMS)."""
import sys

from east_cache.predict.pages import *  # noqa: F401,F403
from east_cache.predict.predict import *  # noqa: F401,F403
from east_cache.predict import predict as moved_to

if __name__ == "__main__":
    sys.argv[0] = moved_to.__file__   # usage names the new path: python -m east_cache.predict.predict
    sys.exit(moved_to.main())
