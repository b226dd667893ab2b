"""A thin mmap-backed torch Dataset over a cache built by `python -m preprocess build`."""
from east_cache.reader.buffers import POOL, BufferPool
from east_cache.reader.cache import CacheDataset, StaleCacheError
from east_cache.reader.collate import collate
from east_cache.reader.onthefly import OnTheFlyDataset
from east_cache.reader.prefetch import batches, prefetch
from east_cache.reader.sampler import BlockSampler, make_sampler

__all__ = ["POOL", "BlockSampler", "BufferPool", "CacheDataset", "OnTheFlyDataset", "StaleCacheError", "batches", "collate",
           "make_sampler", "prefetch"]
