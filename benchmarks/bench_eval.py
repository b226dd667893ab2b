"""Evaluation speed: `python -m preprocess evaluate` on a synthetic set of many images with many words each, and
decode_maps (maps -> quads, locality-aware NMS) on one full page's maps. Predictions are the words jittered by a
few pixels, with some words split in two, pairs merged, words missed and false positives added, so that every
kind of match occurs. Prints markdown tables; asserts nothing.

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

from east_cache.model.decode import decode_maps
from east_cache.evaluate.scoring import load_ground_truth, load_predictions, score
from east_cache.config import BuildConfig
from east_cache.sample.targets import make_targets

PAGE = (2000, 2000)          # px, page width and height; words sit on a grid of cells
DONT_CARE_SHARE = 0.1        # words marked illegible
JITTER = 2.0                 # px, standard deviation of a detection's corners around its word's
SHARES = {"split": 0.03, "merge": 0.03, "miss": 0.05, "false": 0.05}   # of the words, per page
DECODE_PAGE = 1024           # px, side of the page whose maps (x0.5: 512 x 512) decode_maps turns into quads
DECODE_WORDS = 20            # turned words on it, in 4 rows of 5
DECODE_REPEATS = 5           # timed decodes; the fastest is reported


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


def decode_seconds() -> tuple[int, float]:
    """(positive map pixels, fastest seconds) of decode_maps on the maps of DECODE_WORDS words turned by up to 20
    degrees on a DECODE_PAGE px page."""
    rng = np.random.default_rng(0)
    quads = []
    for k in range(DECODE_WORDS):
        w, h, t = rng.uniform(140, 180), rng.uniform(48, 64), np.radians(rng.uniform(-20, 20))
        turn = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        centre = (100 + 205 * (k % 5), 60 + 250 * (k // 5))
        quads.append(np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2 @ turn.T + centre)
    score, geo, _ = make_targets(np.concatenate(quads).astype(np.float32), np.arange(DECODE_WORDS + 1) * 4,
                                 np.ones(DECODE_WORDS, np.uint8), DECODE_PAGE, 0.5)
    times = []
    for _ in range(DECODE_REPEATS):
        t0 = time.perf_counter()
        decode_maps(score.astype(np.float32), geo, 0.5)
        times.append(time.perf_counter() - t0)
    return int(score.sum()), min(times)


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
    positives, took = decode_seconds()
    m = round(DECODE_PAGE * 0.5)
    print(f"\ndecode_maps on one page's maps, fastest of {DECODE_REPEATS}\n")
    print(table(["map", "positive px", "words", "s"], [[f"{m} x {m}", positives, DECODE_WORDS, f"{took:.3f}"]]))


if __name__ == "__main__":
    main()
