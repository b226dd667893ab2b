"""zarr against npy chunk files over the same pages: size on disk per field and in total, build time, and
Dataset + DataLoader samples/s, in one run (--crop build caches: zarr holds crop records only). Prints markdown tables; asserts nothing.

    python benchmarks/bench_zarr.py [--images 24] [--input-size 1024] [--chunk-size 8] [--jobs 2] [--workers 2]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_loader import loader_rate
from common import bench_pages, machine, table

from east_cache.reader import CacheDataset
from east_cache.config import BuildConfig
from east_cache.build.run import build_cache
from east_cache.store.formats import FILE_FORMATS
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.sidecar import quads_path

MIB = 2**20


def sizes(out: Path) -> dict[str, int]:
    """Bytes on disk per field, word quads and total. A .npy file interleaves the fields, so a field's
    share is its bytes per record times the rows; a zarr group keeps each field in its own shard."""
    m = Manifest.load(out)
    paths = [data_path(out, f.name) for f in m.files]
    rows = sum(f.rows for f in m.files)
    dtype, stored_files = m.spec.dtype, m.format.stored_files
    if m.file_format == "zarr":
        per_field = {k: sum(q.stat().st_size for p in paths for q in stored_files(p / k)) for k in dtype.names}
    else:
        per_field = {k: rows * dtype[k].itemsize for k in dtype.names}
    quads = sum(quads_path(p).stat().st_size for p in paths)
    total = sum(q.stat().st_size for p in paths for q in stored_files(p)) + quads
    return {**per_field, "word quads": quads, "total": total}


def build_seconds(cfg: BuildConfig, data: Path, out: Path, jobs: int, fmt: str, repeat: int) -> float:
    """Median seconds of a build from scratch. One more build runs first, uncounted: it warms the page
    cache with the source images and starts the workers, which would otherwise tax whichever goes first."""
    times = []
    for _ in range(repeat + 1):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        build_cache(cfg, [data], out, jobs=jobs, quiet=True, file_format=fmt)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=24, help="sample pages (default 24)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--chunk-size", type=int, default=8, help="samples per chunk file (default 8)")
    p.add_argument("--jobs", type=int, default=2, help="build jobs (default 2)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per format (default 3)")
    p.add_argument("--repeat", type=int, default=2, help="timed builds per format (default 2)")
    a = p.parse_args()
    data = bench_pages(a.images)
    cfg = BuildConfig(input_size=a.input_size, strategy="chunked", chunk_size=a.chunk_size,
                      crop="build")  # zarr holds crop records only
    work = Path(tempfile.mkdtemp(prefix="east-bench-zarr-"))
    try:
        size, speed = {}, []
        for fmt in FILE_FORMATS:
            seconds = build_seconds(cfg, data, work / fmt, a.jobs, fmt, a.repeat)
            size[fmt] = sizes(work / fmt)
            rate = loader_rate(CacheDataset(work / fmt), a.workers, a.batch_size, a.epochs)
            speed.append([fmt, f"{seconds:.1f}", f"{rate:.1f}"])
        print(f"Machine: {machine()}. {a.images} pages of ~120 words, input {a.input_size}, map scale {cfg.map_scale}, "
              f"chunks of {a.chunk_size}, {a.jobs} build jobs; DataLoader: batch {a.batch_size}, {a.workers} workers, "
              f"shuffled, warm page cache.\n")
        print(table(["on disk", "npy MiB", "zarr MiB", "npy / zarr"],
                    [[k, f"{size['npy'][k] / MIB:.2f}", f"{size['zarr'][k] / MIB:.2f}",
                      f"{size['npy'][k] / max(1, size['zarr'][k]):.1f}"] for k in size["npy"]]))
        print()
        print(table(["format", f"build s (from scratch, median of {a.repeat})", "DataLoader samples/s"], speed))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
