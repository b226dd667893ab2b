"""What a user's own transforms (east-train --augment, Loader(transform=...)) cost a loader worker, and how many worker
cores a GPU then needs. Prints markdown tables; asserts nothing.

Data: camera photos (common.bench_photos: 12 MP phone photos and 8.7 MP A4 pages, JPEG, ~120 words), built with the
default settings (--image-size 2048 --input-size 1024, pages stored resized only) as raw and as jpeg pages.

Arms, each a worker's work per crop as train.py's loader workers do it (inspect/bench_augment.py worker_rate: the compact
item made, the epoch's warp, the recipe, the targets, copied into a batch slot's row; cv2 on one thread; this
process's CPU time), alternated --repeat times, median [min-max]:
- baseline: the reader's own augmentation alone (height, rotation and crop in one warp; the colour jitter runs on the
  device and costs a worker nothing);
- + pixels: GaussNoise, GaussianBlur, CLAHE, HueSaturationValue, Sharpen (p = 0.5 each) and ToGray (p = 0.2), as the
  team recipes the project read add them: pixels only, no keypoints, targets unchanged;
- + Perspective: albumentations' Perspective(scale 0.05-0.1, p = 1), the crop's word corners moved as keypoints and
  the targets made from them: a second warp after the reader's;
- + built-in perspective: the reader's own (Augment(perspective=PERSPECTIVE), east_cache/augment.py), drawn into the
  one warp of height, rotation and crop, no recipe. Its strength is chosen to move a corner as far on average as the
  albumentations arm does (NOTE below says both conventions).
Worker cores a GPU step needs = crops per step / step time / crops per CPU second of one core, for batches of 8
1024-px crops; the step time is train.py's on a GPU: its training step alone in benchmarks/results/gpu_augment.json
(else its samples/s less its data wait in benchmarks/results/gpu.json), scaled to 8 crops, or --gpu-step-ms. A second
table gives each transform's share of the pixel recipe's time (each timed alone on the same crops).

    python benchmarks/bench_augment.py [--photos 4] [--crops 16] [--repeat 3] [--cpu-seconds 1.5] [--gpu-step-ms MS]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import statistics
import tempfile
from pathlib import Path

from common import REPO, bench_photos, machine, table

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.reader import CacheDataset
from east_cache.inspect import bench_augment as worker
from east_cache.reader.recipe import as_transform
from east_cache.build.run import build_cache

BATCH = 8        # crops per GPU step in the cores figure
CODECS = ("raw", "jpeg")
ALBU_SCALE = (0.05, 0.1)   # albumentations Perspective's scale: the sigma range of its corner draws
# albumentations moves each corner inward by |N(0, sigma)| of the side, sigma ~ U[0.05, 0.1]: on average
# 0.075 * sqrt(2 / pi) = 0.060 of it; the reader moves it by U[-p, p] of its source square's side, on average p / 2.
PERSPECTIVE = 0.12
BUILT_IN = f"+ built-in perspective {PERSPECTIVE:g}, in the one warp"
NOTE = (f"Perspective conventions: albumentations' Perspective(scale={ALBU_SCALE[0]:g}-{ALBU_SCALE[1]:g}) draws a "
        f"sigma in that range and moves each corner of the crop inward by |N(0, sigma)| of its side, each coordinate "
        f"alone (mean 0.060), then stretches that quadrilateral back onto the crop: a second warp of the warped crop, "
        f"always a zoom in. The reader's Augment(perspective={PERSPECTIVE:g}) moves each corner of the crop's source "
        f"square by U[-{PERSPECTIVE:g}, {PERSPECTIVE:g}] of its side, each coordinate alone (mean {PERSPECTIVE / 2:g}, "
        f"inward or outward), inside the one warp of height, rotation and crop from the stored page: the same mean "
        f"corner move, no second resampling, the words moved by the same homography.")


def recipes(A) -> dict[str, object]:
    """{arm: the recipe (None: none)}; the BUILT_IN arm draws its perspective in the reader instead."""
    return {"baseline": None,
            "+ pixels (6 transforms)": A.Compose([A.GaussNoise(p=0.5), A.GaussianBlur(p=0.5), A.CLAHE(p=0.5),
                                                  A.HueSaturationValue(p=0.5), A.Sharpen(p=0.5), A.ToGray(p=0.2)]),
            "+ Perspective, words as keypoints": A.Compose([A.Perspective(scale=ALBU_SCALE, p=1)]),
            BUILT_IN: None}


def gpu_step(args) -> tuple[float | None, str]:
    """(seconds of a GPU step of BATCH crops, where the figure comes from)."""
    if args.gpu_step_ms:
        return args.gpu_step_ms / 1e3, "--gpu-step-ms"
    found = augment_gpu_step()
    if found is not None:
        return found
    path = REPO / "benchmarks" / "results" / "gpu.json"
    try:
        result = json.loads(path.read_text())
        rows = next(t for t in result["tables"] if t["header"][:3] == ["codec", "samples/s", "time waiting for data"])
        row = rows["rows"][0]
        rate, wait = float(row[1]), float(row[2].rstrip("%")) / 100
        batch = re.search(r"steps of (\d+) crops", result["output"]).group(1)
    except (OSError, ValueError, KeyError, StopIteration, IndexError, AttributeError):
        return None, f"no GPU figure in {path.relative_to(REPO)}: pass --gpu-step-ms"
    step = BATCH / rate * (1 - wait)
    return step, (f"train.py's {rate:g} samples/s (batches of {batch}, AMP fp16) less its {100 * wait:g}% data wait "
                  f"({row[0]} pages) on {result.get('machine', 'a GPU machine')}, benchmarks/results/gpu.json, "
                  f"scaled to {BATCH} crops")


def augment_gpu_step() -> tuple[float, str] | None:
    """(seconds of a GPU step of BATCH crops, where from) out of bench_gpu_augment.py's result: the training step
    alone (one batch kept on the device, no data wait) of its baseline arm on raw pages; None where it has none."""
    path = REPO / "benchmarks" / "results" / "gpu_augment.json"
    try:
        result = json.loads(path.read_text())
        table_ = next(t for t in result["tables"] if "step alone samples/s" in t["header"])
        row = dict(zip(table_["header"], next(r for r in table_["rows"] if r[:2] == ["baseline", "raw"])))
        rate = float(row["step alone samples/s"])
        batch = re.search(r"batches of (\d+)", result["output"]).group(1)
    except (OSError, ValueError, KeyError, StopIteration, AttributeError):
        return None
    return BATCH / rate, (f"train.py's training step alone, {rate:g} samples/s (batches of {batch}, AMP fp16, "
                          f"1024-px crops) on {result.get('machine', 'a GPU machine')}, "
                          f"benchmarks/results/gpu_augment.json, scaled to {BATCH} crops")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=4, help="camera photos (default 4)")
    ap.add_argument("--crops", type=int, default=16, help="crops per measured pass, over epochs (default 16)")
    ap.add_argument("--repeat", type=int, default=3, help="alternated runs of every arm (default 3)")
    ap.add_argument("--cpu-seconds", type=float, default=1.5, help="CPU seconds of each measurement (default 1.5)")
    ap.add_argument("--gpu-step-ms", type=float,
                    help="a GPU step of 8 crops, ms (default: from results/gpu_augment.json, else gpu.json)")
    args = ap.parse_args(argv)
    import albumentations as A
    root = bench_photos(args.photos)
    arms = recipes(A)
    step, step_from = gpu_step(args)
    work = Path(tempfile.mkdtemp(prefix="east-augment-"))
    try:
        rates, shares = {}, {}
        for codec in CODECS:
            cache = work / codec
            build_cache(BuildConfig(image_codec=codec), [root], cache, jobs=1, quiet=True)
            ds = CacheDataset(cache, compact=True)
            plain = Augment.of_cache(ds.config)
            tilted = dataclasses.replace(plain, perspective=PERSPECTIVE)
            keys = [(k // len(ds), k % len(ds)) for k in range(args.crops)]
            for _ in range(args.repeat):
                for name, recipe in arms.items():
                    ds.augment = tilted if name == BUILT_IN else plain
                    ds.transform = as_transform(recipe)
                    rates.setdefault((codec, name), []).append(worker.worker_rate(ds, keys, args.cpu_seconds))
            pixels = as_transform(arms["+ pixels (6 transforms)"])
            parts = worker.transform_parts(pixels)
            seconds = worker.part_seconds(CacheDataset(cache), keys, parts, args.cpu_seconds)
            shares[codec] = [(n, s, s / sum(seconds)) for (n, _), s in zip(parts, seconds)]
            shutil.rmtree(cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Machine: {machine()}. {args.photos} camera photos (common.bench_photos), input 1024, pages stored resized "
          f"only; {args.crops} crops a pass, each arm {args.repeat} times alternated, >= {args.cpu_seconds:g} CPU s "
          f"each; one process, cv2 on one thread.\n")
    print(f"GPU step of {BATCH} crops: " + (f"{1e3 * step:.0f} ms, {step_from}" if step else step_from) + "\n")
    rows = []
    for codec in CODECS:
        base = statistics.median(rates[(codec, "baseline")])
        for name in arms:
            r = rates[(codec, name)]
            med = statistics.median(r)
            cores = f"{BATCH / step / med:.1f}" if step else "-"
            rows.append([codec, name, f"{med:.1f} [{min(r):.1f}-{max(r):.1f}]", f"{med / base:.2f}", cores])
    print(table(["pages", "worker's work per crop", "crops per CPU s, one core", "x baseline",
                 f"worker cores for a GPU step of {BATCH}"], rows))
    print(f"\n{NOTE}")
    print("\nEach transform of the pixel recipe alone, same crops (ms of CPU per crop, share of their sum):\n")
    print(table(["pages", "transform", "ms per crop", "share"],
                [[codec, n, f"{1e3 * s:.2f}", f"{100 * f:.0f}%"] for codec in CODECS for n, s, f in shares[codec]]))


if __name__ == "__main__":
    main()
