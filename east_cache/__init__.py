"""east-cache: an offline preprocessing cache for training the EAST text detector on UFO annotations.

The data path, one subpackage per step: ingest (UFO JSON and images in) -> sample (the warp and the EAST
targets) -> store (the cache on disk and its build) -> reader (the cache as batches) -> model (EAST, its
training loop, prediction and DetEval). The command lines are cli.py (east-cache, python -m preprocess)
and model/train.py (east-train, python train.py).
"""
