"""Where the height jitter and rotation are drawn (--crop read): every epoch by the reader from a page stored resized
only (--geometry read, the default) beside once per image at build time into a stored warped page (--geometry build,
--variants 1), same run. Prints markdown tables; asserts nothing.

Data: the built-in sample set (pages; default build settings: --image-size 2048 --input-size 1024), photo-like
images (1280 x 720 JPEGs, 15 words; --image-size 1280 --input-size 512, the ICDAR 2015 setting) and camera photos
(common.bench_photos: 12 MP and A4 phone JPEGs; default settings, crops of 1024 and 512 px).

- draws: distinct (height, rotation) pairs per image over 20 epochs, and every draw of every image and epoch
  against U[1 - j, 1 + j] and U[-r, r] (Kolmogorov-Smirnov statistic D and its 5% critical value 1.36 / sqrt(n));
  build mode's draws are the stored pages' (sample/page.py page_params of the variant each epoch reads);
- word coverage after 1/5/20 epochs and the share of text-free crops (tools/coverage.py cache_coverage on the built
  caches: the reader's own draws replayed, no pixel read);
- cache MiB / image and build s / image (one job; wall and CPU seconds), both codecs, the modes alternated, and the
  read mode built with --levels (each page's half level stored beside it);
- read speed: crops per CPU second of one process reading train.py's compact items into a batch slot as a loader
  worker does (cv2 on one thread, as there) (CacheDataset(compact=True), reader/collate.py copy_item into a reader/workers.py Slot: a raw
  region read and warped, jpeg tiles decoded and warped; build mode: slices, or tiles decoded), beside make_sample
  from the source image (reader/onthefly.py, a fresh draw per crop); arms alternated --repeat times, each timed over
  at least --cpu-seconds of CPU: median [min-max]; and crops/s of wall time (the machine may be shared);
- image error: PSNR of read-mode crops against make_sample's single warp of the decoded source for the same draw
  (the matrix frame -> page -> crop composed as tests/test_epoch_geometry.py does), median and worst;
- the run's augmentation (east_cache/augment.py), camera photos: crops per CPU second of a loader worker from the one
  read-mode cache built at 1024 px with --levels (what a run that shrinks its crops builds), read at 1024 and 512 px,
  raw and jpeg, under the baseline geometry (the cache's height and rotation), + scale U[0.5, 1], + perspective 0.1,
  and all on, and all on from the cache built without --levels (the default: a crop at scale < 0.71 reads the page
  at 1/2), arms interleaved crop by crop (the same (epoch, image) read by each in turn); the build's seconds after
  each option only a reader uses changed (computed 0); crops at scale 0.5 against resize-then-warp (the page
  averaged over 2 x 2, then warped) read at the page's stored half level (--levels), read at 1/2 from the page
  itself (no level stored) and warped from the full page, PSNR and crops per CPU second, and at scale 0.65 read at
  the half level (magnified 1.3) against the full page; on the sample set and the photo-like set, word coverage after
  1/5/20 epochs under the baseline geometry and all on.

    python benchmarks/bench_geometry.py [--images 12] [--photos 10] [--cameras 4] [--repeat 3] [--cpu-seconds 1.5]
        [--psnr-epochs 3]
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from common import BENCH_DATA, bench_photos, machine, table, write_sample_dataset
from helpers import psnr

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import load_splits
from east_cache.reader import CacheDataset
from east_cache.reader.collate import copy_item, field_layouts
from east_cache.reader.onthefly import OnTheFlyDataset
from east_cache.reader.warped import WarpedImage
from east_cache.reader.workers import Slot, cv2_single_threaded
from east_cache.sample.epoch_geometry import level_matrix
from east_cache.sample.geometry import compose
from east_cache.sample.make import decode_for, warp
from east_cache.sample.page import page_geometry, page_params
from east_cache.build.run import build_cache
from east_cache.store.layout import Layout
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_record import TABLE_COLUMNS, WORD_TABLE
from east_cache.store.sidecar import quads_path
from east_cache.tools.coverage import cache_coverage
from east_cache.tools.info import disk_bytes
from east_cache.tools.sampledata import DEFAULT_PAGE_SIZE

DRAW_EPOCHS = 20        # "distinct (height, rotation) draws per image over 20 epochs"
COVERAGE_EPOCHS = (1, 5, 20)
KS_CRITICAL = 1.36      # Kolmogorov-Smirnov at 5%: the critical D is 1.36 / sqrt(n)
MODES = ("read", "build")
LEVELS = "read --levels"   # read mode built with --levels: measured for its size and build time, and read by the
                           # run's augmentation
CODECS = ("raw", "jpeg")
SLOT_ROWS = 8           # rows of the batch slot the items are copied into (row k % SLOT_ROWS)
PHOTO = dict(image_size=1280, input_size=512)   # the ICDAR 2015 setting


@dataclasses.dataclass
class DataSet:
    label: str
    root: Path
    cfg: BuildConfig
    crops: tuple[int, ...]   # crop sides read (the first is the build's settings)
    draws: bool              # draws and coverage measured on it


def data_sets(a) -> list[DataSet]:
    w, h = DEFAULT_PAGE_SIZE
    pages = write_sample_dataset(BENCH_DATA / f"crops-sample-{a.images}-{h}", n_images=a.images, seed=0,
                                 page_size=DEFAULT_PAGE_SIZE)
    photos = write_sample_dataset(BENCH_DATA / f"crops-photo-{a.photos}", n_images=a.photos, words_per_page=15,
                                  page_size=(1280, 720), seed=3)
    return [DataSet(f"sample set ({a.images} x {w}x{h})", pages, BuildConfig(), (1024,), True),
            DataSet(f"photo-like ({a.photos} x 1280x720)", photos, BuildConfig(**PHOTO), (512,), True),
            DataSet(f"camera photos ({a.cameras} x 8.7-12 MP)", bench_photos(a.cameras), BuildConfig(), (1024, 512),
                    False)]


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """median [min-max] of values, or the value alone."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def config(s: DataSet, mode: str, codec: str, size: int) -> BuildConfig:
    geometry, levels = ("read", True) if mode == LEVELS else (mode, False)
    return dataclasses.replace(s.cfg, geometry=geometry, image_codec=codec, input_size=size, levels=levels)


