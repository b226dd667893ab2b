"""Whole-sample speed on document pages and camera photos: east_cache.sample.make_sample (decode at reduced
size -> one affine warp -> targets) per stage, against its floor, the build, the decode it replaced, and a plain
sequential pipeline built the way the common baseline builds a sample on the fly (PIL open, resize the long side,
height jitter, rotate, crop retry loop, then the plain reference targets of tests/reference.py). Prints markdown
tables; asserts nothing.

The stages are timed inside make_sample, by wrapping the names make.py calls them by (its decoder, cv2's warp,
the targets); the floor is their sum, measured in the same calls: the least a sample costs with this decoder.
"The old decode" is the decode before OpenCV (PIL, convert("RGB"), np.asarray through tobytes), timed in the
same run, in make_sample and in a build. Builds here are --crop build builds (a crop record per sample, what
make_sample makes); the --crop read build (make_page: a whole page per sample) is timed by bench_crops.

    python benchmarks/bench_sample.py [--pages 8] [--photos 8] [--repeat 3]
"""
from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from common import (
    FAST_REPEATS,
    PHOTO_QUALITY,
    PHOTO_SIZES,
    bench_pages,
    bench_photos,
    machine,
    median_over,
    median_time,
    table,
)
from PIL import Image, ImageOps
from reference import reference_targets

from east_cache.config import BuildConfig
from east_cache.ingest import imageio
from east_cache.ingest.ufo import CARE, load_splits
from east_cache.sample import make
from east_cache.sample.make import make_sample
from east_cache.sample.targets import make_targets
from east_cache.build.run import build_cache
from east_cache.store.fingerprint import record_crc
from east_cache.store.format import record_spec

STAGES = ("decode", "warp", "targets")
FLOOR_GOAL, BASELINE_GOAL = 1.3, 30   # the goals: build <= 1.3x its floor, >= 30x the baseline on photos


def _words(rec) -> list[np.ndarray]:
    return [rec.points[a:b].astype(np.float64) for a, b in zip(rec.offsets[:-1], rec.offsets[1:])]


def _rotate_expand(image: Image.Image, words: list, angle: float) -> tuple[Image.Image, list]:
    """PIL's rotate(expand=True): `angle` degrees counter-clockwise about the centre, on a canvas that
    holds the whole result; the words follow the same map."""
    rotated = image.rotate(angle, Image.BILINEAR, expand=True)
    t = math.radians(angle)
    m = np.array([[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]])
    centre, new_centre = np.array(image.size) / 2, np.array(rotated.size) / 2
    return rotated, [(w - centre) @ m.T + new_centre for w in words]


def _crop(rng, words: list, legible: np.ndarray, size: tuple, crop: int, tries: int) -> tuple[np.ndarray, np.ndarray]:
    """Random integer origins until one cuts no legible word (its box partly inside), else the last one
    tried: (origin, the words it cuts)."""
    lo, hi = np.array([w.min(axis=0) for w in words]), np.array([w.max(axis=0) for w in words])
    for _ in range(tries):
        origin = np.floor(rng.uniform(0, np.maximum(np.subtract(size, crop), 0) + 1))
        overlaps = np.all((hi > origin) & (lo < origin + crop), axis=1)
        inside = np.all((lo >= origin) & (hi <= origin + crop), axis=1)
        cut = legible & overlaps & ~inside
        if not cut.any():
            break
    return origin, cut


