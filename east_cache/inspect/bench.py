"""`python -m preprocess bench CACHE`: DataLoader throughput over worker counts x batch sizes, cold and warm.

Each setting is timed twice over the same samples in the same order: cold, right after the cache's
data files are dropped from the page cache (posix_fadvise DONTNEED), then warm. Both are compared
with a memcpy of the same records (page mode: of as many bytes as its crops deliver) on one core: the least any loader must do, since a batch must end
up in one buffer per field, so the physical limit of reading from RAM. Imports torch, so the CLI
imports this module only inside the command.
"""
from __future__ import annotations

import gc
import os
import platform
import time

import numpy as np
from torch.utils.data import DataLoader

from east_cache.augment import Augment
from east_cache.errors import CacheError
from east_cache.reader import BlockSampler, CacheDataset, WorkerLoader, collate, fork_available
from east_cache.reader import batches as epoch_batches  # `batches` is a count here
from east_cache.store.manifest import data_path

SECONDS = 2.0          # default length of a timed pass when --batches is not given
NEAR_BEST = 0.05       # a setting within 5% of the best counts as "as fast" for the recommendation
PROBE_BYTES = 16 << 20  # read to check whether the OS honoured DONTNEED
MEMCPY_BATCH = 8       # records per destination buffer of the memcpy reference (train.py's default batch)
CAN_DROP = hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")


def memcpy_rate(ds: CacheDataset, repeat: int, batch: int = MEMCPY_BATCH) -> float:
    """Samples/s of one core copying the records from the (warm) page cache into a preallocated buffer of
    `batch` records, batch after batch: the least any loader must do, so the physical limit. (A one-record
    buffer would stay in the CPU cache and flatter the reference; a batch buffer, like a loader's, does not.)"""
    if ds.pages:   # as many bytes as an item delivers (or the whole page, where it is smaller), from a page's start
        item = np.dtype((np.void, ds.item_bytes))
        images = [ds.file_records(f)[r]["image"] for i in range(len(ds)) for f, r in [ds.locate(i, 0)]]
        rows = [(a[:ds.item_bytes] if a.size >= ds.item_bytes else np.resize(a, ds.item_bytes)).view(item)
                for a in images]
    else:
        item = ds.dtype
        rows = [ds.file_records(f)[r:r + 1] for i in range(len(ds)) for f, r in [ds.locate(i, 0)]]
    dst = np.empty(batch, item)

    def copy_all() -> None:
        for k, src in enumerate(rows):
            np.copyto(dst[k % batch:k % batch + 1], src)
    copy_all()   # fault in dst and the maps' pages
    t0 = time.perf_counter()
    for _ in range(repeat):
        copy_all()
    return repeat * len(rows) / (time.perf_counter() - t0)


def default_workers() -> list[int]:
    """0, 1, 2, 4, ... up to the core count (the core count itself included)."""
    n, out, w = os.cpu_count() or 1, [0], 1
    while w < n:
        out.append(w)
        w *= 2
    return out + [n]


def drop_page_cache(paths) -> None:
    """Ask the kernel to forget the files' cached pages. Pages mapped by a live process stay."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _read_seconds(paths, limit: int) -> float:
    t0, left = time.perf_counter(), limit
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            off = 0
            while left > 0 and (block := os.pread(fd, min(1 << 20, left), off)):
                off, left = off + len(block), left - len(block)
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def probe_drop(paths) -> str:
    """Time a read right after DONTNEED against the same read warm: tmpfs and some containers ignore it."""
    drop_page_cache(paths)
    cold = _read_seconds(paths, PROBE_BYTES)
    warm = _read_seconds(paths, PROBE_BYTES)
    verdict = "honoured" if cold > 2 * warm else "apparently NOT honoured (tmpfs? then cold = warm)"
    probed = min(PROBE_BYTES, _size(paths)) / 1e6
    return (f"fadvise DONTNEED issued before each cold pass; {verdict}: re-reading {probed:.1f} MB "
            f"took {cold * 1e3:.1f} ms after the drop, {warm * 1e3:.1f} ms warm")


def _size(paths) -> int:
    return sum(os.path.getsize(p) for p in paths)


class Order:
    """Sample indices of one pass, `count` of them: BlockSampler's epochs 0, 1, ... in turn, so that every pass
    reads the same samples in the same order (the warm pass re-reads what the cold pass read). With the batch
    strategy, whole file-batches are shuffled (so a batch is one read)."""

    def __init__(self, n: int, block: int):
        self.blocks, self.count = BlockSampler(n, block), 0

    def __iter__(self):
        k, epoch = 0, 0
        while self.blocks.n > 0 and k < self.count:
            self.blocks.set_epoch(epoch)
            for i in self.blocks:
                if k >= self.count:
                    return
                yield i
                k += 1
            epoch += 1


def timed_pass(loader, order: Order, batch: int, batches: int | None) -> tuple[int, float]:
    """(batches read, seconds). Without a batch count, runs for about SECONDS. With no worker processes the
    batches come as train.py reads them: one ahead, from a thread of this process (east_cache.reader.prefetch)."""
    order.count = batches * batch if batches else 1 << 62
    n, t0 = 0, time.perf_counter()
    it = epoch_batches(loader)
    for _ in it:
        n += 1
        if n == batches or (not batches and n >= 2 and time.perf_counter() - t0 >= SECONDS):
            break
    if hasattr(it, "close"):
        it.close()
    return n, time.perf_counter() - t0


def measure(cache, workers: int, batch: int, batches: int | None, paths,
            augment: dict | None = None) -> tuple[float | None, float]:
    """(cold samples/s or None, warm samples/s) of one setting, on a fresh Dataset with nothing mapped yet, its crops
    drawn by the cache's build values changed by augment (Augment fields)."""
    ds = CacheDataset(cache, check_stale=False, compact=True)   # page mode: the items train.py reads
    ds.augment = Augment.of_cache(ds.config, **(augment or {}))
    c = ds.config
    order = Order(len(ds), c.batch_size if c.strategy == "batch" else 1)
    if workers and fork_available():   # train.py's worker processes
        loader = WorkerLoader(ds, order, batch, workers)
    else:
        loader = DataLoader(ds, batch_size=batch, sampler=order, num_workers=workers, collate_fn=collate,
                            persistent_workers=workers > 0)
    order.count = batch   # a first batch starts the workers, so neither timed pass pays for their start-up
    for _ in loader:
        pass
    if CAN_DROP:
        drop_page_cache(paths)
    n, secs = timed_pass(loader, order, batch, batches)   # without DONTNEED this pass only warms up
    cold = n * batch / secs if CAN_DROP else None
    n, secs = timed_pass(loader, order, batch, n)
    if isinstance(loader, WorkerLoader):
        loader.close()
    del loader, ds
    gc.collect()   # unmap this setting's files (workers exit), or the next drop would skip mapped pages
    return cold, n * batch / secs


