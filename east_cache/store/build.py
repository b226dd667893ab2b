"""Moved to east_cache.build.run in this release (docs/guide.md, "Moved"); this re-export of
build_cache goes in the next one. Nothing in the package imports it (tests/test_imports.py SHIMS)."""
from east_cache.build.run import build_cache  # noqa: F401
