"""Training and prediction on the device they run on (a CUDA GPU; `--device cpu` runs the same code on a CPU, the
check that CI can afford): reading (raw pages; jpeg pages decoded by the loader workers on the CPU and by nvJPEG
on the device, with the CPU cores each keeps busy), train.py's steps at steady state with their share of time
waiting for data per epoch and where that wait goes, and full-image prediction at steady state with where its
time goes. Prints markdown tables; with --device cuda and no CUDA device it prints a note and measures nothing.

    python benchmarks/bench_gpu.py                       # the issue's sizes: 1000 crops per epoch, 3 epochs ...
    python benchmarks/bench_gpu.py --quick --device cpu  # seconds: that every arm runs, no figure worth keeping
    python benchmarks/bench_gpu.py --arms steady --images 2000 --epochs 4

Data: generated document pages (1600x2200 px, ~120 words): --distinct pages, listed --images times under names of
their own (common.repeated_pages), built once per codec at --image-size / --input-size (map scale 0.5). Each arm's
size is a flag; benchmarks/gpu_session.sh sizes them all for one session on a GPU machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from dataclasses import fields

import torch
from common import (
    arm_parser,
    bench_pages,
    measured_device,
    parse_arms,
    process_tree_cpu_seconds,
    repeated_pages,
    table,
)
from gpu_predict import prediction, prediction_rows
from gpu_steady import Steady, steady_epochs, steady_tables

from east_cache.config import BuildConfig
from east_cache.reader import CacheDataset, Loader
from east_cache.reader import jpeg_device
from east_cache.reader.jpeg_device import nvjpeg
from east_cache.reader.loader import loader_workers
from east_cache.build.run import build_cache

ARMS = ("read", "steady", "predict")
QUICK = {"images": 4, "distinct": 2, "epochs": 2, "batch_size": 2, "image_size": 192, "input_size": 64,
         "read_epochs": 1, "predict_pages": 2, "predict_image_size": 128, "predict_batch": 2, "profile_steps": 1,
         "repeat": 1, "step_repeats": 2}


# nvJPEG decodes the tiles of pages stored warped (--geometry build) only: a page warped at read time is decoded
# and warped by the workers. Where the build has the choice, the nvJPEG rows read such a cache.
STORED_WARPED = {"geometry": "build"} if "geometry" in {f.name for f in fields(BuildConfig)} else {}


def cache_of(data, codec: str, image_size: int, input_size: int, jobs: int, **extra):
    out = data.parent / f"{data.name}-cache-{codec}-{image_size}-{input_size}{''.join(f'-{v}' for v in extra.values())}"
    build_cache(BuildConfig(image_codec=codec, image_size=image_size, input_size=input_size, **extra), [data], out,
                jobs=jobs, quiet=True)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def read_rate(cache, batch_size: int, workers: int | None, device: torch.device, device_decode: bool,
              epochs: int) -> tuple[float, int, float | None]:
    """(crops/s to the device, crops per epoch, busy CPU cores of this process and its workers) through Loader,
    after a warm-up epoch."""
    loader = Loader(cache, batch_size, device=device, workers=workers, normalize="imagenet",
                    nvjpeg_decode=device_decode)
    with loader:
        n = sum(len(b.image) for b in loader)   # warm-up: workers started, pages mapped in
        sync(device)
        cpu0, t0 = process_tree_cpu_seconds(), time.perf_counter()
        for _ in range(epochs):
            for _ in loader:
                pass
        sync(device)
        seconds, cpu1 = time.perf_counter() - t0, process_tree_cpu_seconds()
    return epochs * n / seconds, n, (cpu1 - cpu0) / seconds if cpu0 is not None else None


@contextmanager
def counted_decoder():
    """While active, every call of the batched device decoder (jpeg_device.nvjpeg's) is appended to the list it
    yields (its stream count): a batch's tiles should take one call."""
    real, calls = jpeg_device.torchvision_decode_jpeg, []

    def counting():
        decode = real()
        if decode is None:
            return None

        def count(data, **kw):
            calls.append(len(data))
            return decode(data, **kw)
        return count
    jpeg_device.torchvision_decode_jpeg = counting
    try:
        yield calls
    finally:
        jpeg_device.torchvision_decode_jpeg = real


def h2d_rate(nbytes: int, repeat: int = 50) -> float:
    """Pinned host-to-device copies of nbytes per second."""
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeat):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return repeat / (time.perf_counter() - t0)


