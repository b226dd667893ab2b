"""Reading from and building to a bucket, measured against a local S3 server (moto, on loopback, in a process of
its own: no network, so these figures show what the code costs around the transfers, not what a real bucket
delivers). Prints markdown tables; asserts nothing.

- transfer: one object of --mib MiB up (an atomic put) and down (ranged reads into a sparse file), MiB/s
- ahead: a reader that spends --compute-ms on each data file of a cache, in epoch order, with files downloaded
  when first read, and with download ahead (Ahead: --ahead files before the reader, --jobs at once)
- epochs: train.py's loader (page-mode cache of --images sample pages, one variant so that every epoch reads every
  file, compact items, --batch-size, read in this process, no model): items/s from the bucket through a fresh
  local cache folder against the same cache on local disk, in the same run, their --timed-epochs epochs read in
  turns; over --epochs epochs, MiB and files
  downloaded per node per epoch with no limit, with the limit at half the cache, and under the node share of two
  nodes (two processes at once, a folder each)

Needs `moto[server]` and s3fs (the dev extra). Without them, prints a note and exits 0.

    python benchmarks/bench_remote.py [--mib 100] [--files 12] [--file-mib 8] [--compute-ms 150] [--ahead 4]
                                      [--jobs 4] [--images 24] [--chunk 1] [--epochs 6] [--timed-epochs 21]
                                      [--batch-size 4]
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
    from east_cache.build.run import build_cache
    from east_cache.location import Location
    from east_cache.build.publish import Publisher
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
    from east_cache.reader.ahead import Ahead
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


def page_cache(images: int, chunk: int, work: Path) -> tuple[Path, str]:
    """A page-mode cache (train.py's default) of `images` document-like pages, one variant (so that every epoch
    reads every file), `chunk` records a file, built locally and copied into the bucket as built: (its folder, its
    URL)."""
    from common import bench_pages

    from east_cache.config import BuildConfig
    from east_cache.location import Location
    from east_cache.build.run import build_cache
    from east_cache.build.publish import Publisher
    cfg = BuildConfig(variants=1, strategy="chunked", chunk_size=chunk)
    build_cache(cfg, [bench_pages(images)], work / "pages", jobs=2, quiet=True)
    loc = Location.parse("s3://bench/pages")
    with Publisher(loc, work / "pages") as pub:
        pub.commit()
    return work / "pages", loc.url


def read_epochs(cache, epochs: int, batch: int, folder: Path | None = None, limit: int = 0, node=None) -> list:
    """[(seconds, items, MiB downloaded, data files downloaded)] per epoch of train.py's loader over cache (a
    folder, or a URL read through a fresh local cache folder), read in this process; node: (node rank, nodes) of a
    node share."""
    return list(each_epoch(cache, epochs, batch, folder, limit, node))


def each_epoch(cache, epochs: int, batch: int, folder: Path | None = None, limit: int = 0, node=None):
    """read_epochs' epochs, each yielded once read (so that two caches' epochs can be read in turns)."""
    from east_cache.reader.loader import make_loader, open_cache
    from east_cache.reader.share import NodeShare
    ds = open_cache(str(cache), False, local_cache=folder, local_cache_limit=limit)
    share = NodeShare(node[1], node[0]) if node else None
    loader = make_loader(ds, batch, True, seed=0, workers=0, share=share)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        before = (ds.remote.downloaded_bytes, ds.remote.downloaded_files) if ds.remote else (0, 0)
        t0 = time.perf_counter()
        items = sum(len(next(iter(b.values()))) for b in loader)
        seconds = time.perf_counter() - t0
        after = (ds.remote.downloaded_bytes, ds.remote.downloaded_files) if ds.remote else (0, 0)
        yield seconds, items, (after[0] - before[0]) / MIB, after[1] - before[1]


def _node(url: str, folder: Path, epochs: int, batch: int, node, results) -> None:
    results.put((node[0], read_epochs(url, epochs, batch, folder, node=node)))


def epoch_tables(images: int, chunk: int, epochs: int, timed_epochs: int, batch: int, work: Path) -> str:
    from multiprocessing import get_context

    from east_cache.store.remote.local_cache import LocalCacheSettings
    from east_cache.store.remote.space import least_limit, size_flag
    local, url = page_cache(images, chunk, work)
    cache_mib = sum(p.stat().st_size for p in (local / "data").iterdir()) / MIB
    files = len(list((local / "data").glob("*.npy")))
    # The two read their epochs in turns (local, bucket, local, ...), so that the machine's drift falls on both;
    # timed_epochs of them, more than the download table shows: a later epoch of a small cache is short to time
    turns = zip(each_epoch(local, timed_epochs, batch), each_epoch(url, timed_epochs, batch, work / "lc"))
    speeds = dict(zip(["local disk", "bucket, through the local cache"], map(list, zip(*turns))))
    heads = [f"epoch {e + 1}" for e in range(epochs)]
    # items/s of the first epoch (files downloaded) and of the later ones together (files local)
    rate = {name: (runs[0][1] / runs[0][0], sum(r[1] for r in runs[1:]) / max(sum(r[0] for r in runs[1:]), 1e-9))
            for name, runs in speeds.items()}
    rows = [[name, *(f"{r:.0f}" for r in rate[name])] for name in speeds]
    rows.append(["bucket / local disk", *(f"{b / a:.2f}" for a, b in zip(*rate.values()))])
    sizes = [sum(p.stat().st_size for p in (local / "data").glob(f"{f.stem}.*"))
             for f in (local / "data").glob("*.npy")]
    half = max(int(cache_mib * MIB) // 2, least_limit(sizes, LocalCacheSettings().at_once))
    share = "half the cache" if half == int(cache_mib * MIB) // 2 else f"{half / cache_mib / MIB:.0%} of the cache"
    runs = {"no limit": speeds["bucket, through the local cache"][:epochs],
            f"limit {size_flag(half)} ({share})": read_epochs(url, epochs, batch, work / "half", half)}
    ctx = get_context("fork")
    results = ctx.Queue()
    nodes = [ctx.Process(target=_node, args=(url, work / f"node{n}", epochs, batch, (n, 2), results))
             for n in range(2)]
    for p in nodes:
        p.start()
    for n, got in sorted(results.get() for _ in nodes):
        runs[f"node share, node {n} of 2"] = got
    for p in nodes:
        p.join()
    fmt = lambda r: f"{r[2]:.0f} MiB, {r[3]} files"  # noqa: E731
    downloaded = [[name, *(fmt(r) for r in got)] for name, got in runs.items()]
    return "\n".join([
        f"A page-mode cache of {images} pages, one variant: {cache_mib:.0f} MiB in {files} data files; batches of "
        f"{batch}, read in this process, no model.", "",
        table(["items/s (train.py's loader)", "epoch 1: files downloaded", f"epochs 2-{timed_epochs}: files local"],
              rows),
        "",
        table(["downloaded per node", *heads], downloaded)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--file-mib", type=int, default=8)
    ap.add_argument("--compute-ms", type=float, default=150.0)
    ap.add_argument("--ahead", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--chunk", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--timed-epochs", type=int, default=21)
    ap.add_argument("--batch-size", type=int, default=4)
    a = ap.parse_args()
    if not (importlib.util.find_spec("moto") and importlib.util.find_spec("s3fs")):
        print("bench_remote.py needs moto[server] and s3fs: pip install -e '.[dev]'")
        return
    from s3 import FAKE_KEYS

    from east_cache.location import Location, filesystem
    server, endpoint = serve_s3()
    os.environ.update(FAKE_KEYS, AWS_ENDPOINT_URL=endpoint)
    try:
        filesystem(Location.parse("s3://bench")).mkdir("bench")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            print(f"{machine()}; a local moto S3 server on loopback, in a process of its own\n")
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
            print()
            print(epoch_tables(a.images, a.chunk, a.epochs, max(a.timed_epochs, a.epochs), a.batch_size, work))
    finally:
        server.terminate()
        server.join()


def serve_s3():
    """moto's server in a child process (so that it does not share this process's interpreter lock with the
    reader being measured): (the process, its URL)."""
    from multiprocessing import get_context

    from s3 import start_s3_server
    ctx = get_context("fork")
    ready = ctx.Queue()

    def serve() -> None:
        _, endpoint = start_s3_server()
        ready.put(endpoint)
        while True:
            time.sleep(3600)
    process = ctx.Process(target=serve, daemon=True)
    process.start()
    return process, ready.get(timeout=60)


if __name__ == "__main__":
    main()
