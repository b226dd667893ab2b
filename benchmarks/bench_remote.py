"""Reading from and building to a bucket, measured against a local S3 server (moto, on loopback: no network, so
these figures show what the code costs around the transfers, not what a real bucket delivers). Prints markdown
tables; asserts nothing.

- transfer: one object of --mib MiB up (an atomic put) and down (ranged reads into a sparse file), MiB/s
- ahead: a reader that spends --compute-ms on each data file of a cache, in epoch order, with files downloaded
  when first read, and with download ahead (Ahead: --ahead files before the reader, --jobs at once)

Needs `moto[server]` and s3fs (the dev extra). Without them, prints a note and exits 0.

    python benchmarks/bench_remote.py [--mib 100] [--files 12] [--file-mib 8] [--compute-ms 150] [--ahead 4]
                                      [--jobs 4]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time
from pathlib import Path

from common import machine, table

MIB = 2**20


def transfer_rates(mib: int, work: Path) -> list[list]:
    from east_cache.location import Location, filesystem
    from east_cache.retry import DEFAULT_RETRY
    from east_cache.store.remote.transfer import download, upload
    src = work / "object"
    src.write_bytes(os.urandom(mib * MIB))
    loc = Location.parse("s3://bench/object")
    t0 = time.perf_counter()
    upload(src, loc, DEFAULT_RETRY, "")
    up = time.perf_counter() - t0
    dst = work / "copy"
    with open(dst, "wb") as f:
        f.truncate(mib * MIB)
    t0 = time.perf_counter()
    download(loc, dst, mib * MIB, DEFAULT_RETRY, "")
    down = time.perf_counter() - t0
    t0 = time.perf_counter()
    filesystem(loc).get_file(loc.url, str(work / "plain"))
    plain = time.perf_counter() - t0
    assert dst.read_bytes() == src.read_bytes()
    return [["upload (transfer.upload: one put)", f"{mib / up:.0f}"],
            ["download (transfer.download: ranged reads, sparse file)", f"{mib / down:.0f}"],
            ["download (s3fs get_file, for comparison)", f"{mib / plain:.0f}"]]


def stored_cache(files: int, file_mib: int, work: Path):
    """A crop cache of `files` files of about file_mib MiB, put in the bucket; (its URL, the local build)."""
    from helpers import TINY

    from east_cache.config import BuildConfig
    from east_cache.store.build import build_cache
    from east_cache.location import Location
    from east_cache.store.remote.publish import Publisher
    from east_cache.tools.sampledata import write_sample_dataset
    per_record = 3 * 512 * 512 + 8 * 256 * 256   # input 512 px, maps at x0.5: image, score, geo (f16 x5), roi
    chunk = max(1, round(file_mib * MIB / per_record))
    data = write_sample_dataset(work / "data", n_images=files * chunk, words_per_page=8, page_size=(640, 480))
    cfg = BuildConfig(**{**TINY, "image_size": 640, "input_size": 512, "map_scale": 0.5, "crop": "build",
                         "strategy": "chunked", "chunk_size": chunk})
    build_cache(cfg, [data], work / "cache", jobs=2, quiet=True)
    loc = Location.parse("s3://bench/cache")
    with Publisher(loc, work / "cache") as pub:
        pub.commit()
    return loc


def epoch_time(loc, folder: Path, compute_s: float, ahead: int, jobs: int) -> tuple[float, float]:
    """(seconds for one pass over the files in order, MiB downloaded by it); ahead 0: each file fetched when the
    reader first asks for it. A file "read" costs compute_s (a sleep: the training step the prefetch hides)."""
    from east_cache.store.remote.ahead import Ahead
    from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
    cache = LocalCache(loc, LocalCacheSettings(folder=folder, ahead=max(ahead, 1), jobs=jobs))
    names = list(cache.units)
    t0 = time.perf_counter()
    if ahead:
        with Ahead(cache, names) as reader:
            for p in range(len(names)):
                reader.wait(p)
                time.sleep(compute_s)
    else:
        for name in names:
            cache.ensure(name)
            time.sleep(compute_s)
    return time.perf_counter() - t0, cache.downloaded_bytes / MIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--file-mib", type=int, default=8)
    ap.add_argument("--compute-ms", type=float, default=150.0)
    ap.add_argument("--ahead", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=4)
    a = ap.parse_args()
    if not (importlib.util.find_spec("moto") and importlib.util.find_spec("s3fs")):
        print("bench_remote.py needs moto[server] and s3fs: pip install -e '.[dev]'")
        return
    from s3 import FAKE_KEYS, start_s3_server

    from east_cache.location import Location, filesystem
    server, endpoint = start_s3_server()
    os.environ.update(FAKE_KEYS, AWS_ENDPOINT_URL=endpoint)
    try:
        filesystem(Location.parse("s3://bench")).mkdir("bench")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            print(f"{machine()}; a local moto S3 server on loopback\n")
            print(table([f"one object of {a.mib} MiB", "MiB/s"], transfer_rates(a.mib, work)))
            loc = stored_cache(a.files, a.file_mib, work)
            compute = a.compute_ms / 1000
            runs = [("download only, fetched when read", 0.0, 0, "alone"),
                    ("fetched when read", compute, 0, "cold"),
                    (f"{a.ahead} ahead, {a.jobs} downloads at once", compute, a.ahead, "ahead"),
                    ("warm: every file local", compute, 0, "cold")]
            rows = []
            for label, seconds_per_file, ahead, folder in runs:
                seconds, mib = epoch_time(loc, work / folder, seconds_per_file, ahead, a.jobs)
                rows.append([label, f"{seconds:.2f}", f"{mib:.0f}", f"{a.files * seconds_per_file:.2f}"])
            print()
            print(table([f"one pass over {a.files} files", "s", "MiB downloaded", "s of it computing"], rows))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