def baseline_sample(rec, cfg: BuildConfig, rng: np.random.Generator):
    """The common baseline's steps, one after the other, each resampling the whole image. As in that
    code, the targets loop over every word of the page: the words outside the crop draw nothing, but
    each still costs the reference a pass over the whole map."""
    with Image.open(rec.path) as im:
        image = ImageOps.exif_transpose(im).convert("RGB")
    words = _words(rec)
    w, h = image.size
    ratio = cfg.image_size / max(w, h)
    image = image.resize((round(w * ratio), round(h * ratio)), Image.BILINEAR)
    words = [p * (image.width / w, image.height / h) for p in words]
    jitter = rng.uniform(1 - cfg.height_jitter, 1 + cfg.height_jitter)
    height = image.height
    image = image.resize((image.width, round(height * jitter)), Image.BILINEAR)
    words = [p * (1, image.height / height) for p in words]
    image, words = _rotate_expand(image, words, rng.uniform(-cfg.max_rotation, cfg.max_rotation))

    s, legible = cfg.input_size, rec.reason == CARE
    origin, cut = _crop(rng, words, legible, image.size, s, cfg.crop_tries)
    x, y = (int(v) for v in origin)
    crop = np.asarray(image.crop((x, y, x + s, y + s))).transpose(2, 0, 1)
    care = (legible & ~cut).astype(np.uint8)   # cut words become don't-care, as in make_sample
    return crop, reference_targets(np.concatenate(words) - origin, rec.offsets, care, s, cfg.map_scale)