def folder(work: Path, s: DataSet, mode: str, codec: str, size: int) -> Path:
    return work / f"{s.root.name}-{mode.replace(' --', '-')}-{codec}-{size}"


def build(s: DataSet, mode: str, codec: str, size: int, work: Path) -> tuple[float, float]:
    """(wall s, CPU s) of a one-job build (in this process) of the set, into its folder in work (made anew)."""
    out = folder(work, s, mode, codec, size)
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    build_cache(config(s, mode, codec, size), [s.root], out, jobs=1, quiet=True)
    return time.perf_counter() - t0, time.process_time() - c0


def cache_bytes(out: Path) -> int:
    paths = [data_path(out, f.name) for f in Manifest.load(out).files]
    return sum(disk_bytes(p) + disk_bytes(quads_path(p)) for p in paths)


def half_level_share(out: Path) -> float:
    """The share of a read-mode cache's page bytes that its pages' stored half levels take (raw rows, or packed JPEG
    tiles); 0 without them (a build without --levels)."""
    ds = CacheDataset(out)
    half = full = 0
    for i in range(len(ds)):
        image = ds.cropper.page(i, 0).image
        full += image.pixels.nbytes if hasattr(image, "pixels") else image.tiles.nbytes
        half += image.half.nbytes if image.half is not None else 0
    return half / (full + half)


def ks_uniform(values, lo: float, hi: float) -> float:
    """The Kolmogorov-Smirnov statistic D of values against U[lo, hi]."""
    x = np.sort((np.asarray(values, np.float64) - lo) / (hi - lo))
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - x), np.max(x - np.arange(n) / n)))


def draws(cache: Path, s: DataSet, mode: str) -> dict[int, list[tuple[float, float]]]:
    """Per image, the (height, angle) its crops show in epochs 0..DRAW_EPOCHS-1: the reader's draws (read mode), or
    the stored page's of the variant each epoch reads (build mode)."""
    ds = CacheDataset(cache)
    if mode == "read":
        return {i: [(g.height, g.angle) for g in (ds.cropper.geometry(i, ds.variant(i, e), e)
                                                 for e in range(DRAW_EPOCHS))] for i in range(len(ds))}
    recs = {r.name: r for r in load_splits([s.root], "train", ds.config)[0]}
    out = {}
    for i, name in enumerate(ds.names):
        r = recs[name]
        params = [page_params(ds.config, name, ds.variant(i, e), r.width, r.height) for e in range(DRAW_EPOCHS)]
        out[i] = [(p.height, p.angle) for p in params]
    return out


