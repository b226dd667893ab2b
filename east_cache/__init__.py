"""east-cache: an offline preprocessing cache for training the EAST text detector on UFO annotations.

The data path, one subpackage per step: ingest (UFO JSON and images in) -> sample (the warp and the EAST
targets) -> build (making a cache) -> store (the cache on disk) -> reader (the cache as batches) -> model (EAST),
predict (east-predict) and train (east-train); beside them tools and convert (the build side's commands), evaluate
(everything that reads predictions) and inspect (bench and show). The command lines are cli.py (east-cache,
python -m preprocess), train/train.py (east-train, python train.py) and predict/predict.py (east-predict).
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
