"""Feeding a training run: caches opened (and brought up to date with rebuild), and loaders whose sampler
carries the epoch to whichever process reads, so that the cached variants rotate under persistent workers.

Three ways to read, the same batches from each (a batch depends only on its items' keys): in the training
process, a batch ahead in a thread (workers 0); this project's forked workers, which cut batches into reused
shared-memory slots (east_cache/reader/workers.py, where fork exists); DataLoader's worker processes elsewhere.

A cache at a URL is read through a local cache folder, each epoch's files downloaded ahead of its batches
(reader/fetch.py). With a NodeShare of several nodes, each node reads a fixed share of whole files; with a
folder limit below what a node reads, files in windows that fit (reader/sampler.py ShareSampler).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler

from east_cache.augment import Augment
from east_cache.bounds import COUNT, COUNT_OR_ZERO, SEED, check_number
from east_cache.errors import CacheError, UsageError, cache_command
from east_cache.location import Location, is_remote
from east_cache.reader.cache import CacheDataset
from east_cache.reader.collate import collate
from east_cache.reader.expand import expand_batch
from east_cache.reader.fetch import FetchingLoader
from east_cache.reader.images import BASELINE_JITTER, JITTER, NORMALIZATIONS, prepare_images
from east_cache.reader.jpeg_device import nvjpeg
from east_cache.reader.prefetch import batches, prefetch
from east_cache.reader.sampler import ShareSampler, make_sampler
from east_cache.reader.workers import WorkerLoader, fork_available
from east_cache.build.run import rebuild as rebuild_cache
from east_cache.store.manifest import Manifest, data_path
from east_cache.build.outdir import build_holder
from east_cache.store.remote.local_cache import local_settings
from east_cache.reader.share import NodeShare
from east_cache.store.sidecar import quads_path
from east_cache.build.stale import out_of_date

# Worker processes per training process that loader_workers picks at most. A crop warped at read time is tens of
# ms of a worker's CPU, so a GPU step of a dozen 1024-px crops needs many of them: docs/performance.md
# (bench_gpu_augment) has train.py's wait for data on a GPU machine with fewer.
AUTO_WORKERS_MAX = 12


class EpochSampler(Sampler):
    """Yields (epoch, index) keys, which CacheDataset reads at that epoch in whichever process gets them, so that
    the epoch never depends on a dataset copy being told. `skip` leaves out the start of an epoch's order: a run
    resumed mid-epoch reads the batches it had not."""

    def __init__(self, base: Sampler):
        self.base, self.epoch, self.skip = base, 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        check_epoch(epoch, skip)
        self.epoch, self.skip = epoch, skip
        self.base.set_epoch(epoch)

    def __iter__(self):
        epoch = self.epoch
        return ((epoch, i) for i in itertools.islice(self.base, self.skip, None))

    def __len__(self) -> int:
        return max(0, len(self.base) - self.skip)


def check_epoch(epoch: int, skip: int = 0) -> None:
    """An epoch and the items left out of its start, as set_epoch takes them: integers >= 0."""
    check_number("epoch", epoch, COUNT_OR_ZERO)
    check_number("skip", skip, COUNT_OR_ZERO)


def make_loader(ds: CacheDataset, batch_size: int, train: bool, seed: int, rank: int = 0, world: int = 1,
                device: torch.device = torch.device("cpu"), workers: int | None = None, share: NodeShare | None = None,
                nvjpeg_decode: bool = False) -> DataLoader | WorkerLoader | FetchingLoader:
    """Batches of ds for one process of a run of `world` (rank `rank`): its share of an order seeded by (seed,
    epoch), shuffled and without a short last batch when train; read by `workers` processes (None: as many as
    loader_workers picks), pinned for a CUDA device. Call loader.sampler.set_epoch(epoch) before each epoch.
    share: where this process lies among the run's nodes, which then read fixed shares of the files (training).
    nvjpeg_decode: a jpeg page cache's tiles decoded by nvJPEG on the CUDA device, not by the workers."""
    sampler = EpochSampler(order(ds, batch_size, train, seed, rank, world, share))
    # jpeg pages: with nvjpeg_decode, nvJPEG decodes each batch on the CUDA device (where torchvision has it), else
    # the loader's workers decode each crop's tiles on the CPU
    ds.decode_on_device(nvjpeg_decode and nvjpeg(device) is not None)
    loader = batch_loader(ds, sampler, batch_size, train, seed, device, loader_workers(ds, device, world, workers))
    if ds.remote is None:
        return loader
    if ds.pages:   # the word tables' largest: from the sidecars of the files read, fetched now, at once
        ds.remote.fetch_sidecars([ds.files[f] for f in ds.files_read()])
    return FetchingLoader(loader, ds)


