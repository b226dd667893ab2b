"""The CUDA paths, measured on the GPU they run on: reading (raw pages; jpeg pages decoded by the loader workers on
the CPU and by nvJPEG on the device), train.py's AMP fp16 steps with their share of time waiting for data, and
full-image prediction. Prints markdown tables; without a CUDA device it prints a note and measures nothing.

    python benchmarks/bench_gpu.py [--images 48] [--steps 40] [--batch-size 12] [--workers 4]

Data: the built-in sample pages at benchmark scale (common.bench_pages), built at the default settings (2048-px
pages, 1024-px crops, map scale 0.5) once per codec. Reading is timed through east_cache.Loader, the public path
train.py reads by, to the device (torch.cuda.synchronize at the end), after one warm-up epoch; its reference is a
pinned host-to-device copy of the same bytes per crop.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import REPO, bench_pages, machine, table

import torch

from east_cache.config import BuildConfig
from east_cache.reader import Loader
from east_cache.reader.jpeg_device import nvjpeg
from east_cache.store.build import build_cache


def cache_of(data, codec: str, jobs: int):
    out = data.parent / f"{data.name}-cache-{codec}"
    build_cache(BuildConfig(image_codec=codec), [data], out, jobs=jobs, quiet=True)
    return out


def read_rate(cache, batch_size: int, workers: int, device_decode: bool, epochs: int) -> tuple[float, int]:
    """(crops/s to the device, crops per epoch) through Loader, after a warm-up epoch."""
    loader = Loader(cache, batch_size, device="cuda", workers=workers, normalize="imagenet", nvjpeg_decode=device_decode)
    with loader:
        n = sum(len(b.image) for b in loader)   # warm-up: workers started, pages mapped in
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(epochs):
            for _ in loader:
                pass
        torch.cuda.synchronize()
        return epochs * n / (time.perf_counter() - t0), n


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


def train_run(cache, out, steps: int, batch_size: int, workers: int) -> dict:
    """train.py for `steps` AMP fp16 steps; the last epoch record of its log, and its wall time."""
    cmd = [sys.executable, str(REPO / "train.py"), "--cache", str(cache), "--out", str(out), "--max-steps", str(steps),
           "--batch-size", str(batch_size), "--workers", str(workers), "--amp", "fp16", "--backbone-weights",
           "random", "--log-every", "10", "--device", "cuda"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"train.py failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    epochs = [r for r in records if "data_wait" in r]
    return {**epochs[-1], "wall_s": time.perf_counter() - t0, "checkpoint": out / "latest.pt"}


def predict_run(checkpoint, data, out) -> tuple[float, int]:
    """(s per image, images) of east-predict on a data set's full images, the model load excluded as far as a
    second run of the same command cannot tell: the command's wall time over its image count."""
    images = len(json.loads((data / "ufo" / "train.json").read_text())["images"])
    cmd = [sys.executable, str(REPO / "predict.py"), "--checkpoint", str(checkpoint), "--data", str(data),
           "--split", "train", "--out", str(out), "--device", "cuda", "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"predict failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return (time.perf_counter() - t0) / images, images


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=48, help="sample pages (default 48)")
    p.add_argument("--steps", type=int, default=40, help="train.py steps per codec (default 40)")
    p.add_argument("--batch-size", type=int, default=12, help="crops per batch (default 12)")
    p.add_argument("--workers", type=int, default=4, help="loader worker processes (default 4)")
    p.add_argument("--epochs", type=int, default=3, help="timed read epochs per setting (default 3)")
    p.add_argument("--jobs", type=int, default=8, help="build jobs (default 8)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("No CUDA device here: nothing measured (run this on a machine with an NVIDIA GPU).")
        return 0
    print(f"Machine: {machine()}; {torch.cuda.get_device_name()}, torch {torch.__version__}; nvJPEG through "
          f"torchvision: {'yes' if nvjpeg(torch.device('cuda')) else 'no'}; pages --geometry "
          f"{BuildConfig.geometry}\n")
    data = bench_pages(a.images)
    caches = {codec: cache_of(data, codec, a.jobs) for codec in ("raw", "jpeg")}

    crop_bytes = 3 * 1024 * 1024 + 2 * 512 * 512   # the image and packed maps of one 1024-px crop
    copy = h2d_rate(a.batch_size * crop_bytes) * a.batch_size
    rows = []
    for label, codec, device_decode in (("raw pages", "raw", False), ("jpeg, decoded by the workers", "jpeg", False),
                                        ("jpeg, decoded by nvJPEG", "jpeg", True)):
        if device_decode and nvjpeg(torch.device("cuda")) is None:
            rows.append([label, "no torchvision: not measured", "", ""])
            continue
        rate, n = read_rate(caches[codec], a.batch_size, a.workers, device_decode, a.epochs)
        rows.append([label, f"{rate:.0f}", f"{rate / copy:.3f}", str(n)])
    print(f"Reading to the GPU through east_cache.Loader ({a.workers} workers, batches of {a.batch_size} 1024-px "
          f"crops, normalised on the device); reference: pinned host-to-device copies of a crop's bytes, "
          f"{copy:.0f} crops/s\n")
    print(table(["reader", "crops/s", "/ pinned copy", "crops per epoch"], rows))

    rows = []
    for codec in ("raw", "jpeg"):
        r = train_run(caches[codec], data.parent / f"run-{codec}", a.steps, a.batch_size, a.workers)
        rows.append([codec, f"{r['samples_per_s']:.1f}", f"{100 * r['data_wait']:.1f}%", f"{r['loss']:.3f}",
                     f"{r['wall_s']:.0f}"])
    print(f"\ntrain.py, AMP fp16 with loss scaling, {a.steps} steps of {a.batch_size} crops, {a.workers} workers, "
          f"random backbone; the last epoch's record of log.jsonl\n")
    print(table(["codec", "samples/s", "time waiting for data", "loss", "run s (start-up included)"], rows))

    per_image, n = predict_run(r["checkpoint"], data, data.parent / "predictions.json")
    print(f"\nFull-image prediction (east-predict, {n} pages of {data.name}, fp16 autocast, the command's wall time "
          f"with its start-up over its images)\n")
    print(table(["images", "s per image (start-up included)"], [[str(n), f"{per_image:.3f}"]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