def draw_row(label: str, mode: str, per_image: dict, cfg: BuildConfig) -> list[str]:
    distinct = [len(set(d)) for d in per_image.values()]
    heights = [h for d in per_image.values() for h, _ in d]
    angles = [a for d in per_image.values() for _, a in d]
    unique = sorted({p for d in per_image.values() for p in d})   # each stored draw once (build mode repeats them)
    n = len(unique)
    j, r = cfg.height_jitter, cfg.max_rotation
    d_h = ks_uniform([h for h, _ in unique], 1 - j, 1 + j)
    d_a = ks_uniform([a for _, a in unique], -r, r)
    return [label, f"--geometry {mode}", str(len(per_image)), str(min(distinct)), f"{np.mean(distinct):.1f}",
            str(n), f"{d_h:.3f}", f"{d_a:.3f}", f"{KS_CRITICAL / np.sqrt(n):.3f}",
            f"[{min(heights):.3f}, {max(heights):.3f}]", f"[{min(angles):.2f}, {max(angles):.2f}]"]


def new_slot(ds: CacheDataset) -> Slot:
    """A batch slot as a loader worker's (reader/workers.py WorkerLoader._start), sized by one item."""
    item = ds[(0, 0)]
    fields = field_layouts(item)
    if WORD_TABLE in item:
        fields[WORD_TABLE] = ((max(1, ds.table_rows()), len(TABLE_COLUMNS)), np.dtype(np.float32))
    return Slot(fields, SLOT_ROWS)


class Arm:
    """One way of reading crops, timed in turns: read(epoch, i, row) makes image i's crop of an epoch into a batch
    slot's row; each turn goes on from where the last one stopped (epochs 1, 2, ... of all images), so that every
    turn reads new draws. Every image is read once first (its page mapped in, its words derived)."""

    def __init__(self, read, images: int):
        self.read, self.images, self.epoch, self.i = read, images, 1, 0
        for i in range(images):
            read(0, i, i % SLOT_ROWS)

    def turn(self, cpu_seconds: float) -> tuple[float, float]:
        """(crops per CPU second, crops per wall second) over at least cpu_seconds of this process's CPU time."""
        n, c0, t0 = 0, time.process_time(), time.perf_counter()
        while n < SLOT_ROWS or time.process_time() - c0 < cpu_seconds:
            self.read(self.epoch, self.i, n % SLOT_ROWS)
            n += 1
            self.i += 1
            if self.i == self.images:
                self.i, self.epoch = 0, self.epoch + 1
        return n / (time.process_time() - c0), n / (time.perf_counter() - t0)


def cache_arm(cache: Path) -> Arm:
    """A loader worker's reading: compact items (CacheDataset(compact=True)) copied by copy_item into a Slot."""
    ds = CacheDataset(cache, compact=True)
    slot = new_slot(ds)
    return Arm(lambda epoch, i, row: copy_item(slot.arrays, row, ds[(epoch, i)]), len(ds))


def on_the_fly_arm(s: DataSet, size: int) -> Arm:
    """make_sample of the source image, a fresh draw every epoch (OnTheFlyDataset(fresh=True)), its image copied
    into a batch's row."""
    ds = OnTheFlyDataset([s.root], config=dataclasses.replace(s.cfg, input_size=size), fresh=True)
    rows = np.empty((SLOT_ROWS, 3, size, size), np.uint8)

    def read(epoch: int, i: int, row: int) -> None:
        ds.set_epoch(epoch)
        np.copyto(rows[row], ds[i]["image"])
    return Arm(read, len(ds))


def image_error(s: DataSet, work: Path, size: int, codec: str, epochs: int) -> list[float]:
    """PSNR of every read-mode crop of epochs 0..epochs-1 against make_sample's single warp of the decoded source
    by the same draw's matrix, composed frame -> page (the page's resize) -> crop."""
    ds = CacheDataset(folder(work, s, "read", codec, size))
    recs = {r.name: r for r in load_splits([s.root], "train", ds.config)[0]}
    to_page = {}
    out = []
    for i, name in enumerate(ds.names):
        rec = recs[name]
        if name not in to_page:
            to_page[name] = page_geometry(rec, ds.config, 0)[1]
        for e in range(epochs):
            g = ds.cropper.geometry(i, ds.variant(i, e), e)
            frame_to_crop = compose(g.matrix[:2], to_page[name])   # the cache's own draw: affine
            reference = warp(decode_for(rec, frame_to_crop), frame_to_crop, (size, size)).transpose(2, 0, 1)
            out.append(psnr(ds[(e, i)]["image"], reference))
    return out


