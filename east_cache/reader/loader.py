"""Feeding a training run: caches opened (and brought up to date with rebuild), and loaders whose sampler
carries the epoch to whichever process reads, so that the cached variants rotate under persistent workers.

Three ways to read, the same batches from each (a batch depends only on its items' keys): in the training
process, a batch ahead in a thread (workers 0); this project's forked workers, which cut batches into reused
shared-memory slots (east_cache/reader/workers.py, where fork exists); DataLoader's worker processes elsewhere.
"""
from __future__ import annotations

import functools
import itertools
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler

from east_cache.errors import CacheError
from east_cache.reader.cache import CacheDataset
from east_cache.reader.collate import collate
from east_cache.reader.sampler import make_sampler
from east_cache.reader.workers import WorkerLoader, fork_available
from east_cache.store.build import rebuild as rebuild_cache
from east_cache.store.manifest import Manifest
from east_cache.store.outdir import build_holder
from east_cache.store.stale import out_of_date

AUTO_WORKERS_MAX = 4   # worker processes per training process that loader_workers picks at most


class EpochSampler(Sampler):
    """Yields (epoch, index). Persistent DataLoader workers keep their own copy of the dataset, so
    `ds.set_epoch` in the main process would never reach them and the cached variants would not rotate.
    `skip` leaves out the start of an epoch's order: a run resumed mid-epoch reads the batches it had not."""

    def __init__(self, base: Sampler):
        self.base, self.epoch, self.skip = base, 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.epoch, self.skip = epoch, skip
        self.base.set_epoch(epoch)

    def __iter__(self):
        epoch = self.epoch
        return ((epoch, i) for i in itertools.islice(self.base, self.skip, None))

    def __len__(self) -> int:
        return max(0, len(self.base) - self.skip)


class EpochDataset(Dataset):
    """Sets the wrapped dataset's epoch from the (epoch, index) keys of EpochSampler, in whichever process reads."""

    def __init__(self, ds: CacheDataset):
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, key):
        self.ds.set_epoch(key[0])
        return self.ds[key[1]]

    def table_rows(self) -> int:
        return self.ds.table_rows()

    def __getitems__(self, keys):
        self.ds.set_epoch(keys[0][0])
        return self.ds.__getitems__([i for _, i in keys])


def make_loader(ds: CacheDataset, batch_size: int, train: bool, seed: int, rank: int = 0, world: int = 1,
                device: torch.device = torch.device("cpu"), workers: int | None = None) -> DataLoader | WorkerLoader:
    """Batches of ds for one process of a run of `world` (rank `rank`): its share of an order seeded by (seed,
    epoch), shuffled and without a short last batch when train; read by `workers` processes (None: as many as
    loader_workers picks), pinned for a CUDA device. Call loader.sampler.set_epoch(epoch) before each epoch."""
    sampler = EpochSampler(make_sampler(ds, batch_size, train, seed, rank, world))
    cuda, workers = device.type == "cuda", loader_workers(ds, device, world, workers)
    drop_last = train and len(sampler) >= batch_size
    if uses_slots(workers):
        return WorkerLoader(EpochDataset(ds), sampler, batch_size, workers, drop_last)
    # Without worker processes, collate copies each batch once, straight into pinned memory (on CUDA), in the
    # thread of batches(); worker processes hand over shared memory, which DataLoader then copies to pinned.
    # Its own generator: DataLoader draws a seed from it at every iter(), which from the global one would shift
    # the jitter's random numbers whenever an epoch is begun anew on resume.
    return DataLoader(EpochDataset(ds), batch_size=batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=functools.partial(collate, pin=cuda and workers == 0), pin_memory=cuda and workers > 0,
                      persistent_workers=cuda and workers > 0, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed), worker_init_fn=ignore_interrupts)


def loader_workers(ds: CacheDataset, device: torch.device, world: int = 1, workers: int | None = None) -> int:
    """`workers` when given; else, for a page-mode cache read for a GPU, one worker process per core this process
    has (the cores over the `world` processes of the run), 1 to AUTO_WORKERS_MAX, since every crop is Python that
    holds the GIL, which processes run side by side and out of the training loop's way; else 0: a CPU run's cores
    train, and a --crop build batch is copies that release the GIL, which a thread of this process keeps up with."""
    if workers is not None:
        return workers
    if device.type != "cuda" or not ds.pages or not fork_available():
        return 0
    return max(1, min(AUTO_WORKERS_MAX, (os.cpu_count() or 1) // world))


def uses_slots(workers: int) -> bool:
    """Whether `workers` loader processes are this project's (east_cache/reader/workers.py: forked, writing into
    reused shared batch slots) rather than DataLoader's, which need no fork."""
    return workers > 0 and fork_available()


def describe_reading(workers: int) -> str:
    return (f"read by {workers} worker process(es) into shared batch slots" if uses_slots(workers) else
            f"read by {workers} DataLoader worker process(es)" if workers else "read in this process, a batch ahead")


def ignore_interrupts(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group; the main process stops the run at a step boundary,
    and a worker that died of it first would fail the batches that step still needs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def open_cache(path: Path, rebuild: bool, rank: int = 0, world: int = 1) -> CacheDataset:
    """Open a cache for a run's process (rank of world), its items compact (page mode: score and geometry are
    rebuilt on the device). With `rebuild`, rank 0 first brings it up to date while the others wait at a
    torch.distributed barrier (a changed source, or a cache of another format version or made by other sample
    code: stale.out_of_date). Without it such a cache raises a CacheError (StaleCacheError) saying what to run."""
    try:
        if rebuild and rank == 0:
            why = out_of_date(Manifest.load(path, any_version=True))
            if why is not None:
                print(f"{path}: {why}; updating the cache (--rebuild)", flush=True)
                rebuild_cache(path, quiet=True)
        if rebuild and world > 1:
            dist.barrier()
        return CacheDataset(path, compact=True)
    except CacheError:
        why = explain_not_a_cache(path)
        if why is None:
            raise
        raise CacheError(why) from None


def explain_not_a_cache(path: Path) -> str | None:
    """What a folder that cannot be opened as a cache is instead, when it is one of the usual mistakes: a data
    set (it holds ufo/), or a cache whose build is still running (its lock is held)."""
    if (path / "ufo").is_dir():
        return (f"{path} is a data set (it holds ufo/), not a cache; build a cache from it first: python -m "
                f"preprocess build --data {path} --out cache, then pass --cache cache")
    holder = build_holder(path)
    if holder is not None:
        return f"{path}: a build (pid {holder}) is still writing this cache; run again when it has finished"
    return None


def check_caches(ds: CacheDataset, val: CacheDataset | None) -> None:
    """A validation cache must match the training cache's crop size and map scale: the model predicts those."""
    if val is not None and (val.config.input_size, val.config.map_scale) != (ds.config.input_size, ds.config.map_scale):
        raise CacheError(f"{val.cache_dir} has input {val.config.input_size}px at x{val.config.map_scale} but "
                         f"{ds.cache_dir} has {ds.config.input_size}px at x{ds.config.map_scale}; build both alike")