def run(cache, workers: list[int], batch_sizes: list[int], batches: int | None, augment: dict | None = None) -> str:
    ds = CacheDataset(cache, check_stale=False, compact=True)
    ds.augment = Augment.of_cache(ds.config, **(augment or {}))   # refused early where the build froze it
    if len(ds) == 0:
        raise CacheError(f"{cache}: the cache holds no samples; nothing to benchmark")
    for name in ds.files if ds.remote is not None else ():   # a cache at a URL: benchmarked once it is local
        ds.remote.ensure(name)
    paths = [p for f in ds.files for p in ds.manifest.format.stored_files(data_path(ds.cache_dir, f))]   # a zarr file is a directory
    size = ds.item_bytes
    drawn = f" Crops drawn: {ds.aug.describe()}." if ds.pages and ds.config.warps_at_read else ""
    once = memcpy_rate(ds, 1)
    copy = memcpy_rate(ds, max(1, int(0.5 * once / len(ds))))   # about half a second of copying
    del ds
    gc.collect()
    note = probe_drop(paths) if CAN_DROP else "os.posix_fadvise is not available here: cold figures are not available"
    results = [(w, b, *measure(cache, w, b, batches, paths, augment)) for b in batch_sizes for w in workers]
    fmt = lambda r: [f"{r:.1f}", f"{r * size / 1e6:.1f}", f"{r / copy:.3g}"] if r else ["n/a"] * 3  # noqa: E731
    rows = [[w, b, *fmt(cold), *fmt(warm)] for w, b, cold, warm in results]
    rows.append(["memcpy (1 core, warm)", "-", "-", "-", "-", *fmt(copy)])
    header = ["workers", "batch", "cold samples/s", "cold MB/s", "cold x memcpy", "warm samples/s", "warm MB/s",
              "warm x memcpy"]
    # Warm figures decide unless the cache cannot stay in RAM, where every epoch reads cold.
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 1 << 62
    use_cold = CAN_DROP and _size(paths) > ram // 2
    rate = {(w, b): (cold if use_cold else warm) for w, b, cold, warm in results}
    best = max(rate.values())
    near = [k for k, r in rate.items() if r >= (1 - NEAR_BEST) * best]
    w, b = min(near, key=lambda k: (k[0], -rate[k]))
    return "\n".join([
        "workers 0: this process reads, one batch ahead in a thread; N: train.py's worker processes, which cut "
        "batches into shared slots.",
        f"{cache}: {len(paths)} data files, {_size(paths) / 1e6:.1f} MB, {size / 1e6:.2f} MB per sample. "
        f"{platform.machine()}, {os.cpu_count()} cores.{drawn}",
        f"Each setting: {f'{batches} batches' if batches else f'about {SECONDS:.0f} s'} cold, then the same batches "
        f"warm; workers are started before the clock.", note, "", table(header, rows), "",
        f"Recommendation: train.py --workers {w} --batch-size {b} ({rate[(w, b)]:.1f} samples/s "
        f"{'cold' if use_cold else 'warm'}, within {NEAR_BEST:.0%} of the best {best:.1f} with the fewest workers)"])


def table(header: list[str], rows: list[list]) -> str:
    """A GitHub markdown table, the form every benchmark prints (benchmarks/ imports it from here)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