def order(ds: CacheDataset, batch_size: int, train: bool, seed: int, rank: int, world: int,
          share: NodeShare | None) -> Sampler:
    """The sampler of a process: a node's share of the files (training with share), files in windows a local cache
    folder's limit holds (training from a URL with a limit below the cache), else make_sampler's global order."""
    limit = ds.remote.settings.limit_bytes if ds.remote is not None else 0
    shared = share is not None and share.nodes > 1
    if train and (shared or limit):
        sizes = file_bytes(ds)
        if shared or limit < sum(sizes):
            if ds.selection is not None:
                why = "--node-share gives each machine" if shared else "a local cache limit below the cache reads"
                raise UsageError(f"{why} whole files in turn, which a selection of images (--split, --repeat) does "
                                 f"not keep: train without --node-share, with a --local-cache-limit above the cache's "
                                 f"{sum(sizes) / 2**30:.2f} GiB, or on a cache built of the selection's images")
            sampler = ShareSampler(ds, share if shared else NodeShare(1, 0, rank, world), sizes, seed,
                                   limit_bytes=limit)
            ds.reading = sampler.files.tolist()
            return sampler
    return make_sampler(ds, batch_size, train, seed, rank, world)


def file_bytes(ds: CacheDataset) -> list[int]:
    """Each data file's bytes with its sidecar's: as stored at the URL, or on the local disk."""
    if ds.remote is not None:
        return [ds.remote.units[name].bytes for name in ds.files]
    fmt = ds.manifest.format
    paths = [data_path(ds.cache_dir, name) for name in ds.files]
    return [sum(p.stat().st_size for p in fmt.stored_files(path)) + quads_path(path).stat().st_size for path in paths]


def batch_loader(ds: CacheDataset, sampler: EpochSampler, batch_size: int, train: bool, seed: int,
                 device: torch.device, workers: int) -> DataLoader | WorkerLoader:
    cuda = device.type == "cuda"
    drop_last = train and len(sampler) >= batch_size
    if uses_slots(workers):
        return WorkerLoader(ds, sampler, batch_size, workers, drop_last)
    # Without worker processes, collate copies each batch once, straight into pinned memory (on CUDA), in the
    # thread of batches(); worker processes hand over shared memory, which DataLoader then copies to pinned.
    # Its own generator: DataLoader draws a seed from it at every iter(), which from the global one would shift
    # the jitter's random numbers whenever an epoch is begun anew on resume.
    return DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=functools.partial(collate, pin=cuda and workers == 0), pin_memory=cuda and workers > 0,
                      persistent_workers=cuda and workers > 0, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed), worker_init_fn=ignore_interrupts)