class Tables:
    """The rows of every printed table, and `done`: the figures the issue's targets are read from."""

    def __init__(self):
        self.draws, self.coverage, self.cost, self.read, self.error, self.done = [], [], [], [], [], {}
        self.augment, self.options, self.levels, self.aug_coverage = [], [], [], []


def measure_cost(s: DataSet, work: Path, repeat: int, t: Tables) -> None:
    """Build the set in both modes and codecs at its first crop size, and the read mode with --levels, `repeat` times
    (alternated): size and time."""
    n = len(load_splits([s.root], "train", s.cfg)[0])
    size = s.crops[0]
    modes = (MODES[0], LEVELS, *MODES[1:])
    times = {(m, c): [] for m in modes for c in CODECS}
    for _ in range(repeat):
        for c in CODECS:
            for m in modes:
                times[(m, c)].append(build(s, m, c, size, work))
    for c in CODECS:
        per = {m: cache_bytes(folder(work, s, m, c, size)) / n for m in modes}
        for m in modes:
            wall, cpu = ([x[k] / n for x in times[(m, c)]] for k in (0, 1))
            ratio = [x[1] / y[1] for x, y in zip(times[(m, c)], times[("build", c)])] if m != "build" else []
            share = f"{half_level_share(folder(work, s, m, c, size)):.1%}" if m != "build" else ""
            t.cost.append([s.label, c, f"--geometry {m}", f"{per[m] / 2**20:.3f}", share,
                           f"{per[m] / per['build']:.2f}", spread(wall, "{:.3f}"), spread(cpu, "{:.3f}"),
                           spread(ratio, "{:.2f}") if ratio else ""])
        for m in ("read", LEVELS):
            t.done[(s.label, c, m, "bytes")] = per[m] / per["build"]
            t.done[(s.label, c, m, "build")] = statistics.median(
                r[1] / b[1] for r, b in zip(times[(m, c)], times[("build", c)]))


def measure_draws(s: DataSet, work: Path, t: Tables) -> None:
    """Draws and coverage of the set's raw caches, both modes."""
    for m in MODES:
        cache = folder(work, s, m, "raw", s.crops[0])
        per_image = draws(cache, s, m)
        t.draws.append(draw_row(s.label, m, per_image, s.cfg))
        t.done[(s.label, m, "distinct")] = min(len(set(d)) for d in per_image.values())
        cov, _ = cache_coverage(cache, COVERAGE_EPOCHS)
        t.coverage.append([s.label, f"--geometry {m}", *(f"{x:.1%}" for x in cov.seen), f"{cov.distinct:.1f}",
                           f"{cov.text_free:.1%}", f"{cov.blank_pages:.0%}"])
        t.done[(s.label, m, "coverage")] = (cov.seen[-1], cov.text_free)


READ_LABELS = {("read", "raw"): "--geometry read (region read, one warp)",
               ("read", "jpeg"): "--geometry read (tiles decoded, one warp)",
               ("build", "raw"): "--geometry build (slice-only)", ("build", "jpeg"): "--geometry build (tiles decoded)",
               ("on the fly", "source"): "make_sample (decode, warp, targets)"}


