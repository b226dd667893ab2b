"""Page image codecs, raw and jpeg (its default 4:2:0 chroma, and 4:4:4), side by side in one run: what a cache takes on disk, what its build costs, how
fast its crops are read, and the image error jpeg adds. Prints markdown tables; asserts nothing.

Data: camera photos (common.bench_photos: 12 MP and A4 phone-like JPEGs; default build settings, crops of 1024 and
512 px), ICDAR-like street photos (common.bench_street_photos: 1280 x 720 JPEGs; --image-size 1280 --input-size
512) and the built-in sample pages (1536 x 2048; default settings). Each set is built in both codecs; every
measurement alternates the codecs --repeat times (the machine may be shared): medians, and ranges in brackets.
Pages as --geometry says (default read: stored resized, each crop warped by the reader; build: pre-warped pages,
read as slices or decoded tiles); benchmarks/bench_geometry.py sets the two side by side.

- size: bytes on disk (data files and word sidecars) per image, over the source image's bytes;
- build: s/image of a real one-job build (decode, warp, words, encode, pack) and its ratio to make_page alone
  (the floor: decode, warp and maps, nothing stored);
- read: crops/s of train.py's compact items, in this process (items and collate: a jpeg crop's tiles decoded and
  its maps drawn into the batch) and through train.py's slot workers (1 and 2), with the workers' crops per CPU
  second (per core, whatever else the machine runs); and the ratio jpeg / raw;
- error: PSNR (worst crop, median) and max abs of the jpeg cache's crops against the raw cache's crops of the same
  epochs, and whether their score, geometry and ROI are bit-identical.

    python benchmarks/bench_codec.py [--photos 6] [--streets 10] [--pages 6] [--repeat 3] [--epochs 8]
        [--batch-size 4] [--geometry read]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from common import BENCH_DATA, bench_photos, bench_street_photos, machine, table, train_loader, write_sample_dataset

from east_cache.config import GEOMETRY_MODES, BuildConfig
from east_cache.ingest.ufo import load_splits
from east_cache.reader import CacheDataset
from east_cache.reader.expand import batch_len
from east_cache.sample.page import make_page
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.sidecar import quads_path
from east_cache.tools.info import disk_bytes

CODECS = {"raw": {"image_codec": "raw"}, "jpeg": {"image_codec": "jpeg"},   # each codec's build options
          "jpeg 4:4:4": {"image_codec": "jpeg", "image_chroma": "444"}}
TARGETS = ("score", "geo", "roi")


@dataclasses.dataclass
class DataSet:
    label: str
    root: Path
    cfg: BuildConfig
    crops: tuple[int, ...]        # crop sides read (the first is the build's)


def data_sets(a) -> list[DataSet]:
    pages = write_sample_dataset(BENCH_DATA / f"codec-sample-{a.pages}", n_images=a.pages, seed=0,
                                 page_size=(1536, 2048))
    g = a.geometry
    return [DataSet("camera photos", bench_photos(a.photos), BuildConfig(geometry=g), (1024, 512)),
            DataSet("ICDAR-like photos", bench_street_photos(a.streets),
                    BuildConfig(image_size=1280, input_size=512, geometry=g), (512,)),
            DataSet("sample pages", pages, BuildConfig(geometry=g), (1024,))]


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """median [min-max] of values, or the value alone."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def cache_bytes(out: Path) -> int:
    paths = [data_path(out, f.name) for f in Manifest.load(out).files]
    return sum(disk_bytes(p) + disk_bytes(quads_path(p)) for p in paths)


def folder(work: Path, codec: str, size: int) -> Path:
    return work / f"{codec.replace(' ', '-').replace(':', '')}-{size}"


def build(s: DataSet, codec: str, size: int, work: Path) -> float:
    """Seconds of a one-job build of the set in a codec at a crop size, into its folder in work (made anew)."""
    out = folder(work, codec, size)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    build_cache(dataclasses.replace(s.cfg, input_size=size, **CODECS[codec]), [s.root], out, jobs=1, quiet=True)
    return time.perf_counter() - t0


def floor_seconds(records, cfg: BuildConfig) -> float:
    """Seconds make_page takes for every image (variant 0)."""
    t0 = time.perf_counter()
    for rec in records:
        make_page(rec, cfg, 0)
    return time.perf_counter() - t0


