"""Scoring speed: `python -m preprocess evaluate` on a synthetic set of many images with many words each.
Predictions are the words jittered by a few pixels, with some words split in two, pairs merged, words missed
and false positives added, so that every kind of match occurs. Prints a markdown table; asserts nothing.

    python benchmarks/bench_eval.py [--images 1000] [--words 100] [--metrics rect,poly]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from common import machine, table

from east_cache.model.scoring import load_ground_truth, load_predictions, score
from east_cache.config import BuildConfig

PAGE = (2000, 2000)          # px, page width and height; words sit on a grid of cells
DONT_CARE_SHARE = 0.1        # words marked illegible
JITTER = 2.0                 # px, standard deviation of a detection's corners around its word's
SHARES = {"split": 0.03, "merge": 0.03, "miss": 0.05, "false": 0.05}   # of the words, per page


def box(x0, y0, x1, y1) -> list:
    return [[float(x0), float(y0)], [float(x1), float(y0)], [float(x1), float(y1)], [float(x0), float(y1)]]


def page(rng: np.random.Generator, n_words: int) -> tuple[dict, dict]:
    """(gt words, predicted words) of one page, UFO style."""
    cols = int(np.ceil(np.sqrt(n_words)))
    cw, ch = PAGE[0] / cols, PAGE[1] / cols
    k = np.arange(n_words)
    x0, y0 = (k % cols) * cw + rng.uniform(0, cw / 4, n_words), (k // cols) * ch + rng.uniform(0, ch / 2, n_words)
    x1, y1 = x0 + rng.uniform(cw / 3, cw * 0.7, n_words), y0 + rng.uniform(12, ch / 3, n_words)
    gt = {str(i + 1): {"points": box(x0[i], y0[i], x1[i], y1[i]), "illegibility": bool(rng.random() < DONT_CARE_SHARE)}
          for i in k}
    det, i = [], 0
    while i < n_words:
        draw, xm = rng.random(), (x0[i] + x1[i]) / 2
        if draw < SHARES["split"]:
            det += [box(x0[i], y0[i], xm, y1[i]), box(xm, y0[i], x1[i], y1[i])]
        elif draw < SHARES["split"] + SHARES["merge"] and i % cols < cols - 1:   # this word and the next one
            det.append(box(x0[i], min(y0[i], y0[i + 1]), x1[i + 1], max(y1[i], y1[i + 1])))
            i += 1
        elif draw > SHARES["split"] + SHARES["merge"] + SHARES["miss"]:
            det.append((np.array(box(x0[i], y0[i], x1[i], y1[i])) + rng.normal(0, JITTER, (4, 2))).tolist())
        i += 1
    det += [box(x, y, x + 40, y + 15) for x, y in rng.uniform(0, PAGE[0] - 40, (int(n_words * SHARES["false"]), 2))]
    return gt, {str(n + 1): {"points": d} for n, d in enumerate(det)}


def write_files(folder: Path, n_images: int, n_words: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    pages = [page(rng, n_words) for _ in range(n_images)]
    gt = {f"img_{i:05d}.jpg": {"img_w": PAGE[0], "img_h": PAGE[1], "words": g} for i, (g, _) in enumerate(pages)}
    pred = {f"img_{i:05d}.jpg": {"words": d} for i, (_, d) in enumerate(pages)}
    (folder / "gt.json").write_text(json.dumps({"images": gt}))
    (folder / "pred.json").write_text(json.dumps({"images": pred}))
    return folder / "gt.json", folder / "pred.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1000, help="images (default 1000)")
    p.add_argument("--words", type=int, default=100, help="words per image (default 100)")
    p.add_argument("--metrics", default="rect,poly", help="comma-separated metrics to time (default rect,poly)")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        gt_path, pred_path = write_files(Path(tmp), a.images, a.words)
        t0 = time.perf_counter()
        gt = load_ground_truth(gt_path, BuildConfig())
        pred = load_predictions(pred_path, gt)
        read = time.perf_counter() - t0
        for metric in a.metrics.split(","):
            t0 = time.perf_counter()
            r = score(gt, pred, metric)
            took = time.perf_counter() - t0
            rows.append([metric, f"{read:.2f}", f"{took:.2f}", f"{took / a.images * 1e3:.2f}", f"{r['hmean']:.4f}"])
    print(f"scoring {a.images} images x {a.words} words; {machine()}\n")
    print(table(["metric", "read both JSON s", "score s", "ms / image", "hmean"], rows))


if __name__ == "__main__":
    main()
