"""Loader throughput per strategy against a memcpy of the same bytes and the on-the-fly Dataset;
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

from common import bench_pages, machine, table
from dataset import CacheDataset, OnTheFlyDataset, collate
from preprocess.bench import memcpy_rate
from preprocess.build import build_cache
from preprocess.config import STRATEGIES, BuildConfig


def loader_rate(ds, workers: int, batch_size: int, epochs: int) -> float:
    """Samples/s over whole epochs, after one warm-up epoch (page cache warm, workers started)."""
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, shuffle=True)
    for _ in loader:
        pass
    t0, n = time.perf_counter(), 0
    for e in range(epochs):
        ds.set_epoch(e)
        for batch in loader:
            n += len(batch["image"])
    return n / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=24, help="sample pages (default 24)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per strategy (default 3)")
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
        rows = []
        copy = None
        for s in STRATEGIES:
            out = work / s
            build_cache(BuildConfig(**{**cfg.to_dict(), "strategy": s}), [data], out, jobs=2, quiet=True)
            ds = CacheDataset(out)
            copy = copy or memcpy_rate(ds, a.epochs)
            rate = loader_rate(ds, a.workers, a.batch_size, a.epochs)
            rows.append([s, f"{rate:.1f}", f"{rate * ds.dtype.itemsize / 2**20:.0f}", f"{rate / copy:.2f}"])
        fly = OnTheFlyDataset([data], config=cfg)
        fly_rate = loader_rate(fly, a.workers, a.batch_size, 1)
        print(f"Machine: {machine()}. {a.images} pages of ~120 words, input {a.input_size}, map scale "
              f"{cfg.map_scale}, batch {a.batch_size}, {a.workers} DataLoader workers, warm page cache.\n")
        rows.append(["memcpy of the same records (1 core)", f"{copy:.1f}", f"{copy * ds.dtype.itemsize / 2**20:.0f}", "1.00"])
        rows.append(["on-the-fly Dataset (same code, no cache)", f"{fly_rate:.1f}",
                     f"{fly_rate * ds.dtype.itemsize / 2**20:.0f}", f"{fly_rate / copy:.3f}"])
        print(table(["reader", "samples/s", "MB/s", "x memcpy"], rows))
        best = max(float(r[1]) for r in rows[:len(STRATEGIES)])
        print(f"\nCache vs on-the-fly: {best / fly_rate:.0f}x (best strategy)\n")
        print(table(["build", "seconds", "speed-up"],
                    [["1 job", f"{builds[0]:.1f}", "1.00"], ["2 jobs", f"{builds[1]:.1f}", f"{builds[0] / builds[1]:.2f}"]]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