def loader_workers(ds: CacheDataset, device: torch.device, world: int = 1, workers: int | None = None) -> int:
    """`workers` when given; else, for a page-mode cache read for a GPU, one worker process per core this process
    has (the cores over the `world` processes of the run) but one, which the training process keeps (it feeds the
    device, expands the batches and runs the optimiser's host side), 1 to AUTO_WORKERS_MAX, since every crop is Python
    that holds the GIL, which processes run side by side and out of the training loop's way; else 0: a CPU run's
    cores train, and a --crop build batch is copies that release the GIL, which a thread of this process keeps up
    with."""
    if workers is not None:
        return workers
    if device.type != "cuda" or not ds.pages or not fork_available():
        return 0
    return max(1, min(AUTO_WORKERS_MAX, (os.cpu_count() or 1) // world - 1))


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


def open_cache(path, rebuild: bool, rank: int = 0, world: int = 1, local_cache=None,
               local_cache_limit: str | int = 0) -> CacheDataset:
    """Open a cache for a run's process (rank of world), its items compact (page mode: score and geometry are
    rebuilt on the device). With `rebuild`, rank 0 first brings it up to date while the others wait at a
    torch.distributed barrier (a changed source, or a cache of another format version or made by other sample
    code: stale.out_of_date). Without it such a cache raises a CacheError (StaleCacheError) saying what to run.
    A cache at a URL (path) is read through the local cache folder under local_cache (CacheDataset's), and every
    rank must have opened the same build of it."""
    if is_remote(path):
        if rebuild:
            raise UsageError(f"--rebuild updates a local cache; bring {Location.parse(path)} up to date with: "
                             f"{cache_command('build')} --out {Location.parse(path)}")
        ds = CacheDataset(path, compact=True, local_cache=local_cache, local_cache_limit=local_cache_limit)
        same_build_everywhere(ds, world)
        return ds
    path = Path(path)
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


def same_build_everywhere(ds: CacheDataset, world: int) -> None:
    """A cache at a URL rebuilt between the moments two ranks opened it would have them read two builds: refused."""
    if world > 1 and dist.is_available() and dist.is_initialized():
        mine = hashlib.blake2b(ds.remote.manifest_bytes, digest_size=16).hexdigest()
        seen = [None] * world
        dist.all_gather_object(seen, mine)
        if len(set(seen)) > 1:
            raise CacheError(f"{ds.where}: the cache was rebuilt while this run opened it (its ranks read two "
                             f"builds); start the run again")


def explain_not_a_cache(path: Path) -> str | None:
    """What a folder that cannot be opened as a cache is instead, when it is one of the usual mistakes: a data
    set (it holds ufo/), or a cache whose build is still running (its lock is held)."""
    if (path / "ufo").is_dir():
        return (f"{path} is a data set (it holds ufo/), not a cache; build a cache from it first: "
                f"{cache_command('build')} --data {path} --out cache, then pass --cache cache")
    holder = build_holder(path)
    if holder is not None:
        return f"{path}: a build (pid {holder}) is still writing this cache; run again when it has finished"
    return None


def check_caches(ds: CacheDataset, val: CacheDataset | None) -> None:
    """A validation cache must match the training cache's crop size and map scale: the model predicts those."""
    if val is not None and (val.size, val.config.map_scale) != (ds.size, ds.config.map_scale):
        raise CacheError(f"{val.where} is read at input {val.size}px at x{val.config.map_scale} but "
                         f"{ds.where} at {ds.size}px at x{ds.config.map_scale}; read both alike (--input-size)")


def pinned(batch: dict) -> dict:
    """The batch with each tensor in pinned memory (copied there unless it is already): a copy to a CUDA device
    from pageable memory waits for the work queued before it on the device, so it would neither overlap the
    step nor let a loop tell the time it waits for data from the time it waits for the GPU."""
    return {k: v.pin_memory() if isinstance(v, torch.Tensor) and not v.is_pinned() else v for k, v in batch.items()}


class Batch(NamedTuple):
    """A batch as a training loop takes it, on the Loader's device; B items, S = input_size, m = S x map_scale.
    It unpacks like the BoostCamp baseline's batches: `for image, score, geo, roi in loader:`."""
    image: torch.Tensor   # (B, 3, S, S) RGB: float32 normalised as Loader(normalize=...) says, or uint8 0..255 (None)
    score: torch.Tensor   # (B, 1, m, m) float32: 1 inside a legible word's shrunk quad, else 0
    geo: torch.Tensor     # (B, 5, m, m) float32: distances (input px) to the top, bottom, left, right edges of the
                          # pixel's word box rotated by the word's angle, then that angle (rad); 0 where score is 0
    roi: torch.Tensor     # (B, 1, m, m) float32: 0 over don't-care words, else 1 (the loss's mask)


class Loader:
    """A cache's batches for a training loop of your own, through the path train.py reads by: crops cut by worker
    processes into shared batch slots (page-mode caches: their score and geometry rebuilt on the device), or
    copied in this process a batch ahead; each pass over it is one epoch, its crops drawn anew.

        from east_cache import Loader
        from east_cache.model.loss import east_loss
        from east_cache.model.model import EAST
        loader = Loader("cache/train", batch_size=12, device="cpu")   # or "cuda"
        model = EAST(loader.dataset.config.map_scale).to(loader.device)
        for epoch in range(2):
            for image, score, geo, roi in loader:    # a Batch; the next pass reads the next epoch
                loss = east_loss(*model(image), score, geo, roi)["loss"]   # model(image) is (score, geo)
                loss.backward()

    cache: a cache directory (or an open CacheDataset). train=True (the default) gives the baseline's augmentation:
    each epoch every page's height factor, rotation and crop drawn anew (--geometry read caches; others hold the
    geometry their build drew) and colour jitter BASELINE_JITTER; each part is turned off explicitly (augment=False,
    jitter=0). train=False is a validation loader: name order, a short last batch kept, no augmentation, the same
    unwarped crops every epoch. The order is shuffled from (seed, epoch) and split over `world` processes
    (defaults: torch.distributed's rank and world size when it is initialised), each of them reading len(loader)
    batches per epoch; shuffle (default: train) False reads in name order and keeps a short last batch.
    workers: loader processes (None: one per core for a page-mode cache read for a GPU, up to
    AUTO_WORKERS_MAX; else 0, read in this process). normalize: "imagenet" (this project's EAST), "baseline"
    ((x / 255 - 0.5) / 0.5, the BoostCamp baseline's) or None (uint8 images, to augment and normalise yourself);
    jitter: colour jitter strength applied on the device before normalising (0: none; default BASELINE_JITTER when
    train, else 0). augment: draw each epoch's geometry (default: train), by the cache's build values (True) or by an
    Augment (east_cache/augment.py: height_jitter, max_rotation, input_size, scale, perspective, scale_p,
    perspective_p; the flags of east-train of the same names), e.g.
    augment=east_cache.Augment(scale=(0.5, 1), perspective=0.05): the fields not given keep the cache's values (its
    height jitter, rotation and crop side), as the flags do. rebuild: bring a stale
    cache up to date first (else a stale cache is refused with the command that updates it). A cache at a URL
    (s3://bucket/prefix) is read through a local cache folder (local_cache, local_cache_limit: CacheDataset's);
    share: this process's node among several (reader/share.py NodeShare), each reading its own files.
    nvjpeg_decode: a jpeg page cache's tiles decoded on the CUDA device by nvJPEG (torchvision) rather than by the
    workers on the CPU (the default: the CPU path served a GPU faster where both were measured).
    transform: your own transform of each training crop, run by the workers on uint8 (S, S, 3) RGB before the
    jitter and the normalisation: an albumentations pipeline (the words move with its geometric transforms), a
    torchvision v2 transform, a callable image -> image, or a recipe file (CacheDataset's transform; its draws
    seeded by (seed, epoch, image, variant)); only while augment is on, so never in a validation loader.
    split, repeat: the images read and how often an epoch (CacheDataset.select, drawn from this seed): split="train0"
    takes each source's ufo/train0.json images (all of a source without one), repeat={"cord": 0.5} half of a source's
    images, another half each epoch; len() counts the selection's batches."""

    def __init__(self, cache, batch_size: int, *, device="cpu", workers: int | None = None, seed: int = 0,
                 train: bool = True, shuffle: bool | None = None, rank: int | None = None, world: int | None = None,
                 normalize: str | None = "imagenet", jitter: float | None = None, augment: bool | Augment | None = None,
                 rebuild: bool = False, share: NodeShare | None = None, local_cache=None,
                 local_cache_limit: str | int = 0, nvjpeg_decode: bool = False, transform=None,
                 split: str | None = None, repeat: dict | None = None):
        shuffle = train if shuffle is None else shuffle
        jitter = (BASELINE_JITTER if train else 0.0) if jitter is None else jitter
        augment = train if augment is None else augment
        if normalize is not None and normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize={normalize!r}: use one of {', '.join(NORMALIZATIONS)}, or None for uint8")
        for name, value, bound in (("batch_size", batch_size, COUNT), ("seed", seed, SEED), ("jitter", jitter, JITTER),
                                   ("workers", workers, COUNT_OR_ZERO), ("world", world, COUNT),
                                   ("rank", rank, COUNT_OR_ZERO)):
            check_number(name, value, bound, none=name in ("workers", "world", "rank"))
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = rank if rank is not None else dist.get_rank() if distributed else 0
        self.world = world if world is not None else dist.get_world_size() if distributed else 1
        if self.rank >= self.world:
            raise ValueError(f"rank={self.rank}: must be an integer in [0, world) = [0, {self.world})")
        local_settings(local_cache, local_cache_limit)   # its limit refused now, not when a URL is read
        self.device = torch.device(device)
        self.dataset = (cache if isinstance(cache, CacheDataset) else
                        open_cache(cache, rebuild, self.rank, self.world, local_cache, local_cache_limit))
        self.dataset.augment = augment   # before make_loader: its workers fork with it
        if split is not None or repeat is not None:
            self.dataset.select(split, repeat, seed)
        if transform is not None:
            self.dataset.set_transform(transform, seed)
        self.normalize, self.jitter = normalize, jitter
        # the batches as the cache's items, before the device: a DataLoader, or the slot workers' WorkerLoader
        self.source = make_loader(self.dataset, batch_size, shuffle, seed, self.rank, self.world, self.device, workers,
                                  share, nvjpeg_decode)
        self.epoch, self._told = 0, False

    def __len__(self) -> int:
        """Batches per epoch in this process."""
        return len(self.source)

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Make the next pass read epoch `epoch`, leaving out its first `skip` items (a run resumed inside an
        epoch). Without it, each pass reads the epoch after the last one, from 0."""
        check_epoch(epoch, skip)
        self.epoch, self._told = epoch, True
        self.source.sampler.set_epoch(epoch, skip)

    def __iter__(self) -> Iterator[Batch]:
        if not self._told:
            self.source.sampler.set_epoch(self.epoch)
        self._told = False
        source = batches(self.source)
        if self.device.type == "cuda":   # a thread copies what is not pinned yet (the slot workers' batches)
            source = prefetch(map(pinned, source))
        for batch in source:
            b = expand_batch(batch, self.device)
            image = b["image"] if self.normalize is None else prepare_images(b["image"], self.jitter, self.normalize)
            yield Batch(image, b["score"].float(), b["geo"].float(), b["roi"].float())
        self.epoch += 1

    def close(self) -> None:
        """End the worker processes (they also end when the loader is collected)."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