def legacy_decode(path, frame_w: int, frame_h: int, scale: float = 1.0) -> imageio.Decoded:
    """The decode this project used before OpenCV, for the before/after rows: PIL decodes (draft-scaled),
    convert("RGB") copies even an RGB image, the EXIF turn copies, np.asarray goes through tobytes()."""
    with Image.open(path) as im:
        orientation = imageio._orientation(im)
        apply, warning = imageio._match_frame(path, im.size, orientation, frame_w, frame_h)
        if im.format == "JPEG" and (r := imageio._reduction(im.size, apply and orientation in imageio._SWAPS_AXES,
                                                            frame_w, frame_h, scale)) > 1:
            im.draft("RGB", (im.size[0] // r, im.size[1] // r))
        rgb = im.convert("RGB")
    if apply:
        rgb = rgb.transpose(imageio._UPRIGHT[orientation])
    image = np.asarray(rgb)
    return imageio.Decoded(image, image.shape[1] / frame_w, image.shape[0] / frame_h, apply, warning)


class StageClock:
    """While active, make_sample's decoder, warp and targets run through timers: seconds per stage of the
    last call. `decode` replaces the decoder (the old one, for the before/after rows)."""

    def __init__(self, decode=imageio.decode_image):
        self.decode, self.times = decode, dict.fromkeys(STAGES, 0.0)

    def _timed(self, stage: str, fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.times[stage] += time.perf_counter() - t0
        return run

    def __enter__(self):
        cv2 = make.cv2
        warp = self._timed("warp", cv2.warpAffine)
        proxy = type("TimedCv2", (), {"__getattr__": lambda _, name: getattr(cv2, name), "warpAffine": staticmethod(warp)})
        self.saved = {"decode_image": make.decode_image, "make_targets": make.make_targets, "cv2": cv2}
        make.decode_image, make.make_targets = self._timed("decode", self.decode), self._timed("targets", make_targets)
        make.cv2 = proxy()
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            setattr(make, name, value)

    def sample(self, rec, cfg: BuildConfig) -> dict[str, float]:
        """Seconds of each stage and of the whole make_sample call (variant 0)."""
        self.times = dict.fromkeys(STAGES, 0.0)
        t0 = time.perf_counter()
        make_sample(rec, cfg, 0)
        return {**self.times, "total": time.perf_counter() - t0}


def profile(records: list, cfg: BuildConfig, repeat: int, decode=imageio.decode_image) -> dict[str, float]:
    """Mean over images of each image's median seconds per stage, floor and total: a mean, as a build's cost
    per sample is. The images take turns, as in a build: none is decoded twice in a row from a warm CPU cache."""
    runs = [[] for _ in records]
    with StageClock(decode) as clock:
        clock.sample(records[0], cfg)   # first calls (imports, pools) untimed
        for _ in range(repeat):
            for rec, mine in zip(records, runs):
                mine.append(clock.sample(rec, cfg))
    for r in (r for mine in runs for r in mine):
        r["floor"] = sum(r[s] for s in STAGES)
    per_image = [{k: statistics.median(r[k] for r in mine) for k in mine[0]} for mine in runs]
    return {k: statistics.mean(p[k] for p in per_image) for k in per_image[0]}


def write_seconds(records: list, cfg: BuildConfig, repeat: int) -> float:
    """A sample written as the build worker writes it: its fields into a row of a mapped .npy, then the row's
    CRC; median over samples."""
    samples, spec = [make_sample(r, cfg, 0) for r in records], record_spec(cfg)
    with tempfile.TemporaryDirectory(prefix="east-bench-write-") as tmp:
        dst = np.lib.format.open_memmap(Path(tmp) / "rows.npy", "w+", spec.dtype, (len(samples),))

        def write(k: int) -> None:
            rec = dst[k]
            for f in spec.kind.fields:
                rec[f.name] = f.stored(getattr(samples[k], f.name))
            record_crc(dst[k:k + 1])
        write(0)
        return median_over(range(len(samples)), write, repeat * FAST_REPEATS)


def build_seconds(data: Path, cfg: BuildConfig, repeat: int, decode=imageio.decode_image) -> tuple[float, int]:
    """(seconds, samples) of a whole 1-job build (ingest, files, checksums, manifest, fsync), median of repeat."""
    out, times = Path(tempfile.mkdtemp(prefix="east-bench-build-")), []
    try:
        with StageClock(decode):
            for _ in range(repeat):
                shutil.rmtree(out, ignore_errors=True)
                report = build_cache(cfg, [data], out, jobs=1, quiet=True)
                times.append(report.seconds)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return statistics.median(times), report.samples


def build_costs(data: Path, cfg: BuildConfig, repeat: int, decode=imageio.decode_image) -> tuple[float, float]:
    """Seconds per sample of a build: (all of it / samples, per extra sample). The second is a build of 2 variants
    per image less a build of 1, over the extra samples: what each sample costs without the build's fixed
    start-up (ingest, planning, manifest), which a real data set spreads thin."""
    one, n = build_seconds(data, cfg, repeat, decode)
    two, n2 = build_seconds(data, BuildConfig(**{**cfg.to_dict(), "variants": 2}), repeat, decode)
    return one / n, (two - one) / (n2 - n)


def baseline_seconds(records: list, cfg: BuildConfig, repeat: int) -> float:
    """Mean over images of each image's median seconds."""
    return statistics.mean(median_time(lambda k=k, r=r: baseline_sample(r, cfg, np.random.default_rng(k)), repeat)
                           for k, r in enumerate(records))


def targets_rows(records: list, cfg: BuildConfig, repeat: int) -> list:
    """Targets alone on the words of the records' variant-0 crops: fast path and plain reference."""
    crops = [make_sample(r, cfg, 0) for r in records]
    args = lambda s: (s.points, s.offsets, s.care, cfg.input_size, cfg.map_scale)
    fast = median_over(crops, lambda s: make_targets(*args(s)), repeat * FAST_REPEATS)
    ref = median_over(crops, lambda s: reference_targets(*args(s)), repeat)
    return ["targets alone, same crops (pages)", "make_targets", f"{fast * 1e3:.1f}", "reference_targets",
            f"{ref * 1e3:.0f}", f"{ref / fast:.0f}x"]


def measure(data: Path, cfg: BuildConfig, repeat: int) -> dict:
    records, _ = load_splits([data], "train", cfg)
    return {"records": records, "new": profile(records, cfg, repeat),
            "old": profile(records, cfg, repeat, legacy_decode), "write": write_seconds(records, cfg, repeat),
            "build": build_costs(data, cfg, repeat), "build_old": build_costs(data, cfg, repeat, legacy_decode),
            "baseline": baseline_seconds(records, cfg, max(1, repeat // 3))}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 0.1 else f"{seconds * 1e3:.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=8, help="sample pages timed (default 8)")
    p.add_argument("--photos", type=int, default=8, help="camera photos timed (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per image; the median is kept (default 3)")
    a = p.parse_args()
    cfg = BuildConfig(crop="build")   # make_sample's crop records; bench_crops times the page-mode build
    kinds = {"pages": measure(bench_pages(a.pages), cfg, a.repeat),
             "photos": measure(bench_photos(a.photos), cfg, a.repeat)}
    pages, photos = kinds["pages"], kinds["photos"]
    words = {k: np.mean([r.n_words for r in v["records"]]) for k, v in kinds.items()}
    sizes = " and ".join(f"{w}x{h}" for w, h in PHOTO_SIZES)
    print(f"Machine: {machine()}. {a.pages} pages of {words['pages']:.0f} words on average (1600x2200 px; JPEG, PNG, "
          f"grayscale, EXIF-rotated) and {a.photos} camera-like photos of {words['photos']:.0f} words ({sizes} JPEG "
          f"at quality {PHOTO_QUALITY}, half stored turned with an EXIF orientation); image size {cfg.image_size}, "
          f"input {cfg.input_size}, map scale {cfg.map_scale}, one core. Median of {a.repeat} runs per image, mean "
          f"over images, as a build's cost per sample is a mean (targets alone: median over pages); the baseline's targets loop over every word of the page, as the common code does. The "
          f"machine may be shared: figures are noisy.\n")
    print(table(["what", "fast path", "fast ms", "baseline", "baseline ms", "speed-up"], [
        [f"whole sample: {k}", "make_sample", ms(v["new"]["total"]), "baseline pipeline", ms(v["baseline"]),
         f"{v['baseline'] / v['new']['total']:.1f}x"] for k, v in kinds.items()] + [targets_rows(pages["records"],
                                                                                               cfg, a.repeat)]))
    print("\nPer sample, ms (stages timed inside make_sample; floor = decode + warp + targets of the same calls):\n")
    stage_rows = [
        ("decode, old (PIL, convert, tobytes)", lambda v: v["old"]["decode"]),
        ("decode (OpenCV, DCT-scaled, EXIF as a view)", lambda v: v["new"]["decode"]),
        ("warp (one affine, EXIF turn folded in)", lambda v: v["new"]["warp"]),
        ("targets", lambda v: v["new"]["targets"]),
        ("write (record row into a mapped .npy + CRC)", lambda v: v["write"]),
        ("floor: decode + warp + targets", lambda v: v["new"]["floor"]),
        ("make_sample, old decode", lambda v: v["old"]["total"]),
        ("make_sample", lambda v: v["new"]["total"]),
        ("build, 1 job, per sample (all / samples), old decode", lambda v: v["build_old"][0]),
        ("build, 1 job, per sample (all / samples)", lambda v: v["build"][0]),
        ("build, 1 job, per extra sample (2 variants less 1)", lambda v: v["build"][1]),
        ("baseline pipeline, on the fly", lambda v: v["baseline"])]
    print(table(["stage", "pages ms", "photos ms"], [[name, ms(f(pages)), ms(f(photos))] for name, f in stage_rows]))
    print("\nRatios (same run):\n")
    ratio_rows = [
        ("build per extra sample / floor", lambda v: v["build"][1] / v["new"]["floor"], f"<= {FLOOR_GOAL}x"),
        ("build per sample (all / samples) / floor", lambda v: v["build"][0] / v["new"]["floor"], "reported"),
        ("baseline / build per extra sample", lambda v: v["baseline"] / v["build"][1],
         f">= {BASELINE_GOAL}x on photos"),
        ("make_sample: old decode / new", lambda v: v["old"]["total"] / v["new"]["total"], "reported"),
        ("build (all / samples): old decode / new", lambda v: v["build_old"][0] / v["build"][0], "reported")]
    print(table(["ratio", "pages", "photos", "goal"],
                [[name, f"{f(pages):.2f}x", f"{f(photos):.2f}x", goal] for name, f, goal in ratio_rows]))


if __name__ == "__main__":
    main()
