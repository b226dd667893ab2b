"""Whole-sample speed: preprocess.sample.make_sample (decode at reduced size -> one affine warp -> targets)
against a plain sequential pipeline built the way the common baseline builds a sample (PIL open, resize
the long side, height jitter, rotate, crop retry loop, then the plain reference targets of
tests/reference.py), and the targets alone on the same crops. Document-like pages of ~120 words, the
default sizes. Prints a markdown table; asserts nothing.

    python benchmarks/bench_sample.py [--pages 8] [--repeat 3]
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from common import FAST_REPEATS, bench_pages, machine, median_over, table
from PIL import Image, ImageOps
from reference import reference_targets

from preprocess.config import BuildConfig
from preprocess.ingest.ufo import CARE, load_splits
from preprocess.sample.make import make_sample
from preprocess.sample.targets import make_targets


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


def rows(records: list, samples: list, cfg: BuildConfig, repeat: int) -> list[list]:
    """Whole sample and targets alone (on the words of `samples`, the records' variant-0 crops): median
    ms per page of the fast path and of the baseline."""
    pages = list(zip(records, samples, range(len(records))))
    fast = median_over(pages, lambda p: make_sample(p[0], cfg, 0), repeat)
    base = median_over(pages, lambda p: baseline_sample(p[0], cfg, np.random.default_rng(p[2])), repeat)
    crop = lambda s: (s.points, s.offsets, s.care, cfg.input_size, cfg.map_scale)  # noqa: E731
    fast_t = median_over(pages, lambda p: make_targets(*crop(p[1])), repeat * FAST_REPEATS)
    ref_t = median_over(pages, lambda p: reference_targets(*crop(p[1])), repeat)
    return [["whole sample: decode, augment, crop, targets", "make_sample", f"{fast * 1e3:.0f}",
             "baseline pipeline", f"{base * 1e3:.0f}", f"{base / fast:.1f}x"],
            ["targets alone, same crops", "make_targets", f"{fast_t * 1e3:.1f}",
             "reference_targets", f"{ref_t * 1e3:.0f}", f"{ref_t / fast_t:.0f}x"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=8, help="sample pages timed (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per page; the median is kept (default 3)")
    a = p.parse_args()
    cfg = BuildConfig()
    records, _ = load_splits([bench_pages(a.pages)], "train", cfg)
    samples = [make_sample(r, cfg, 0) for r in records]
    table_rows = rows(records, samples, cfg, a.repeat)
    page_words = np.mean([r.n_words for r in records])
    crop_words = np.mean([len(s.care) for s in samples])
    print(f"Machine: {machine()}. {a.pages} pages of {page_words:.0f} words on average (1600x2200 px; JPEG, PNG, "
          f"grayscale, EXIF-rotated); image size {cfg.image_size}, input {cfg.input_size}, map scale {cfg.map_scale}. "
          f"A crop holds {crop_words:.0f} words on average; the baseline's targets loop over every word of the page, "
          f"as the common code does, the targets-alone row gives both the crop's words. Median of {a.repeat} runs "
          f"per page, median over pages.\n")
    print(table(["what", "fast path", "fast ms", "baseline", "baseline ms", "speed-up"], table_rows))


if __name__ == "__main__":
    main()
