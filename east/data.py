"""Feeding the loop: caches opened (and brought up to date with --rebuild), and DataLoaders whose sampler
carries the epoch to whichever process reads, so that the cached variants rotate under persistent workers."""
from __future__ import annotations

import functools
from pathlib import Path

import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler

from dataset import CacheDataset, collate, make_sampler
from east.config import TrainConfig
from east.runtime import Runtime
from preprocess.errors import CacheError
from preprocess.store.build import rebuild as rebuild_cache
from preprocess.store.manifest import Manifest
from preprocess.store.stale import check_stale


class EpochSampler(Sampler):
    """Yields (epoch, index). Persistent DataLoader workers keep their own copy of the dataset, so
    `ds.set_epoch` in the main process would never reach them and the cached variants would not rotate."""

    def __init__(self, base: Sampler):
        self.base, self.epoch = base, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.base.set_epoch(epoch)

    def __iter__(self):
        epoch = self.epoch
        return ((epoch, i) for i in self.base)

    def __len__(self) -> int:
        return len(self.base)


class EpochDataset(Dataset):
    """Sets the wrapped dataset's epoch from the (epoch, index) keys of EpochSampler, in whichever process reads."""

    def __init__(self, ds: CacheDataset):
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, key):
        self.ds.set_epoch(key[0])
        return self.ds[key[1]]

    def __getitems__(self, keys):
        self.ds.set_epoch(keys[0][0])
        return self.ds.__getitems__([i for _, i in keys])


def make_loader(ds: CacheDataset, cfg: TrainConfig, rt: Runtime, train: bool) -> DataLoader:
    # seeded by (seed, epoch) and split over the ranks: one code path, reproducible resumes
    sampler = EpochSampler(make_sampler(ds, cfg.batch_size, train, cfg.seed, rt.rank, rt.world))
    cuda, workers = rt.device.type == "cuda", cfg.workers
    # Without worker processes, collate copies each batch once, straight into pinned memory (on CUDA), in the
    # thread of batches(); worker processes hand over shared memory, which DataLoader then copies to pinned.
    return DataLoader(EpochDataset(ds), batch_size=cfg.batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=functools.partial(collate, pin=cuda and workers == 0), pin_memory=cuda and workers > 0,
                      persistent_workers=cuda and workers > 0, drop_last=train and len(sampler) >= cfg.batch_size)


def open_cache(path: Path, rebuild: bool, rt: Runtime) -> CacheDataset:
    """Open a cache; with `rebuild`, rank 0 first brings a stale one up to date while the others wait.
    Without it a stale cache raises StaleCacheError, whose message says what to run."""
    if rebuild and rt.rank == 0:
        changes = check_stale(Manifest.load(path))
        if changes.stale:
            print(f"{path}: {changes.describe()}; updating the cache (--rebuild)", flush=True)
            rebuild_cache(path, quiet=True)
    if rebuild and rt.world > 1:
        dist.barrier()
    return CacheDataset(path)


def check_caches(ds: CacheDataset, val: CacheDataset | None) -> None:
    """A validation cache must match the training cache's crop size and map scale: the model predicts those."""
    if val is not None and (val.config.input_size, val.config.map_scale) != (ds.config.input_size, ds.config.map_scale):
        raise CacheError(f"{val.cache_dir} has input {val.config.input_size}px at x{val.config.map_scale} but "
                         f"{ds.cache_dir} has {ds.config.input_size}px at x{ds.config.map_scale}; build both alike")
