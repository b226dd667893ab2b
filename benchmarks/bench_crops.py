"""What training sees and what it costs, per crop mode: page mode (--crop read, a new crop every epoch), frozen
build-time crops (--crop build, K = 1 and 4 variants) and the on-the-fly reference (dataset/onthefly.py, a
fresh make_sample every epoch). Prints markdown tables; asserts nothing.

- word coverage: the share of legible words seen whole in at least one training crop after N epochs, on the
  built-in sample set (default build settings) and on a camera-photo-like set (1280 x 720 JPEGs, fewer
  words, --image-size 1280 --input-size 512, the ICDAR 2015 setting);
- distinct crops per image over 10 epochs, and the share of text-free crops;
- bytes per image per variant and build time per image, both modes (a real build of each set);
- read speed through train.py's feeding path (DataLoader + collate + the prefetch thread), per mode, as a
  ratio to one core's memcpy of the bytes a batch delivers.

    python benchmarks/bench_crops.py [--images 12] [--photos 10] [--epochs 1,5,20,50] [--batches 20]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from common import BENCH_DATA, machine, table, write_sample_dataset

from preprocess.config import BuildConfig
from preprocess.ingest.ufo import CARE, load_splits
from preprocess.sample.make import choose_sample_crop
from preprocess.sample.page import make_page
from preprocess.sample.window import grid_step, word_boxes
from preprocess.store.layout import Layout
from preprocess.tools.coverage import build_mode, coverage, page_mode

DISTINCT_EPOCHS = 10   # "distinct crops per image over 10 epochs"
PHOTO = dict(image_size=1280, input_size=512)   # the ICDAR 2015 setting of the measurement


def data_sets(images: int, photos: int) -> list[tuple[str, Path, BuildConfig]]:
    sample = write_sample_dataset(BENCH_DATA / f"crops-sample-{images}", n_images=images, seed=0)
    photo = write_sample_dataset(BENCH_DATA / f"crops-photo-{photos}", n_images=photos, words_per_page=15,
                                 page_size=(1280, 720), seed=3)
    return [(f"sample set ({images} pages)", sample, BuildConfig()),
            (f"photo-like ({photos} x 1280x720)", photo, BuildConfig(**PHOTO))]


def offsets(names: list[str], variants: int, seed: int) -> np.ndarray:
    """Per-image variant offsets, as a cache of any strategy but batch draws them."""
    return Layout("image", len(names), variants, 1, 1).variant_offsets(names, seed)


def coverage_rows(data: Path, cfg: BuildConfig, epochs: tuple[int, ...]) -> list[list]:
    recs, _ = load_splits([data], "train", cfg)
    names, legible = [r.name for r in recs], [int((r.reason == CARE).sum()) for r in recs]
    pages = []
    for r in recs:
        p = make_page(r, cfg, 0)
        pages.append([(word_boxes(p.points, p.offsets)[p.care > 0], p.size, p.weight)])
    modes = {"page mode (--crop read, K=1)": page_mode(names, pages, offsets(names, 1, cfg.seed),
                                                       cfg.seed, cfg.input_size, grid_step(cfg.map_scale))}
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=12, help="pages of the sample set (default 12, as the built-in set)")
    ap.add_argument("--photos", type=int, default=10, help="photo-like images (default 10)")
    ap.add_argument("--epochs", default="1,5,20,50", help="epoch counts of the coverage table")
    a = ap.parse_args()
    epochs = tuple(int(e) for e in a.epochs.split(","))
    print(f"# Crop modes\n\n{machine()}\n")
    for label, data, cfg in data_sets(a.images, a.photos):
        print(f"## Word coverage: {label}, --image-size {cfg.image_size} --input-size {cfg.input_size}\n")
        header = ["mode", *(f"{e} epoch{'s' * (e > 1)}" for e in epochs), f"distinct crops / image ({DISTINCT_EPOCHS} ep.)",
                  "text-free crops"]
        print(table(header, coverage_rows(data, cfg, epochs)), "\n")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