def worker_cpu(loader) -> float:
    """CPU seconds the loader's worker processes have run (the kernel's scheduler statistics: nanoseconds)."""
    total = 0
    for p in loader._procs:
        with open(f"/proc/{p.pid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def read_rates(cache: Path, workers: int, epochs: int, batch: int) -> tuple[float, float]:
    """(crops/s wall, crops per CPU second of the reading processes) of train.py's compact items over `epochs`
    epochs after one to warm up: in this process (workers 0), or through that many slot workers."""
    ds = CacheDataset(cache, compact=True)
    sampler, loader = train_loader(ds, batch, workers)
    try:
        sampler.set_epoch(0)
        for _ in loader:
            pass
        cpu0 = worker_cpu(loader) if workers else time.process_time()
        t0, n = time.perf_counter(), 0
        for e in range(1, epochs + 1):
            sampler.set_epoch(e)
            for b in loader:
                n += batch_len(b)
        wall = time.perf_counter() - t0
        cpu = (worker_cpu(loader) if workers else time.process_time()) - cpu0
    finally:
        if workers:
            loader.close()
    return n / wall, n / max(cpu, 1e-9)


def image_error(raw: Path, jpeg: Path, epochs: int) -> dict:
    """PSNR per crop and max abs error of jpeg crops against raw crops, and whether the targets are identical."""
    a, b = CacheDataset(raw), CacheDataset(jpeg)
    psnr, worst_abs, same, crops = [], 0, True, 0
    for e in range(epochs):
        a.set_epoch(e)
        b.set_epoch(e)
        for i in range(len(a)):
            x, y = a[i], b[i]
            same &= all(x[k].tobytes() == y[k].tobytes() for k in TARGETS)
            d = x["image"].astype(np.int16) - y["image"]
            mse = float(np.mean(d.astype(np.float64) ** 2))
            psnr.append(np.inf if mse == 0 else 10 * np.log10(255 ** 2 / mse))
            worst_abs, crops = max(worst_abs, int(np.abs(d).max())), crops + 1
    return {"crops": crops, "worst": min(psnr), "median": statistics.median(psnr), "max_abs": worst_abs, "same": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=6, help="camera photos (default 6)")
    ap.add_argument("--streets", type=int, default=10, help="ICDAR-like street photos (default 10)")
    ap.add_argument("--pages", type=int, default=6, help="sample pages (default 6)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement, codecs alternated (default 3)")
    ap.add_argument("--epochs", type=int, default=8, help="epochs of crops read per measurement (default 8)")
    ap.add_argument("--batch-size", type=int, default=4, help="crops per batch when reading (default 4)")
    ap.add_argument("--geometry", choices=GEOMETRY_MODES, default=BuildConfig.geometry,
                    help="the builds' --geometry (default read, the build's: each epoch's height, rotation and crop "
                         "warped by the reader; build: pre-warped pages, sliced or their tiles decoded)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-codec-"))
    sizes, reads, errors, done = [], [], [], {}
    try:
        for s in data_sets(a):
            records, _ = load_splits([s.root], "train", s.cfg)
            source = sum(os.path.getsize(r.path) for r in records) / len(records)
            seconds = {c: [] for c in CODECS}
            floor = []
            for _ in range(a.repeat):
                floor.append(floor_seconds(records, dataclasses.replace(s.cfg, input_size=s.crops[0])) / len(records))
                for codec in CODECS:
                    seconds[codec].append(build(s, codec, s.crops[0], work) / len(records))
            for codec in CODECS:
                per_image = cache_bytes(folder(work, codec, s.crops[0])) / len(records)
                ratio = [t / f for t, f in zip(seconds[codec], floor)]
                sizes.append([s.label, str(len(records)), f"{source / 2**20:.3f}", codec, f"{per_image / 2**20:.3f}",
                              f"{per_image / source:.2f}", spread(seconds[codec], "{:.3f}"), spread(ratio, "{:.2f}")])
                done[(s.label, "size", codec)] = per_image / source
            for size in s.crops:
                for codec in CODECS:
                    if size != s.crops[0]:
                        build(s, codec, size, work)
                rates = {(c, w): [] for c in CODECS for w in (0, 1, 2)}
                for _ in range(a.repeat):
                    for w in (0, 1, 2):
                        for codec in CODECS:
                            rates[(codec, w)].append(read_rates(folder(work, codec, size), w, a.epochs, a.batch_size))
                for codec in CODECS:
                    row = [f"{s.label}, {size} px", codec]
                    for w in (0, 1, 2):
                        row.append(spread([r[0] for r in rates[(codec, w)]]))
                    per_core = [r[1] for w in (1, 2) for r in rates[(codec, w)]]
                    row.append(spread(per_core))
                    ratio = [j[0] / r[0] for j, r in zip(rates[(codec, 1)], rates[("raw", 1)])]
                    row.append(spread(ratio, "{:.2f}") if codec != "raw" else "")
                    reads.append(row)
                    done[(s.label, size, codec)] = statistics.median(per_core)
                for codec in CODECS:
                    if codec == "raw":
                        continue
                    e = image_error(folder(work, "raw", size), folder(work, codec, size), a.epochs)
                    errors.append([f"{s.label}, {size} px", codec, str(e["crops"]), f"{e['worst']:.1f}",
                                   f"{e['median']:.1f}", str(e["max_abs"]), "yes" if e["same"] else "NO"])
                    done[(s.label, size, codec, "same")] = e["same"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Machine: {machine()}; --geometry {a.geometry}; {a.repeat} run(s) of each measurement, codecs "
          f"alternated: median [min-max].\n")
    print("### Size on disk and build cost\n")
    print(table(["data", "images", "source MiB / image", "codec", "cache MiB / image", "cache / source",
                 "build s / image", "build / make_page floor"], sizes))
    print("\n### Read speed of train.py's crops (compact items)\n")
    print(table(["data, crop", "codec", "in process crops/s", "1 worker crops/s", "2 workers crops/s",
                 "workers' crops per CPU s (per core)", "/ raw, 1 worker"], reads))
    print("\n### Image error of jpeg crops against raw crops (targets compared bit for bit)\n")
    print(table(["data, crop", "codec", "crops", "worst PSNR dB", "median PSNR dB", "max abs", "targets identical"],
                errors))
    print("\n### The issue's targets\n")
    same = all(v for k, v in done.items() if k[-1] == "same")
    rows = [["jpeg cache of camera photos / the photos' bytes", "<= 1",
             f"{done[('camera photos', 'size', 'jpeg')]:.2f}"],
            ["jpeg cache of ICDAR-like photos / the photos' bytes", "<= 2.5",
             f"{done[('ICDAR-like photos', 'size', 'jpeg')]:.2f}"],
            ["score, geometry, ROI of jpeg crops vs raw crops", "bit-identical", "yes" if same else "NO"],
            [f"jpeg crops at 1024 px per CPU second of the slot workers (--geometry {a.geometry})",
             ">= 100 (pre-warped pages; warped at read: >= 50, issue 32)",
             f"{done[('camera photos', 1024, 'jpeg')]:.0f}"]]
    print(table(["what", "goal", "measured"], rows))

if __name__ == "__main__":
    main()
