"""Reading speed against the tools users would otherwise feed a training loop with: the same records written and
read with LitData, Mosaic Streaming, Hugging Face datasets, WebDataset, LMDB, a pickle or np.save files per sample
and one pickle in RAM, and this project's reader as train.py uses it (CacheDataset, its sampler and collate, the
batches one ahead from a thread). Prints markdown tables; asserts nothing.

Warm page cache, reading in the main process (no DataLoader workers), batches of --batch-size. Every reader
materialises its batch: contiguous arrays or tensors of its own (peers.py), each touched once per page. One
warm-up epoch per reader, then --rounds rounds; in each, a memcpy of the same records into a batch buffer
(east_cache.inspect.bench.memcpy_rate, the physical limit) and one epoch per reader, in an order that rotates
from round to round. A reader's figure is its epochs' samples/s over its round's memcpy: median [min-max].

Needs the optional extra, in an environment of its own (see peers.py for why Mosaic Streaming runs without
torchvision): `pip install -e ".[peers]"`. Without it, prints a note and exits 0.

    python benchmarks/bench_peers.py [--records 96] [--rounds 5] [--batch-size 8] [--input-size 1024]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, bench_pages, machine, memcpy_rate, table, train_loader

PAGE = 4096   # bytes; a touch reads one byte per page
# (label, format name, how it is read)
PEERS = (
    ("LitData", "litdata", "optimize + StreamingDataset, StreamingDataLoader"),
    ("Mosaic Streaming", "mds", "MDSWriter + StreamingDataset (local), DataLoader"),
    ("Hugging Face datasets, stored dtypes", "hf", 'save_to_disk; with_format("numpy", dtype=None)'),
    ("Hugging Face datasets, defaults", "hf", 'save_to_disk; with_format("numpy"): uint8 read as int64'),
    ("WebDataset", "wds", "tar shards of .npy, .decode()"),
    ("LMDB", "lmdb", "pickled dicts"),
    ("pickle per sample", "pickles", "pickle.load"),
    ("np.save per sample", "npy", "one .npy per field, np.load"),
    ("one pickle in RAM", "ram_pickle", "pickle.load once, then items from RAM"),
)
DISTRIBUTIONS = ("litdata", "mosaicml-streaming", "datasets", "webdataset", "lmdb", "torch", "numpy")


OURS = "this project, --crop build (train.py's reader)"
OURS_PAGES = "this project, --crop read (train.py's reader)"
OURS_WORKERS = "this project, --crop read, 2 worker processes (train.py --workers 2)"
WORKERS = 2


def missing_extra() -> str | None:
    """Why the peers cannot run here (the first import that fails), or None."""
    try:
        import datasets  # noqa: F401
        import litdata  # noqa: F401
        import lmdb  # noqa: F401
        import webdataset  # noqa: F401
        from peers import _streaming
        _streaming()
    except ImportError as e:
        return str(e)
    return None


def versions() -> str:
    return ", ".join(f"{d} {importlib.metadata.version(d)}" for d in DISTRIBUTIONS)


def touch(batch: dict) -> tuple[int, int]:
    """(samples, a checksum of one byte per page): every array of the batch is read."""
    total, n = 0, 0
    for v in batch.values():
        a = v.numpy() if hasattr(v, "numpy") else v
        assert a.flags.c_contiguous, "readers hand over contiguous batches"
        total += int(a.reshape(-1).view(np.uint8)[::PAGE].sum())
        n = len(a)
    return n, total


def epoch_rate(epoch, e: int) -> tuple[float, int, float]:
    """(samples/s, samples, seconds to the first batch) of one epoch."""
    t0, n, first = time.perf_counter(), 0, None
    for batch in epoch(e):
        n += touch(batch)[0]
        first = first or time.perf_counter() - t0
    return n / (time.perf_counter() - t0), n, first


def disk_mib(path: Path) -> float:
    blocks = sum(p.stat().st_blocks for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_blocks
    return blocks * 512 / 2**20


def open_ours(cache: Path, batch: int, compact: bool = False, workers: int = 0):
    """This project's reader as train.py feeds from it (compact: a page-mode cache's items as train.py reads them,
    a fresh crop per epoch whose score and geometry the device rebuilds; workers: train.py --workers N)."""
    from east_cache.reader import CacheDataset, batches
    ds = CacheDataset(cache, compact=compact)
    sampler, loader = train_loader(ds, batch, workers)

    def epoch(e: int):
        sampler.set_epoch(e)
        return batches(loader)
    return epoch


def write_all(records, cache: Path, work: Path) -> dict[str, tuple[float, float]]:
    """{format: (write ms per sample, MiB on disk)}."""
    import peers
    out = {}
    for name in dict.fromkeys(n for _, n, _ in PEERS):
        path = work / name
        t0 = time.perf_counter()
        if name == "litdata":
            peers.write_litdata(records, path, cache)
        else:
            getattr(peers, f"write_{name}")(records, path)
        out[name] = ((time.perf_counter() - t0) / len(records) * 1e3, disk_mib(path))
        print(f"wrote {name}: {out[name][0]:.1f} ms per sample", file=sys.stderr, flush=True)
    return out


def open_all(records, cache: Path, work: Path, batch: int) -> dict[str, object]:
    import peers
    n, spec = len(records), records.spec()
    readers = {OURS: open_ours(cache, batch), OURS_PAGES: open_ours(work / "pages", batch, compact=True),
               OURS_WORKERS: open_ours(work / "pages", batch, compact=True, workers=WORKERS)}
    for label, name, _ in PEERS:
        opener = getattr(peers, f"open_{name}")
        if label.endswith("defaults"):
            readers[label] = opener(work / name, n, batch, spec, stored_dtypes=False)
        else:
            readers[label] = opener(work / name, n, batch, spec)
    return readers


def measure(readers: dict, ds, n: int, batch: int, rounds: int, scale: dict) -> tuple[dict, dict, dict, list[float]]:
    """({reader: [samples/s per round]}, {reader: [x memcpy per round]}, {reader: [s to the first batch]},
    [memcpy samples/s per round]); one warm-up epoch each first. scale: {reader: its item's bytes / a record's},
    for a reader whose items are not the records (page mode): its ratio is to a memcpy of its own bytes."""
    for label, epoch in readers.items():
        got = epoch_rate(epoch, 0)[1]
        if got != n:
            raise SystemExit(f"error: {label} read {got} samples in an epoch, not {n}; its figures would be wrong")
    rates, ratios, firsts = ({k: [] for k in readers} for _ in range(3))
    copies, names = [], list(readers)
    for r in range(rounds):
        copy = memcpy_rate(ds, 1, batch)
        copies.append(copy)
        for label in names[r % len(names):] + names[:r % len(names)]:
            rate, _, first = epoch_rate(readers[label], r + 1)
            rates[label].append(rate)
            ratios[label].append(rate / copy * scale.get(label, 1.0))
            firsts[label].append(first)
    return rates, ratios, firsts, copies


def span(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=96, help="records (sample pages) in every store (default 96)")
    p.add_argument("--rounds", type=int, default=9, help="timed epochs per reader, interleaved (default 9)")
    p.add_argument("--batch-size", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024: ~6 MiB records)")
    a = p.parse_args()
    if why := missing_extra():
        print(f"bench_peers: skipped, the peers extra is missing here ({why}). Install it in an environment of its "
              f'own: pip install -e ".[peers]"; see benchmarks/peers.py.')
        return 0
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])  # LitData's workers
    from peers import Records

    from east_cache.reader import CacheDataset
    from east_cache.config import BuildConfig
    from east_cache.build.run import build_cache

    data = bench_pages(a.records)
    cfg = BuildConfig(input_size=a.input_size, batch_size=a.batch_size, crop="build")  # the fixed records
    work = Path(tempfile.mkdtemp(prefix="east-bench-peers-"))
    try:
        t0 = time.perf_counter()
        report = build_cache(cfg, [data], work / "cache", jobs=2, quiet=True)
        build_ms = (time.perf_counter() - t0) / report.samples * 1e3
        build_cache(dataclasses.replace(cfg, crop="read"), [data], work / "pages", jobs=2, quiet=True)
        ds = CacheDataset(work / "cache")
        pages = CacheDataset(work / "pages", compact=True).item_bytes / ds.dtype.itemsize
        scale = {OURS_PAGES: pages, OURS_WORKERS: pages}
        records = Records(ds)
        with contextlib.redirect_stdout(sys.stderr):   # LitData prints its progress: stdout holds the tables
            written = write_all(records, work / "cache", work)
            os.sync()   # every store's dirty pages on disk now, not during a timed epoch
            readers = open_all(records, work / "cache", work, a.batch_size)
            rates, ratios, firsts, copies = measure(readers, ds, len(records), a.batch_size, a.rounds, scale)
        mb = ds.dtype.itemsize / 2**20
        copy = statistics.median(copies)
        print(f"Machine: {machine()}. {len(records)} records of {mb:.1f} MiB (input {a.input_size}: image, score, geo, "
              f"roi), batch {a.batch_size}, warm page cache, read in the main process (no DataLoader workers; "
              f"the one row that says so: {WORKERS} worker processes of this project), one "
              f"warm-up epoch each, {a.rounds} rounds interleaved; memcpy {copy:.0f} samples/s "
              f"({copy * mb:.0f} MiB/s, median of the rounds). The machine may be shared: medians, and noisy.\n")
        print(f"Versions: {versions()}.\n")
        how = {label: h for label, _, h in PEERS}
        fmt = {label: n for label, n, _ in PEERS}
        rows = [["memcpy of the same records into a batch buffer", "np.copyto, 1 core", f"{copy:.1f}", "1.00", "-",
                 "-", "-"]]
        for label, r in sorted(ratios.items(), key=lambda kv: -statistics.median(kv[1])):
            ours = disk_mib(work / ("pages" if label in (OURS_PAGES, OURS_WORKERS) else "cache"))
            w, size = written.get(fmt.get(label), (None, ours))
            rows.append([label, how.get(label, "CacheDataset + sampler + collate, batches one ahead in a thread"
                                if label != OURS_WORKERS else "CacheDataset + sampler; forked workers collate "
                                "into shared batch slots"),
                         f"{statistics.median(rates[label]):.1f}", span(r),
                         f"{statistics.median(firsts[label]) * 1e3:.0f}", f"{w:.1f}" if w is not None else
                         f"{build_ms:.0f} (the build)", f"{size:.0f}"])
        print(table(["reader", "how", "samples/s", "x memcpy, median [min-max]", "first batch ms",
                     "write ms/sample", "MiB on disk"], rows))
        print(f"\nsamples/s and x memcpy cover whole epochs of {len(records)} samples, the wait for the first batch "
              f"included (streaming readers prepare each epoch: with longer epochs that weighs less). This project's "
              f"write time is its build from the source pages (decode, augment, targets, write; 2 jobs): see "
              f"bench_sample for its parts. The others are written from those records. {OURS_PAGES}: the same pages "
              f"built with --crop read (a new crop every epoch); its x memcpy is to a memcpy of the bytes its items "
              f"deliver (image, packed maps, word table), its write time is the --crop build cache's. On a machine with "
              f"{os.cpu_count()} cores, {WORKERS} worker processes share them with the main process.")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