def measure_reads(s: DataSet, size: int, work: Path, a, t: Tables) -> None:
    """Read speed of every arm at a crop size, alternated a.repeat times; then the read-mode crops' image error."""
    arms = {(m, c): cache_arm(folder(work, s, m, c, size)) for c in CODECS for m in MODES}
    arms[("on the fly", "source")] = on_the_fly_arm(s, size)
    rates = {k: [] for k in arms}
    with cv2_single_threaded():   # as in train.py's loader workers (reader/workers.py)
        for _ in range(a.repeat):
            for k, arm in arms.items():
                rates[k].append(arm.turn(a.cpu_seconds))
    fly = rates[("on the fly", "source")]
    for (m, c), r in rates.items():
        base = rates.get(("build", c))
        t.read.append([f"{s.label}, {size} px", c, READ_LABELS[(m, c)], spread([x[0] for x in r]),
                       spread([x[1] for x in r]), spread([x[0] / y[0] for x, y in zip(r, base)], "{:.2f}") if base
                       else "", spread([x[0] / y[0] for x, y in zip(r, fly)], "{:.1f}") if base else ""])
        t.done[(s.label, size, m, c)] = statistics.median(x[0] for x in r)
    for c in CODECS:
        p = image_error(s, work, size, c, a.psnr_epochs)
        t.error.append([f"{s.label}, {size} px", c, str(len(p)), f"{statistics.median(p):.1f}", f"{min(p):.1f}"])
        t.done[(s.label, size, c, "psnr")] = min(p)


# ---------------------------------------------------------------- the run's augmentation (east_cache/augment.py)

SCALE = (0.5, 1.0)      # multi-scale training's range, as the teams' random_scale((0.5, 1.0))
PERSPECTIVE = 0.1       # each corner of the crop's source moved by up to 10% of its side
AUGMENTS = {"baseline geometry (height, rotation)": {}, "+ scale U[0.5, 1]": dict(scale=SCALE),
            f"+ perspective {PERSPECTIVE:g}": dict(perspective=PERSPECTIVE),
            "all on (height, rotation, scale, perspective)": dict(scale=SCALE, perspective=PERSPECTIVE)}
ALL_ON = "all on (height, rotation, scale, perspective)"
NO_LEVELS = "all on, the cache built without --levels (pages read at 1/2)"
STRETCHED = 0.65        # a scale whose crop reads the half level magnified (read_level: by sqrt 2 at most)


def augment_arm(cache: Path, changes: dict, size: int) -> Arm:
    """cache_arm with the crops drawn by the cache's build values changed by `changes` (Augment fields)."""
    ds = CacheDataset(cache, compact=True)
    ds.augment = Augment.of_cache(ds.config, input_size=size, **changes)
    slot = new_slot(ds)
    return Arm(lambda epoch, i, row: copy_item(slot.arrays, row, ds[(epoch, i)]), len(ds))


def interleaved(arms: dict[str, Arm], blocks: int, cpu_seconds: float) -> dict[str, list[float]]:
    """Crops per CPU second of each arm in each of `blocks` blocks, the arms interleaved crop by crop: every (epoch,
    image) is read by each arm in turn, each read timed on its own, so that all arms see the same draws' pages and the
    machine in the same state (a shared machine's speed drifts between turns of a second by more than the ratios
    measured); a block lasts until one arm has spent cpu_seconds (the slowest, which spends the most)."""
    first = next(iter(arms.values()))
    rates = {k: [] for k in arms}
    for _ in range(blocks):
        spent, n = dict.fromkeys(arms, 0.0), 0
        while n < SLOT_ROWS or max(spent.values()) < cpu_seconds:
            for k, arm in arms.items():
                c0 = time.process_time()
                arm.read(first.epoch, first.i, n % SLOT_ROWS)
                spent[k] += time.process_time() - c0
            n += 1
            first.i += 1
            if first.i == first.images:
                first.i, first.epoch = 0, first.epoch + 1
        for k in arms:
            rates[k].append(n / spent[k])
    return rates


def measure_augments(s: DataSet, work: Path, a, t: Tables) -> None:
    """Crops per CPU second of a loader worker under each augmentation, read from the read-mode caches of the first
    crop size built with --levels (the crop side chosen by the reader: no other cache), and all on from the one built
    without (NO_LEVELS), the arms interleaved crop by crop (interleaved) in a.repeat blocks of a.cpu_seconds each; the
    ratio to the baseline geometry is each block's, median [min-max]."""
    for size in s.crops:
        for c in CODECS:
            arms = {k: augment_arm(folder(work, s, LEVELS, c, s.crops[0]), v, size) for k, v in AUGMENTS.items()}
            arms[NO_LEVELS] = augment_arm(folder(work, s, "read", c, s.crops[0]), AUGMENTS[ALL_ON], size)
            with cv2_single_threaded():
                rates = interleaved(arms, a.repeat, a.cpu_seconds)
            base = rates[next(iter(AUGMENTS))]
            for k, r in rates.items():
                t.augment.append([f"{s.label}, {size} px", c, k, spread(r), spread([x / y for x, y in zip(r, base)],
                                                                                  "{:.2f}")])
                t.done[(s.label, size, c, k)] = statistics.median(x / y for x, y in zip(r, base))


