"""Ensembles: what fusing several predictions gains, and what it costs. Prints markdown tables; asserts nothing.

1. The generated set (tests/ensemble_data.py): a ground truth of turned words and five noisy copies of it, each
   independently missing 15% of the words, adding 10% false ones, moving every corner by up to 3 px and drawing
   every score. Rect and polygon DetEval hmean of each copy, of `east-cache ensemble`'s quad fusion at several
   --iou, and of a rectangle weighted-box-fusion baseline as teams ran it (each quad's enclosing axis-aligned
   rectangle fused, the word's rotation lost; written here after the published description of weighted box
   fusion, not its code): clustered greedily by score against each cluster's fused box at IoU > --iou, the box
   the score-weighted mean of its members', kept where --votes files found it.
2. Two fold models trained briefly on the CPU on the sample set (`east-cache split` into two folds, a build and
   a short east-train each): each alone on the held-out val split, their maps averaged (east-predict
   --checkpoint A --checkpoint B), their words fused (--fuse quads), and each at two test scales (--scales).
3. Seconds to fuse 5 files x 1,000 images x 100 words: reading the files (JSON to quads) and fusing, apart.

    python benchmarks/bench_ensemble.py [--images 200] [--words 20] [--steps 150] [--speed-images 1000]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from common import machine, table
from ensemble_data import NOISE, ground_truth, noisy_copies

from east_cache.evaluate.deteval_rect import quad_rects
from east_cache.evaluate.ensemble import IOU, default_votes, fuse
from east_cache.evaluate.predictions import read_quads, write_predictions
from east_cache.evaluate.scoring import Words, score

COPIES = 5
IOUS = (0.3, 0.5, 0.7)      # --iou values measured on the generated set
FOLD_STEPS = 40             # training steps of each fold model (a CPU step of 8 crops of 64 px: seconds)
CROP = 64                   # px, the fold caches' --input-size
SCALES = (192, 256)         # test-time scales of the fold models (the caches' image size first)


def rect_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of rectangles a (4,) with each of b (K, 4), (xmin, ymin, xmax, ymax)."""
    w = np.clip(np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]), 0, None)
    h = np.clip(np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]), 0, None)
    inter = w * h
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area - inter, 1e-9)


def rect_wbf(results: list[dict], iou: float, votes: int) -> dict:
    """The rectangle baseline (module docstring), per image: {name: (rectangles as quads, scores)}."""
    out = {}
    for name in sorted(set().union(*results)):
        rects, scores, files = [], [], []
        for f, r in enumerate(results):
            if name in r:
                rects.append(quad_rects(r[name][0]))
                scores.append(r[name][1])
                files.append(np.full(len(r[name][1]), f))
        rects, scores, files = np.concatenate(rects), np.concatenate(scores), np.concatenate(files)
        fused, weights, members = [], [], []
        for k in np.argsort(-scores, kind="stable"):
            if fused:
                ious = rect_iou(rects[k], np.array(fused))
                best = int(np.argmax(ious))
                if ious[best] > iou:
                    w = weights[best]
                    fused[best] = (fused[best] * w + rects[k] * scores[k]) / (w + scores[k])
                    weights[best] += scores[k]
                    members[best].add(int(files[k]))
                    continue
            fused.append(rects[k].astype(np.float64))
            weights.append(float(scores[k]))
            members.append({int(files[k])})
        kept = [k for k in range(len(fused)) if len(members[k]) >= votes]
        boxes = np.array([fused[k] for k in kept]).reshape(-1, 4)
        quads = np.stack([boxes[:, [0, 1]], boxes[:, [2, 1]], boxes[:, [2, 3]], boxes[:, [0, 3]]], axis=1)
        out[name] = (quads, np.array([weights[k] / len(results) for k in kept]))
    return out


def hmeans(gt: dict, result: dict) -> tuple[str, str]:
    g = {k: Words.from_quads(v) for k, v in gt.items()}
    p = {k: Words.from_quads(q) for k, (q, _) in result.items()}
    return tuple(f"{score(g, p, metric)['hmean']:.4f}" for metric in ("rect", "poly"))


def generated_set(images: int, words: int) -> None:
    gt = ground_truth(images, words, seed=3)
    copies = noisy_copies(gt, COPIES, seed=10)
    votes = default_votes(COPIES)
    rows = [[f"copy {k + 1}", "", *hmeans(gt, c)] for k, c in enumerate(copies)]
    for iou in IOUS:
        rows.append([f"ensemble (quads){' (default --iou)' if iou == IOU else ''}", f"--iou {iou} --votes {votes}",
                     *hmeans(gt, fuse(copies, iou=iou))])
    rows.append(["ensemble (quads), union", f"--iou {IOU} --votes 1", *hmeans(gt, fuse(copies, votes=1))])
    rows.append(["ensemble (quads), intersection", f"--iou {IOU} --votes {COPIES}",
                 *hmeans(gt, fuse(copies, votes=COPIES))])
    for iou in IOUS:
        rows.append(["rectangle WBF baseline", f"IoU {iou}, {votes} votes", *hmeans(gt, rect_wbf(copies, iou, votes))])
    print(f"### The generated set: {images} images x {words} turned words, {COPIES} noisy copies (each: "
          f"{NOISE['missed']:.0%} missed, {NOISE['false']:.0%} false, corners moved up to {NOISE['jitter']:g} px, "
          f"scores drawn)\n")
    print(table(["predictions", "fusion", "rect DetEval hmean", "polygon DetEval hmean"], rows))


