"""The cache reader under the name the design gives it: `from dataset import CacheDataset`.

The code lives in east_cache.reader; beside a project that has its own dataset.py (the BoostCamp baseline
has one), import it as `from east_cache import ...` instead: that name shadows nothing.
"""
from east_cache.reader import *  # noqa: F403
from east_cache.reader import __all__  # noqa: F401