def measure_reader_options(s: DataSet, work: Path, t: Tables) -> None:
    """Build seconds of a read-mode raw cache, then of a build after each option only a reader uses changed."""
    out = work / f"{s.root.name}-options"
    shutil.rmtree(out, ignore_errors=True)
    cfg = dataclasses.replace(s.cfg, image_codec="raw")
    for name, value in (("first build", None), ("max_rotation", 20.0), ("height_jitter", 0.1), ("input_size", 512)):
        if value is not None:
            cfg = dataclasses.replace(cfg, **{name: value})
        t0 = time.perf_counter()
        r = build_cache(cfg, [s.root], out, jobs=1, quiet=True)
        label = name if value is None else f"--{name.replace('_', '-')} {value:g}"
        t.options.append([s.label, label, f"{time.perf_counter() - t0:.2f}", str(r.computed), str(r.copied),
                          str(r.files_reused)])


def level_psnr(s: DataSet, work: Path, size: int, epochs: int, t: Tables) -> None:
    """Crops at scale 0.5 (height 1, the cache's rotation) against resize-then-warp (the page averaged over 2 x 2,
    cv2.INTER_AREA, then warped by the same matrix): read at the page's stored half level (a --levels cache), read at
    1/2 from the page itself (the reader's way without a stored level: raw px averaged, JPEG tiles decoded at 1/2) and
    warped from the full page (bilinear, skipping px: aliasing); PSNR and crops per CPU second of each."""
    ways = {"stored": ("half level stored (--levels), one warp", True),
            "page": ("no level stored: the page read at 1/2, one warp", True),
            "full": ("full page, one warp", False)}
    for c in CODECS:
        ds = CacheDataset(folder(work, s, LEVELS, c, s.crops[0]))
        ds.augment = Augment.of_cache(ds.config, input_size=size, height_jitter=0.0, scale=(0.5, 0.5))
        ratios, seconds = {k: [] for k in ways}, dict.fromkeys(ways, 0.0)
        for i in range(len(ds)):
            page = ds.cropper.page(i, 0)
            full = np.ascontiguousarray(page.image.array().transpose(1, 2, 0))
            half = cv2.resize(full[:full.shape[0] // 2 * 2, :full.shape[1] // 2 * 2],
                              (full.shape[1] // 2, full.shape[0] // 2), interpolation=cv2.INTER_AREA)
            for e in range(epochs):
                g = ds.cropper.geometry(i, 0, e)
                reference = cv2.warpAffine(half, (g.matrix @ level_matrix(2))[:2], (size, size),
                                           flags=cv2.INTER_LINEAR)
                for k, (_, levels) in ways.items():
                    image = page.image._replace(half=None) if k == "page" else page.image
                    c0 = time.process_time()
                    crop = np.asarray(WarpedImage(image, g.matrix, size, levels))
                    seconds[k] += time.process_time() - c0
                    ratios[k].append(psnr(crop.transpose(2, 0, 1), reference.transpose(2, 0, 1)))
        n = len(ratios["full"])
        for k, (label, _) in ways.items():
            t.levels.append([f"{s.label}, {size} px", c, label, str(n), f"{statistics.median(ratios[k]):.1f}",
                             f"{min(ratios[k]):.1f}", f"{n / seconds[k]:.0f}"])
        t.done[(s.label, size, c, "level psnr")] = tuple(statistics.median(ratios[k]) for k in ways)
        stretched = []   # scale 0.65: the half level magnified 1.3 (read_level's sqrt 2 at most) vs the full page
        ds.augment = Augment.of_cache(ds.config, input_size=size, height_jitter=0.0, scale=(STRETCHED, STRETCHED))
        for i in range(len(ds)):
            page = ds.cropper.page(i, 0)
            for e in range(epochs):
                g = ds.cropper.geometry(i, 0, e)
                level, whole = (np.asarray(WarpedImage(page.image, g.matrix, size, k)) for k in (True, False))
                stretched.append(psnr(level.transpose(2, 0, 1), whole.transpose(2, 0, 1)))
        t.levels.append([f"{s.label}, {size} px", c, f"scale {STRETCHED:g}: half level (x {2 * STRETCHED:g}) vs full "
                         "page", str(len(stretched)), f"{statistics.median(stretched):.1f}", f"{min(stretched):.1f}",
                         ""])


def augment_coverage(s: DataSet, work: Path, t: Tables) -> None:
    """Word coverage after 1/5/20 epochs of the read-mode raw cache, the baseline geometry and all on."""
    cache = folder(work, s, "read", "raw", s.crops[0])
    for label in (next(iter(AUGMENTS)), ALL_ON):
        aug = Augment.of_cache(Manifest.load(cache).config, **AUGMENTS[label])
        cov, _ = cache_coverage(cache, COVERAGE_EPOCHS, aug=aug)
        t.aug_coverage.append([s.label, label, *(f"{x:.1%}" for x in cov.seen), f"{cov.text_free:.1%}"])
        t.done[(s.label, label, "coverage")] = cov.seen[-1]


def target_rows(sets: list[DataSet], done: dict) -> list[list[str]]:
    """The issue's "done when", each figure against its goal."""
    pages, photos, camera = (s.label for s in sets)
    rows = []
    for s in (pages, photos):
        rows.append([f"{s}: distinct (height, rotation) draws / image in {DRAW_EPOCHS} epochs, least",
                     ">= 15 (build mode: 1)",
                     f"{done[(s, 'read', 'distinct')]} (build mode: {done[(s, 'build', 'distinct')]})"])
        seen, free = done[(s, "read", "coverage")]
        rows.append([f"{s}: word coverage by epoch {COVERAGE_EPOCHS[-1]}, text-free crops", ">= 99%, 0%",
                     f"{seen:.1%}, {free:.1%}"])
    for size, goals in ((1024, {"raw": 80, "jpeg": 50}), (512, {"raw": 300, "jpeg": 150})):
        for c, goal in goals.items():
            rows.append([f"{camera}: {size}-px crops per CPU s, {c}, read mode", f">= {goal}",
                         f"{done[(camera, size, 'read', c)]:.0f}"])
    rows.append([f"{photos}: 512-px crops per CPU s, raw / jpeg, read mode", ">= 300 / 150",
                 f"{done[(photos, 512, 'read', 'raw')]:.0f} / {done[(photos, 512, 'read', 'jpeg')]:.0f}"])
    for size in (1024, 512):
        for c in CODECS:
            rows.append([f"{camera}: {size}-px crops per CPU s, {c}, all on / baseline geometry, a --levels cache",
                         ">= 0.90", f"{done[(camera, size, c, ALL_ON)]:.2f}"])
    for size in (1024, 512):
        for c in CODECS:
            rows.append([f"{camera}: {size}-px crops per CPU s, {c}, all on from a cache built without --levels / "
                         f"baseline geometry", "reported", f"{done[(camera, size, c, NO_LEVELS)]:.2f}"])
    for c in CODECS:
        level, page, whole = done[(camera, 1024, c, "level psnr")]
        rows.append([f"{camera}, {c}: PSNR at scale 0.5 vs resize-then-warp, half level stored / page read at 1/2 / "
                     f"full page", "higher", f"{level:.1f} / {page:.1f} / {whole:.1f} dB"])
    worst = min(v for k, v in done.items() if k[-1] == "psnr")
    rows.append(["read-mode crops vs make_sample's single warp, worst PSNR", ">= 30 dB", f"{worst:.1f} dB"])
    for s in (pages, camera):
        for c in CODECS:
            rows.append([f"{s}, {c}: cache bytes, build CPU s, read / build mode", "<= 1, <= 1",
                         f"{done[(s, c, 'read', 'bytes')]:.2f}, {done[(s, c, 'read', 'build')]:.2f}"])
    for s in (pages, camera):
        for c in CODECS:
            rows.append([f"{s}, {c}: cache bytes, build CPU s, read mode with --levels / build mode", "reported",
                         f"{done[(s, c, LEVELS, 'bytes')]:.2f}, {done[(s, c, LEVELS, 'build')]:.2f}"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=12, help="pages of the sample set (default 12, as the built-in set)")
    ap.add_argument("--photos", type=int, default=10, help="photo-like 1280x720 images (default 10)")
    ap.add_argument("--cameras", type=int, default=4, help="camera photos (default 4)")
    ap.add_argument("--repeat", type=int, default=3, help="turns of each timed arm, arms alternated (default 3)")
    ap.add_argument("--build-repeat", type=int, default=2, help="builds of each set and mode, alternated (default 2)")
    ap.add_argument("--cpu-seconds", type=float, default=1.5, help="CPU seconds of each read turn (default 1.5)")
    ap.add_argument("--psnr-epochs", type=int, default=3, help="epochs of crops compared with make_sample (default 3)")
    a = ap.parse_args()
    sets, t = data_sets(a), Tables()
    work = Path(tempfile.mkdtemp(prefix="bench-geometry-", dir=BENCH_DATA))
    try:
        for s in sets:
            measure_cost(s, work, a.build_repeat, t)
            if s.draws:
                measure_draws(s, work, t)
            for size in s.crops:
                if size != s.crops[0]:
                    for c in CODECS:
                        for m in MODES:
                            build(s, m, c, size, work)
                measure_reads(s, size, work, a, t)
            if s.draws:
                augment_coverage(s, work, t)
            else:   # camera photos: the run's augmentation
                measure_augments(s, work, a, t)
                level_psnr(s, work, s.crops[0], a.psnr_epochs, t)
                measure_reader_options(s, work, t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Machine: {machine()}; cv2 on 1 thread in the read arms (as in the loader workers), "
          f"{cv2.getNumThreads()} elsewhere; timed arms alternated, median [min-max].\n")
    print(f"### Draws: (height, rotation) per image over {DRAW_EPOCHS} epochs\n")
    print(table(["data", "mode", "images", "distinct draws / image (least)", "(mean)", "draws n",
                 "height KS D", "angle KS D", "5% critical D", "heights", "angles"], t.draws))
    print("\n### Word coverage (the reader's draws replayed on the built caches)\n")
    print(table(["data", "mode", *(f"{e} epoch{'s' * (e > 1)}" for e in COVERAGE_EPOCHS),
                 f"distinct crops / image ({COVERAGE_EPOCHS[-1]} ep.)", "text-free crops",
                 "images without legible words"], t.coverage))
    print(f"\n### Cache size and build time (one job, --variants 1; {a.build_repeat} builds each, modes alternated)\n")
    print(table(["data", "codec", "mode", "cache MiB / image", "of it the half level", "/ build mode",
                 "build s / image (wall)",
                 "build CPU s / image", "read / build mode, CPU"], t.cost))
    print("\n### Read speed: one process reading train.py's compact items into a batch slot, as a loader worker\n")
    print(table(["data, crop", "codec", "mode", "crops per CPU s (per core)", "crops / wall s",
                 "/ build mode (same codec)", "/ make_sample"], t.read))
    print("\n### Image error: read-mode crops against make_sample's single warp of the source, same draw\n")
    print(table(["data, crop", "codec", "crops", "median PSNR dB", "worst PSNR dB"], t.error))
    print("\n### The issue's targets\n")
    print(table(["what", "goal", "measured"], target_rows(sets, t.done)))
    print("\n### The run's augmentation: crops per CPU second of a loader worker, one --geometry read cache (arms "
          "interleaved crop by crop)\n")
    print(table(["data, crop", "codec", "augmentation", "crops per CPU s", "/ baseline geometry"], t.augment))
    print("\n### Build after an option only a reader uses changed (--geometry read, raw, one job)\n")
    print(table(["data", "build", "s", "computed", "copied", "files kept"], t.options))
    print("\n### Scale 0.5 against resize-then-warp: the page's stored half level (--levels), the page read at 1/2 (no "
          f"level stored), or the full page; scale {STRETCHED:g}: the half level against the full page\n")
    print(table(["data, crop", "codec", "read", "crops", "median PSNR dB", "worst PSNR dB", "crops per CPU s"],
                t.levels))
    print(f"\n### Word coverage under the run's augmentation (scale U[{SCALE[0]:g}, {SCALE[1]:g}], perspective "
          f"{PERSPECTIVE:g})\n")
    print(table(["data", "augmentation", *(f"{e} epoch{'s' * (e > 1)}" for e in COVERAGE_EPOCHS),
                 "text-free crops"], t.aug_coverage))


if __name__ == "__main__":
    main()
