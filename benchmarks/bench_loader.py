"""Loader throughput per strategy against a memcpy of the same bytes and the on-the-fly Dataset; the
share of a training loop spent waiting for data (main process, prefetch thread, worker processes);
build time with 1 and 2 jobs; all of it on --crop build caches (crop records). Prints markdown tables; asserts
nothing.

    python benchmarks/bench_loader.py [--images 24] [--input-size 1024] [--workers 2] [--batch-size 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

from common import bench_pages, machine, memcpy_rate, table, train_loader
from torch.utils.data import DataLoader

from east_cache.reader import CacheDataset, OnTheFlyDataset, collate, make_sampler, prefetch
from east_cache.config import STRATEGIES, BuildConfig
from east_cache.ingest.ufo import load_splits
from east_cache.sample.make import make_sample
from east_cache.build.run import build_cache

MEMCPY_TRIES = 3     # the reference is the best of these: a limit, so noise from other processes should not lower it
WARM_SECONDS = 1.0   # s of untimed epochs first: the first reads in a process run several times slower
MIN_SECONDS = 2.0    # s; each loader figure covers at least this long


def batches(ds, workers: int, batch_size: int, threaded: bool):
    """A loader over ds, shuffled as train.py shuffles it (whole batch files for the batch strategy); threaded:
    workers=0 read ahead by east_cache.reader.prefetch's thread, train.py's default for these caches. Worker processes: for a
    cache, train.py's (east_cache/reader/workers.py, batches cut into shared slots); for the on-the-fly Dataset, DataLoader's."""
    if isinstance(ds, CacheDataset):
        sampler, loader = train_loader(ds, batch_size, workers)
    else:
        sampler = make_sampler(ds, batch_size, shuffle=True, seed=0)
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                            persistent_workers=workers > 0, sampler=sampler)

    def epoch():
        sampler.set_epoch(ds.epoch)
        return prefetch(loader) if threaded else iter(loader)
    return epoch


def loader_rate(ds, workers: int, batch_size: int, epochs: int, threaded: bool = False) -> float:
    """Samples/s over at least `epochs` whole epochs and MIN_SECONDS, after WARM_SECONDS of warm-up epochs
    (page cache warm, maps faulted in, workers started, batch buffers pooled)."""
    epoch = batches(ds, workers, batch_size, threaded)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARM_SECONDS:
        for _ in epoch():
            pass
    t0, n, e = time.perf_counter(), 0, 0
    while e < epochs or time.perf_counter() - t0 < MIN_SECONDS:
        ds.set_epoch(e)
        for batch in epoch():
            n += len(batch["image"])
        e += 1
    return n / (time.perf_counter() - t0)


def wait_share(ds, workers: int, batch_size: int, step_s: float, threaded: bool) -> float:
    """Share of a training loop's time spent waiting for the next batch, when each step spends
    step_s off the CPU (sleeping, as the host does while the GPU runs a step)."""
    epoch = batches(ds, workers, batch_size, threaded)
    for _ in epoch():
        pass
    waited, t0 = 0.0, time.perf_counter()
    it = epoch()
    while True:
        t = time.perf_counter()
        batch = next(it, None)
        waited += time.perf_counter() - t
        if batch is None:
            break
        time.sleep(step_s)
        del batch
    return waited / (time.perf_counter() - t0)


def _make_samples(cfg: BuildConfig, records: list) -> None:
    for r in records:
        make_sample(r, cfg, 0)


def sample_seconds(cfg: BuildConfig, records: list, procs: int) -> float:
    """The reference for the build's speed-up: the build's sample-making alone (no joblib, no files), its
    images split over `procs` plain forked processes. What 2 cores give this work is its ceiling."""
    with get_context("fork").Pool(procs) as pool:
        pool.starmap(_make_samples, [(cfg, records[:1])] * procs)   # imports and first calls, untimed
        t0 = time.perf_counter()
        pool.starmap(_make_samples, [(cfg, records[k::procs]) for k in range(procs)])
        return time.perf_counter() - t0


def build_seconds(cfg: BuildConfig, data: Path, out: Path, jobs: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    build_cache(cfg, [data], out, jobs=jobs, quiet=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=24, help="sample pages (default 24)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per strategy (default 3)")
    p.add_argument("--step-ms", type=float, default=100, help="simulated device time per step (default 100)")
    p.add_argument("--build-images", type=int, default=64, help="pages of the 1-vs-2-job build timing (default 64)")
    p.add_argument("--build-repeat", type=int, default=3, help="builds per job count; the median counts (default 3)")
    a = p.parse_args()
    data = bench_pages(a.images)
    # --crop build: the four strategies' crop records, read against a memcpy of those records; page-mode reads
    # (--crop read) are measured by bench_crops and bench_peers against a memcpy of the bytes they deliver.
    cfg = BuildConfig(input_size=a.input_size, strategy="chunked", batch_size=a.batch_size,
                      chunk_size=max(1, a.images // 3), crop="build")
    work = Path(tempfile.mkdtemp(prefix="east-bench-loader-"))
    try:
        build_data = bench_pages(a.build_images)
        build_cfg = BuildConfig(**{**cfg.to_dict(), "chunk_size": max(1, a.build_images // 8)})
        builds = [statistics.median(build_seconds(build_cfg, build_data, work / "build", jobs)
                                    for _ in range(a.build_repeat)) for jobs in (1, 2)]
        records, _ = load_splits([build_data], "train", build_cfg)
        alone = [statistics.median(sample_seconds(build_cfg, records, n) for _ in range(a.build_repeat))
                 for n in (1, 2)]
        rows, copy = [], None
        readers = (("main process", 0, False), ("main process + prefetch thread", 0, True),
                   (f"{a.workers} worker processes", a.workers, False))
        for s in STRATEGIES:
            out = work / s
            build_cache(BuildConfig(**{**cfg.to_dict(), "strategy": s}), [data], out, jobs=2, quiet=True)
            os.sync()   # the build's dirty pages written back now, not while a reader is being timed
            ds = CacheDataset(out)
            copy = copy or max(memcpy_rate(ds, a.epochs, a.batch_size) for _ in range(MEMCPY_TRIES))
            for label, workers, threaded in readers:
                rate = loader_rate(ds, workers, a.batch_size, a.epochs, threaded)
                rows.append([s, label, f"{rate:.1f}", f"{rate * ds.dtype.itemsize / 2**20:.0f}", f"{rate / copy:.2f}"])
        fly = OnTheFlyDataset([data], config=cfg)
        fly_rate = loader_rate(fly, a.workers, a.batch_size, 1)
        mb = ds.dtype.itemsize / 2**20
        print(f"Machine: {machine()}. {a.images} pages of ~120 words, input {a.input_size}, map scale "
              f"{cfg.map_scale}, batch {a.batch_size}, warm page cache, {mb:.1f} MB per sample.\n")
        rows.append(["memcpy of the same records into a batch buffer", "1 core", f"{copy:.1f}", f"{copy * mb:.0f}",
                     "1.00"])
        rows.append(["on-the-fly Dataset (same code, no cache)", f"{a.workers} workers", f"{fly_rate:.1f}",
                     f"{fly_rate * mb:.0f}", f"{fly_rate / copy:.3f}"])
        print(table(["reader", "loading in", "samples/s", "MB/s", "x memcpy"], rows))
        best = max(float(r[2]) for r in rows[:-2])
        print(f"\nCache vs on-the-fly: {best / fly_rate:.0f}x (best strategy)\n")
        ds = CacheDataset(work / "batch")
        waits = [[label, f"{100 * wait_share(ds, w, a.batch_size, a.step_ms / 1000, t):.1f} %"]
                 for label, w, t in (("main process", 0, False), ("main process + prefetch thread", 0, True),
                                     (f"{a.workers} workers", a.workers, False))]
        print(f"Data wait, batch strategy, each step {a.step_ms:.0f} ms off the CPU (a GPU step's host view):\n")
        print(table(["loading in", "share of loop time waiting for data"], waits))
        print()
        print(f"Build from scratch: {a.build_images} pages, {build_data.name}, {build_cfg.strategy} files of "
              f"{build_cfg.chunk_size}; median of {a.build_repeat}, process pool start-up included. Reference: "
              f"the same make_sample calls alone (no joblib, no files) in 1 and 2 plain forked processes, "
              f"what this machine's cores give that work.\n")
        print(table(["build", "seconds", "speed-up"],
                    [["1 job", f"{builds[0]:.1f}", "1.00"], ["2 jobs", f"{builds[1]:.1f}", f"{builds[0] / builds[1]:.2f}"],
                     ["make_sample alone, 1 process", f"{alone[0]:.1f}", "1.00"],
                     ["make_sample alone, 2 processes", f"{alone[1]:.1f}", f"{alone[0] / alone[1]:.2f}"]]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
