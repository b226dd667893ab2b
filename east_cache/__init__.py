"""east-cache: an offline preprocessing cache for training the EAST text detector on UFO annotations.

The data path, one subpackage per step: ingest (UFO JSON and images in) -> sample (the warp and the EAST
targets) -> store (the cache on disk and its build) -> reader (the cache as batches) -> model (EAST, its
training loop, prediction and DetEval). The command lines are cli.py (east-cache, python -m preprocess)
and model/train.py (east-train, python train.py).
"""
from __future__ import annotations

import importlib

# The reader API, importable as `from east_cache import Loader` beside a project that has its own dataset.py.
# Loaded on first use, so that the command line does not pay for torch until it reads a cache.
_PUBLIC = {"Loader": "east_cache.reader", "Batch": "east_cache.reader", "CacheDataset": "east_cache.reader",
           "EpochSampler": "east_cache.reader", "StaleCacheError": "east_cache.reader", "collate": "east_cache.reader",
           "SameCropsWarning": "east_cache.reader", "CacheError": "east_cache.errors", "Augment": "east_cache.augment"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'east_cache' has no attribute {name!r}")
