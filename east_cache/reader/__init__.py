"""The cache as batches and a torch Dataset: a cache built by `east-cache build` (`python -m preprocess build`) read
at memory speed. The public API: Loader (batches on a device for a training loop of your own, by the path
train.py reads through) and its Batch; CacheDataset and its items for a DataLoader of your own; samplers,
collate, the loaders of a training run (make_loader, EpochSampler, WorkerLoader) and open_cache. The commands that
look at a cache through it (bench, show) are east_cache/inspect/'s."""
from east_cache.reader.buffers import POOL, BufferPool
from east_cache.reader.cache import CacheDataset, SameCropsWarning, StaleCacheError
from east_cache.reader.collate import collate
from east_cache.reader.loader import Batch, EpochSampler, Loader, make_loader, open_cache
from east_cache.reader.onthefly import OnTheFlyDataset
from east_cache.reader.prefetch import batches, prefetch
from east_cache.reader.sampler import BlockSampler, make_sampler
from east_cache.reader.workers import WorkerLoader, fork_available

__all__ = ["POOL", "Batch", "BlockSampler", "BufferPool", "CacheDataset", "EpochSampler", "Loader", "OnTheFlyDataset",
           "SameCropsWarning", "StaleCacheError", "WorkerLoader", "batches", "collate", "fork_available", "make_loader",
           "make_sampler", "open_cache", "prefetch"]
