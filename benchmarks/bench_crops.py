"""What training sees and what it costs, per crop mode: page mode (--crop read, a new crop every epoch: of a page
stored resized only, its height and rotation drawn every epoch too, the default; or of a pre-warped page,
--geometry build, whose height and rotation were drawn once at build time), frozen build-time crops (--crop build,
K = 1 and 4 variants) and the on-the-fly reference (east_cache/reader/onthefly.py, a fresh make_sample every epoch).
Prints markdown tables; asserts nothing. benchmarks/bench_geometry.py sets the two page geometries side by side.

- word coverage: the share of legible words seen whole in at least one training crop after N epochs, on the
  built-in sample set (default build settings) and on a camera-photo-like set (1280 x 720 JPEGs, fewer
  words, --image-size 1280 --input-size 512, the ICDAR 2015 setting); coverage alone, also on dense photo-like
  pages (DENSE_WORDS words) and on camera photos (common.bench_photos, default settings). Page mode's draw weights
  are weighed in the page's warped frames too (sample/page.py warped_frames); the row "upright weights only"
  replays the same draws with weights of the upright page alone, as builds made them before;
- distinct crops per image over 10 epochs, and the share of text-free crops;
- bytes per image per variant and build time per image, both modes (a real build of each set);
- read speed through train.py's feeding path (DataLoader + collate + the prefetch thread; page mode also with
  train.py's worker processes), per mode, as a ratio to one core's memcpy of the bytes a batch delivers,
  timed right after each epoch (this machine's speed drifts between minutes); and what memcpy by as many
  processes as the workers reaches at once, the most those workers could deliver.

    python benchmarks/bench_crops.py [--images 12] [--photos 10] [--dense 20] [--cameras 4] [--epochs 1,5,20,50]
        [--batch-size 8] [--batches 20]
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from common import BENCH_DATA, bench_photos, machine, memcpy_rate, table, train_loader, write_sample_dataset

from east_cache.reader import CacheDataset, batches
from east_cache.reader.expand import batch_len
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import CARE, load_splits
from east_cache.sample.crop_draw import grid_step, word_boxes, word_weights
from east_cache.sample.geometry import gather_quads
from east_cache.sample.make import choose_sample_crop
from east_cache.sample.page import make_page
from east_cache.build.run import build_cache
from east_cache.store.layout import Layout
from east_cache.tools.coverage import build_mode, coverage, page_mode, warped_mode
from east_cache.tools.info import disk_bytes
from east_cache.tools.sampledata import DEFAULT_PAGE_SIZE

DISTINCT_EPOCHS = 10   # "distinct crops per image over 10 epochs"
WORKERS = 2            # train.py --workers of the worker-process rows
LATE = "41,60"         # default epochs (first, last) of the late read-speed columns
PHOTO = dict(image_size=1280, input_size=512)   # the ICDAR 2015 setting of the measurement
DENSE_WORDS = 100      # words per dense photo-like page (the photo-like set has 15)


def data_sets(images: int, photos: int, read: int) -> list[tuple[str, Path, Path, BuildConfig]]:
    """(label, the set the coverage is measured on, a set of `read` images made alike for cost and read speed,
    settings): the read pass needs epochs of several batches, or the batches made ahead would never overlap."""
    def pages(n: int) -> Path:
        return write_sample_dataset(BENCH_DATA / f"crops-sample-{n}-{DEFAULT_PAGE_SIZE[1]}", n_images=n, seed=0,
                                    page_size=DEFAULT_PAGE_SIZE)

    def photo(n: int) -> Path:
        return write_sample_dataset(BENCH_DATA / f"crops-photo-{n}", n_images=n, words_per_page=15,
                                    page_size=(1280, 720), seed=3)
    w, h = DEFAULT_PAGE_SIZE
    return [(f"sample set ({images} x {w}x{h})", pages(images), pages(read), BuildConfig()),
            (f"photo-like ({photos} x 1280x720)", photo(photos), photo(read), BuildConfig(**PHOTO))]


def coverage_sets(dense: int, cameras: int) -> list[tuple[str, Path, BuildConfig]]:
    """(label, set, settings) of the sets whose coverage alone is measured: dense photo-like pages, camera photos."""
    out = []
    if dense:
        out.append((f"dense photo-like ({dense} x 1280x720, {DENSE_WORDS} words)",
                    write_sample_dataset(BENCH_DATA / f"crops-dense-{dense}-{DENSE_WORDS}", n_images=dense,
                                         words_per_page=DENSE_WORDS, page_size=(1280, 720), seed=13),
                    BuildConfig(**PHOTO)))
    if cameras:
        out.append((f"camera photos ({cameras} x 8.7-12 MP)", bench_photos(cameras), BuildConfig()))
    return out


def offsets(names: list[str], variants: int, seed: int) -> np.ndarray:
    """Per-image variant offsets, as a cache of any strategy but batch draws them."""
    return Layout("image", len(names), variants, 1, 1).variant_offsets(names, seed)


def coverage_rows(data: Path, cfg: BuildConfig, epochs: tuple[int, ...]) -> list[list]:
    recs, _ = load_splits([data], "train", cfg)
    names, legible = [r.name for r in recs], [int((r.reason == CARE).sum()) for r in recs]
    resized, upright, warped, prewarped = [], [], [], dataclasses.replace(cfg, geometry="build")
    for r in recs:
        p = make_page(r, cfg, 0, maps=False)
        resized.append([(gather_quads(p.points, p.offsets, p.care > 0), p.size, p.weight)])
        upright.append([(resized[-1][0][0], p.size, word_weights(word_boxes(p.points, p.offsets)[p.care > 0], p.size,
                                                                  cfg.input_size, grid_step(cfg.map_scale)))])
        p = make_page(r, prewarped, 0, maps=False)
        warped.append([(word_boxes(p.points, p.offsets)[p.care > 0], p.size, p.weight)])
    modes = {"page mode (--crop read, geometry drawn every epoch)": warped_mode(names, resized, cfg),
             "the same, upright weights only (the draw weights of builds before the warped frames)":
                 warped_mode(names, upright, cfg),
             "page mode, pre-warped pages (--crop read --geometry build, K=1)": page_mode(
                 names, warped, offsets(names, 1, cfg.seed), cfg.seed, cfg.input_size, grid_step(cfg.map_scale))}
    for k in (1, 4):
        crops = [[np.flatnonzero(choose_sample_crop(r, cfg, v).whole) for v in range(k)] for r in recs]
        modes[f"build-time crops (--crop build, K={k})"] = build_mode(crops, offsets(names, k, cfg.seed))
    modes["on the fly (fresh make_sample per epoch)"] = (
        lambda i, e: (e, np.flatnonzero(choose_sample_crop(recs[i], cfg, e).whole)))
    rows = []
    for label, whole in modes.items():
        c = coverage(legible, whole, epochs)
        distinct = coverage(legible, whole, (DISTINCT_EPOCHS,)).distinct
        rows.append([label, *(f"{s:.1%}" for s in c.seen), f"{distinct:.1f}", f"{c.text_free:.1%}"])
    return rows


def built(data: Path, cfg: BuildConfig, out: Path) -> dict:
    """Build a cache (one job) and measure it: build seconds and disk bytes per image per variant."""
    r = build_cache(cfg, [data], out, jobs=1, quiet=True)
    disk = sum(disk_bytes(p) for p in (out / "data").glob("*.npy"))
    return {"seconds": r.seconds / r.images, "bytes": disk / r.samples}


class Window(NamedTuple):
    """Read speed over a run of epochs: samples/s over all of them, and each epoch's samples/s over a memcpy
    of the same bytes measured right after it (this machine's speed drifts between minutes: a reference
    measured apart, even the best of several, can fall in a faster minute than the epochs it is set against)."""
    rate: float
    ratios: np.ndarray
    memcpy: np.ndarray

    def ratio(self) -> str:
        return f"{np.median(self.ratios):.2f}x [{self.ratios.min():.2f}-{self.ratios.max():.2f}]"


def read_rate(out: Path, batch_size: int, count: int, late: tuple[int, int], compact: bool, workers: int = 0
              ) -> tuple[float, Window, Window, float]:
    """(first epoch samples/s, Window of the epochs after it until `count` batches are read, Window of epochs
    late[0] to late[1] (once every reading process has mapped in its pages and kept their patches), MiB an item
    delivers), through train.py's feeding path: a DataLoader in this process with collate, read one batch ahead
    by batches()'s thread, a new epoch each time round (new crops in page mode). The first epoch is timed apart:
    in it a page-mode reader derives each page's crop draw on its first crop (kept for later epochs).
    compact: page-mode items as train.py reads them (image tiles, maps, word table; score and geometry are made
    on the device, not timed here). workers: train.py --workers N, processes that cut batches into shared slots
    (their start is in the first epoch's time). The memcpy after each timed epoch: one core copying as many
    bytes as an item delivers, for every item (the workers wait meanwhile)."""
    ds = CacheDataset(out, compact=compact)
    sampler, loader = train_loader(ds, batch_size, workers)

    def epoch(e: int) -> tuple[int, float]:
        sampler.set_epoch(e)
        t0 = time.perf_counter()
        n = sum(batch_len(batch) for batch in batches(loader))
        return n, time.perf_counter() - t0

    def window(epochs) -> Window:
        n, seconds, rates, copies = 0, 0.0, [], []
        for e in epochs:
            k, dt = epoch(e)
            n, seconds = n + k, seconds + dt
            rates.append(k / dt)
            copies.append(memcpy_rate(ds, 2))
        return Window(n / seconds, np.array(rates) / copies, np.array(copies))
    n, dt = epoch(0)
    after = 1 + -(-count // len(loader))   # the first epoch after the main window
    main = window(range(1, after))
    for e in range(after, late[0]):
        epoch(e)
    later = window(range(max(after, late[0]), late[1] + 1))
    if workers:
        loader.close()
    return n / dt, main, later, ds.item_bytes / 2**20


def memcpy_together(out: Path, processes: int) -> float:
    """Samples/s of `processes` forked processes each running memcpy_rate over the page-mode cache at `out` at
    the same time, summed: the most that many reading processes could deliver on this machine, whose cores
    share one memory bus."""
    ctx = mp.get_context("fork")
    rates, start = ctx.Array("d", processes), ctx.Barrier(processes)

    def copy(k: int) -> None:
        ds = CacheDataset(out, compact=True)
        memcpy_rate(ds, 1)   # map the pages in before the start
        start.wait()
        rates[k] = memcpy_rate(ds, 3)
    procs = [ctx.Process(target=copy, args=(k,)) for k in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return sum(rates)


def cost_rows(data: Path, cfg: BuildConfig, batch_size: int, batches: int, late: tuple[int, int]
              ) -> tuple[list[list], tuple[float, float]]:
    """(the cost and read-speed rows, (memcpy_together of WORKERS processes, of 1; best of 2 each) on the page-mode
    cache)."""
    rows = []
    with tempfile.TemporaryDirectory(dir=BENCH_DATA) as tmp:
        for crop, geometry in (("read", "read"), ("read", "build"), ("build", "read")):
            c = dataclasses.replace(cfg, crop=crop, geometry=geometry)
            out = Path(tmp) / f"{crop}-{geometry}"
            b = built(data, c, out)
            arms = {"read": ((True, 0), (True, WORKERS), (False, 0)), "build": ((True, 0), (True, WORKERS))}
            for compact, workers in arms[geometry] if crop == "read" else ((False, 0),):
                first, main, later, item_mb = read_rate(out, batch_size, batches, late, compact, workers)
                label = f"--crop {crop}" + (" --geometry build" if crop == "read" and geometry == "build" else "")
                label += ((", train.py (targets made on the device)" if compact else ", targets made on the CPU")
                          if crop == "read" else "")
                label += f", {workers} worker processes" if workers else ""
                rows.append([label, f"{b['bytes'] / 2**20:.1f}", f"{b['seconds']:.2f}", f"{item_mb:.2f}",
                             f"{first:.1f}", f"{main.rate:.1f}", f"{main.rate * item_mb:.0f}",
                             f"{np.median(main.memcpy):.0f}", main.ratio(), f"{later.rate:.1f}", later.ratio()])
            if crop == geometry == "read":
                together = tuple(max(memcpy_together(out, n) for _ in range(2)) for n in (WORKERS, 1))
    return rows, together


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=12,
                    help="pages of the sample set (default 12, as the built-in set, and of its size)")
    ap.add_argument("--photos", type=int, default=10, help="photo-like images (default 10)")
    ap.add_argument("--dense", type=int, default=20,
                    help=f"dense photo-like pages ({DENSE_WORDS} words), coverage only (default 20; 0: none)")
    ap.add_argument("--cameras", type=int, default=4, help="camera photos, coverage only (default 4; 0: none)")
    ap.add_argument("--epochs", default="1,5,20,50", help="epoch counts of the coverage table")
    ap.add_argument("--batch-size", type=int, default=8, help="batch size of the read-speed pass (default 8)")
    ap.add_argument("--batches", type=int, default=160,
                    help="batches timed per read-speed pass (default 160: 20 epochs of 64 images, so that each reading "
                         "process has mapped in the pages it reads; the first epoch is timed apart)")
    ap.add_argument("--read-images", type=int, default=64,
                    help="images of the sets built for cost and read speed (default 64: 8 batches an epoch)")
    ap.add_argument("--late", default=LATE, help=f"first,last epoch of the late read-speed columns (default {LATE}: "
                    "once every reading process has mapped in the pages it reads and kept their patches)")
    a = ap.parse_args()
    late = tuple(int(e) for e in a.late.split(","))
    epochs = tuple(int(e) for e in a.epochs.split(","))
    print(f"# Crop modes\n\n{machine()}\n")
    for label, data, read_data, cfg in data_sets(a.images, a.photos, a.read_images):
        print(f"## Word coverage: {label}, --image-size {cfg.image_size} --input-size {cfg.input_size}\n")
        header = ["mode", *(f"{e} epoch{'s' * (e > 1)}" for e in epochs), f"distinct crops / image ({DISTINCT_EPOCHS} ep.)",
                  "text-free crops"]
        print(table(header, coverage_rows(data, cfg, epochs)), "\n")
        print(f"## Cost and read speed: {a.read_images} images made as the {label}\n\nBuild with one job; read "
              f"through train.py's feeding path (DataLoader without workers, collate, batches read one ahead by "
              f"a thread of this process, batch {a.batch_size}, torch using {torch.get_num_threads()} threads; the "
              f"rows with worker processes: train.py --workers {WORKERS}, forked processes that cut the batches into "
              f"shared slots); memcpy: one core copying as many bytes as an item delivers, measured after each timed "
              f"epoch; read / memcpy: the median of the epochs' ratios [lowest-highest].\n")
        header = ["mode", "MiB / image / variant on disk", "build s / image", "MiB / item delivered",
                  "first epoch samples/s", "read samples/s", "read MiB/s", "memcpy samples/s (median)", "read / memcpy",
                  f"epochs {late[0]}-{late[1]} samples/s", f"epochs {late[0]}-{late[1]} read / memcpy"]
        rows, (together, one) = cost_rows(read_data, cfg, a.batch_size, a.batches, late)
        print(table(header, rows), "\n")
        print(f"memcpy of a page-mode item's bytes by {WORKERS} processes at once: {together:.0f} samples/s, "
              f"{together / one:.2f}x one process's ({one:.0f}; best of 2 each): the most {WORKERS} reading "
              f"processes could deliver here.\n")
    for label, data, cfg in coverage_sets(a.dense, a.cameras):
        print(f"## Word coverage: {label}, --image-size {cfg.image_size} --input-size {cfg.input_size}\n")
        header = ["mode", *(f"{e} epoch{'s' * (e > 1)}" for e in epochs), f"distinct crops / image ({DISTINCT_EPOCHS} ep.)",
                  "text-free crops"]
        print(table(header, coverage_rows(data, cfg, epochs)), "\n")


if __name__ == "__main__":
    main()