def speed(images: int, words: int) -> None:
    gt = ground_truth(images, words, seed=4)
    copies = noisy_copies(gt, COPIES, seed=20)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"copy{k}.json" for k in range(COPIES)]
        for path, c in zip(paths, copies):
            write_predictions(path, c)
        t0 = time.perf_counter()
        read = [read_quads(path) for path in paths]
        reading = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    fused = fuse(read)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    total = sum(len(q) for c in read for q, _ in c.values())
    print(f"\n### Fusing speed: {COPIES} files x {images} images x {words} words (CPU s: this process's, which other "
          f"processes on a shared machine stretch less than the wall clock's)\n")
    print(table(["words in", "words out", "read the files s", "fuse s", "fuse CPU s", "fused words / s"],
                [[total, sum(len(q) for q, _ in fused.values()), f"{reading:.2f}", f"{took:.2f}", f"{cpu:.2f}",
                  f"{total / took:,.0f}"]]))


def quiet(main, argv: list[str]) -> None:
    """A command's main() with its output swallowed; a failure raises with its last lines."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"{argv}: exit {status}: {err.getvalue()[-1000:]}")


def fold_models(steps: int, pages: int) -> None:
    """Two fold models on the sample set, each alone and combined (module docstring, 2)."""
    from east_cache import cli
    from east_cache.train import train
    from east_cache.predict import predict
    from east_cache.tools.sampledata import write_sample_dataset
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root, here = Path(tmp) / "data", Path(tmp)
        write_sample_dataset(root, n_images=pages, words_per_page=10, page_size=(320, 240), seed=0, split="train")
        write_sample_dataset(root, n_images=max(2, pages // 2), words_per_page=10, page_size=(320, 240), seed=5,
                             split="val")
        quiet(cli.main, ["split", "--data", str(root), "--split", "train", "--folds", "2"])
        t0 = time.perf_counter()
        for k in (0, 1):
            quiet(cli.main, ["build", "--data", str(root), "--split", f"train{k}", "--out", str(here / f"cache{k}"),
                             "--image-size", str(SCALES[0]), "--input-size", str(CROP), "--jobs", "1",
                             "--quiet"])
            quiet(train.main, ["--cache", str(here / f"cache{k}"), "--out", str(here / f"run{k}"), "--device", "cpu",
                               "--max-steps", str(steps), "--batch-size", "8", "--workers", "0", "--backbone-weights",
                               "random", "--lr", "1e-3", "--log-every", "1000", "--save-every", "100000",
                               "--epochs", "100000"])
        trained = time.perf_counter() - t0
        cks = [str(here / f"run{k}" / "latest.pt") for k in (0, 1)]
        gt = str(root / "ufo" / "val.json")
        arms = [(f"fold {k}", ["--checkpoint", cks[k]]) for k in (0, 1)]
        arms += [("folds 0 + 1, maps averaged", ["--checkpoint", cks[0], "--checkpoint", cks[1], "--fuse", "maps"]),
                 ("folds 0 + 1, quads fused", ["--checkpoint", cks[0], "--checkpoint", cks[1], "--fuse", "quads"])]
        arms += [(f"fold {k}, scales {','.join(map(str, SCALES))}",
                  ["--checkpoint", cks[k], "--scales", ",".join(map(str, SCALES))]) for k in (0, 1)]
        arms += [("folds 0 + 1 maps averaged, two scales",
                  ["--checkpoint", cks[0], "--checkpoint", cks[1], "--scales", ",".join(map(str, SCALES))])]
        for k, (what, flags) in enumerate(arms):
            out = here / f"pred{k}.json"
            quiet(predict.main, [*flags, "--data", str(root), "--split", "val", "--out", str(out), "--device", "cpu",
                                 "--quiet"])
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                cli.main(["evaluate", "--gt", gt, "--pred", str(out), "--json"])
            r = json.loads(buf.getvalue())
            rows.append([what, f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['hmean']:.4f}", r["detections"]])
    print(f"\n### Two fold models on the sample set ({pages} train pages in 2 folds, {steps} CPU steps each of batch 8 "
          f"at {CROP} px crops, random backbone: {trained:.0f} s; scored on {max(2, pages // 2)} held-out val pages, "
          f"rect DetEval; two fused passes keep a word both found, --votes defaulting to a majority)\n")
    print(table(["predictions", "precision", "recall", "hmean", "detections"], rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200, help="images of the generated set (default 200)")
    p.add_argument("--words", type=int, default=20, help="words per image of the generated set (default 20)")
    p.add_argument("--steps", type=int, default=FOLD_STEPS, help=f"training steps per fold model (default "
                                                                 f"{FOLD_STEPS}; 0 skips the fold models)")
    p.add_argument("--pages", type=int, default=16, help="sample set training pages for the folds (default 16)")
    p.add_argument("--speed-images", type=int, default=1000, help="images of the fusing-speed test (default 1000)")
    p.add_argument("--speed-words", type=int, default=100, help="words per image there (default 100)")
    a = p.parse_args()
    print(f"{machine()}\n")
    generated_set(a.images, a.words)
    speed(a.speed_images, a.speed_words)
    if a.steps:
        fold_models(a.steps, a.pages)


if __name__ == "__main__":
    main()