def read_arm(caches: dict, a, device: torch.device) -> None:
    cuda = device.type == "cuda"
    side = a.input_size
    crop_bytes = 3 * side * side + 2 * (side // 2) ** 2   # the image and packed maps of one crop
    copy = h2d_rate(a.batch_size * crop_bytes) * a.batch_size if cuda else None
    workers = a.workers if a.workers is not None else loader_workers(CacheDataset(caches["jpeg"], compact=True), device)
    rows = []
    arms = [("raw pages", "raw", False), ("jpeg, decoded by the workers", "jpeg", False)]
    if STORED_WARPED:
        arms.append(("jpeg stored warped (--geometry build), decoded by the workers", "jpeg-warped", False))
    arms.append((("jpeg stored warped (--geometry build), " if STORED_WARPED else "jpeg, ") + "decoded by nvJPEG",
                 "jpeg-warped" if STORED_WARPED else "jpeg", True))
    for label, codec, device_decode in arms:
        if device_decode and not cuda:
            rows.append([label, "skipped: no CUDA", "", "", "", ""])
            continue
        if device_decode and nvjpeg(device) is None:
            rows.append([label, "skipped: no torchvision with batched decode_jpeg", "", "", "", ""])
            continue
        with counted_decoder() as calls:
            rate, n, cores = read_rate(caches[codec], a.batch_size, workers, device, device_decode, a.read_epochs)
        per_batch = f"{len(calls) / ((a.read_epochs + 1) * (n // a.batch_size)):.2f}" if device_decode else ""
        rows.append([label, f"{rate:.0f}", f"{rate / copy:.3f}" if copy else "n/a",
                     f"{cores:.1f}" if cores is not None else "n/a", str(n), per_batch])
    ref = f"pinned host-to-device copies of a crop's bytes, {copy:.0f} crops/s" if copy else "none on a CPU"
    print(f"Reading to the {device.type} through east_cache.Loader ({workers} workers, batches of {a.batch_size} "
          f"{side}-px crops, normalised on the device), {a.read_epochs} epoch(s) after a warm-up one; reference: "
          f"{ref}; busy CPU cores: CPU seconds of this process and its workers over the wall time\n")
    print(table(["reader", "crops/s", "/ pinned copy", "busy CPU cores", "crops per epoch", "nvJPEG calls per batch"],
                rows))


def steady_arm(caches: dict, a, device: torch.device) -> None:
    amp = "fp16" if device.type == "cuda" else "off"   # train.py refuses fp16 off CUDA
    cfg = Steady(epochs=a.epochs, batch_size=a.batch_size, amp=amp, profile_steps=a.profile_steps,
                 step_repeats=a.step_repeats)
    results = {codec: steady_epochs(caches[codec], cfg, device) for codec in ("raw", "jpeg")}
    per_epoch, where, ops = steady_tables(results)
    crops = len(CacheDataset(caches["raw"]))
    print(f"\ntrain.py's epochs at steady state: engine.train_one_epoch on train.py's loader (workers as train.py "
          f"picks them), {a.epochs} epochs of {crops} {a.input_size}-px crops in batches of {a.batch_size}, AMP "
          f"{amp}{' with loss scaling' if amp == 'fp16' else ''}, random backbone, on {device.type}\n")
    print(table(["codec", "epoch", "samples/s", "time waiting for data", "seconds", "loss"], per_epoch))
    print("\nWhere the wait goes, epochs after the first: the training step alone on one batch kept on the device, "
          "and the loader alone (an epoch read to the device with nothing else running); loader / step below 1 "
          "means the reader cannot keep up, above 1 with a wait means the two slow each other down\n")
    print(table(["codec", "reading", "training samples/s", "waiting", "step alone samples/s",
                 "loader alone samples/s", "loader / step"], where))
    if ops:
        print(f"\ntorch.profiler, the last {a.profile_steps} step(s) of the last epoch: the host ops with the most "
              f"self CPU time\n")
        print(table(["codec", "op", "self CPU ms per step", "calls per step"], ops))


def predict_arm(a, device: torch.device) -> None:
    data = bench_pages(a.predict_pages)
    r = prediction(data, a.predict_image_size, a.predict_batch, device, a.repeat)
    summary, stages = prediction_rows(r)
    print(f"\nFull-image prediction at steady state (the model loaded, its first batch apart): predict() over "
          f"{r['pages']} pages of 1600x2200 px at --image-size {a.predict_image_size}, batches of "
          f"{a.predict_batch}, on {device.type}{', fp16 autocast' if device.type == 'cuda' else ''}. The untrained "
          f"model's maps are replaced by the pages' ground-truth maps, so that map decoding costs what it does "
          f"for a trained one\n")
    print(table(["pages", "s per image", "stages' sum, s per image", "candidate pixels per image",
                 "merged quads per image"], [summary]))
    print("\nWhere the time goes, one stage after the other on one thread (predict overlaps loading with the "
          "model); the decode as it was before it was vectorised, on the same maps, for the ratio\n")
    print(table(["stage", "ms per image", "share"], stages))


def parse(argv=None) -> argparse.Namespace:
    p = arm_parser(__doc__.splitlines()[0], ARMS, "tiny sizes for every arm unless given (a CPU check run)")
    p.add_argument("--images", type=int, default=1000, help="pages in the cache: crops per epoch (default 1000)")
    p.add_argument("--distinct", type=int, default=48, help="distinct generated pages among them (default 48)")
    p.add_argument("--epochs", type=int, default=3, help="steady arm: epochs (default 3)")
    p.add_argument("--batch-size", type=int, default=12, help="crops per batch (default 12)")
    p.add_argument("--image-size", type=int, default=2048, help="cache pages' long side, px (default 2048)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--workers", type=int, help="read arm: loader workers (default: as train.py picks them)")
    p.add_argument("--read-epochs", type=int, default=2, help="read arm: timed epochs (default 2)")
    p.add_argument("--step-repeats", type=int, default=10,
                   help="steady arm: timed steps of the step alone (default 10)")
    p.add_argument("--profile-steps", type=int, default=10, help="steady arm: profiled steps (default 10; 0: none)")
    p.add_argument("--predict-pages", type=int, default=24, help="predict arm: pages (default 24)")
    p.add_argument("--predict-image-size", type=int, default=2048, help="predict arm: --image-size (default 2048)")
    p.add_argument("--predict-batch", type=int, default=4, help="predict arm: images per batch (default 4)")
    p.add_argument("--repeat", type=int, default=3, help="predict arm: timed runs per stage (default 3)")
    p.add_argument("--jobs", type=int, default=8, help="build jobs (default 8)")
    return parse_arms(p, argv, QUICK, ARMS)


def main(argv=None) -> int:
    a = parse(argv)
    device = measured_device(a.device, lambda d: f"; nvJPEG through torchvision: {'yes' if nvjpeg(d) else 'no'}")
    if device is None:
        return 0
    arms = a.arms.split(",")
    caches = {}
    if {"read", "steady"} & set(arms):
        data = repeated_pages(a.images, a.distinct)
        caches = {codec: cache_of(data, codec, a.image_size, a.input_size, a.jobs) for codec in ("raw", "jpeg")}
        if "read" in arms and STORED_WARPED:
            caches["jpeg-warped"] = cache_of(data, "jpeg", a.image_size, a.input_size, a.jobs, **STORED_WARPED)
    if "read" in arms:
        read_arm(caches, a, device)
    if "steady" in arms:
        steady_arm(caches, a, device)
    if "predict" in arms:
        predict_arm(a, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
