"""Loader throughput per strategy against a memcpy of the same bytes and the on-the-fly Dataset; the
share of a training loop spent waiting for data (main process, prefetch thread, worker processes);
build time with 1 and 2 jobs. Prints markdown tables; asserts nothing.

    python benchmarks/bench_loader.py [--images 24] [--input-size 1024] [--workers 2] [--batch-size 8]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from torch.utils.data import DataLoader

from common import bench_pages, machine, memcpy_rate, table
from dataset import CacheDataset, OnTheFlyDataset, collate, prefetch
from preprocess.build import build_cache
from preprocess.config import STRATEGIES, BuildConfig


def batches(ds, workers: int, batch_size: int, threaded: bool):
    """A DataLoader over ds; threaded: workers=0 read ahead by dataset.prefetch's thread."""
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, shuffle=True)
    return (lambda: prefetch(loader)) if threaded else (lambda: iter(loader))


def loader_rate(ds, workers: int, batch_size: int, epochs: int, threaded: bool = False) -> float:
    """Samples/s over whole epochs, after one warm-up epoch (page cache warm, workers started)."""
    epoch = batches(ds, workers, batch_size, threaded)
    for _ in epoch():
        pass
    t0, n = time.perf_counter(), 0
    for e in range(epochs):
        ds.set_epoch(e)
        for batch in epoch():
            n += len(batch["image"])
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=24, help="sample pages (default 24)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per strategy (default 3)")
    p.add_argument("--step-ms", type=float, default=100, help="simulated device time per step (default 100)")
    a = p.parse_args()
    data = bench_pages(a.images)
    cfg = BuildConfig(input_size=a.input_size, batch_size=a.batch_size, chunk_size=max(1, a.images // 3))
    work = Path(tempfile.mkdtemp(prefix="east-bench-loader-"))
    try:
        builds = []
        for jobs in (1, 2):
            t0 = time.perf_counter()
            build_cache(cfg, [data], work / f"build-j{jobs}", jobs=jobs, quiet=True)
            builds.append(time.perf_counter() - t0)
        rows, copy = [], None
        for s in STRATEGIES:
            out = work / s
            build_cache(BuildConfig(**{**cfg.to_dict(), "strategy": s}), [data], out, jobs=2, quiet=True)
            ds = CacheDataset(out)
            copy = copy or memcpy_rate(ds, a.epochs)
            for label, workers in (("main process", 0), (f"{a.workers} workers", a.workers)):
                rate = loader_rate(ds, workers, a.batch_size, a.epochs)
                rows.append([s, label, f"{rate:.1f}", f"{rate * ds.dtype.itemsize / 2**20:.0f}", f"{rate / copy:.2f}"])
        fly = OnTheFlyDataset([data], config=cfg)
        fly_rate = loader_rate(fly, a.workers, a.batch_size, 1)
        mb = ds.dtype.itemsize / 2**20
        print(f"Machine: {machine()}. {a.images} pages of ~120 words, input {a.input_size}, map scale "
              f"{cfg.map_scale}, batch {a.batch_size}, warm page cache, {mb:.1f} MB per sample.\n")
        rows.append(["memcpy of the same records", "1 core", f"{copy:.1f}", f"{copy * mb:.0f}", "1.00"])
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
        print(table(["build", "seconds", "speed-up"],
                    [["1 job", f"{builds[0]:.1f}", "1.00"], ["2 jobs", f"{builds[1]:.1f}", f"{builds[0] / builds[1]:.2f}"]]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
