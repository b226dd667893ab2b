"""The cache as a torch Dataset and batches: a cache built by `east-cache build` (`python -m preprocess build`) read
at memory speed. The public API: CacheDataset and its items, samplers, collate, the loaders of a training run
(make_loader, EpochSampler, EpochDataset, WorkerLoader) and open_cache; bench and show are the user commands that
read caches."""
from east_cache.reader.buffers import POOL, BufferPool
from east_cache.reader.cache import CacheDataset, StaleCacheError
from east_cache.reader.collate import collate
from east_cache.reader.loader import EpochDataset, EpochSampler, make_loader, open_cache
from east_cache.reader.onthefly import OnTheFlyDataset
from east_cache.reader.prefetch import batches, prefetch
from east_cache.reader.sampler import BlockSampler, make_sampler
from east_cache.reader.workers import WorkerLoader, fork_available

__all__ = ["POOL", "BlockSampler", "BufferPool", "CacheDataset", "EpochDataset", "EpochSampler", "OnTheFlyDataset",
           "StaleCacheError", "WorkerLoader", "batches", "collate", "fork_available", "make_loader", "make_sampler",
           "open_cache", "prefetch"]
