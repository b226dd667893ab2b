"""A thin mmap-backed torch Dataset over a cache built by `python -m preprocess build`."""
from dataset.buffers import POOL, BufferPool
from dataset.cache import CacheDataset, StaleCacheError
from dataset.collate import collate
from dataset.onthefly import OnTheFlyDataset
from dataset.prefetch import batches, prefetch
from dataset.sampler import BlockSampler, make_sampler

__all__ = ["POOL", "BlockSampler", "BufferPool", "CacheDataset", "OnTheFlyDataset", "StaleCacheError", "batches", "collate",
           "make_sampler", "prefetch"]
