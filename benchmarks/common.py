"""Shared by the benchmark scripts: sample data at benchmark scale (pages, camera photos, street photos), timing,
markdown tables, machine line.

Importing it puts the repository root (and tests/, home of the plain reference targets) on sys.path,
so that every script runs as `python benchmarks/NAME.py` from anywhere, without an install.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "tests")) if p not in sys.path]

import torch
from torch.utils.data import DataLoader

from east_cache.reader import EpochSampler, WorkerLoader, collate, make_sampler
from east_cache.inspect.bench import memcpy_rate, table  # noqa: E402,F401  (one definition, shared with `preprocess bench`)
from east_cache.tools.sampledata import write_sample_dataset  # noqa: E402

BENCH_DATA = Path(os.environ.get("EAST_BENCH_DATA", "/tmp/east-bench"))
FAST_REPEATS = 10   # timed runs of fast code per run of its slow reference: they are cheap, and steady the median
PHOTO_SIZES = ((3000, 4000), (2480, 3508))   # (width, height) px upright: a 12 MP phone photo, an A4 page at 300 dpi
PHOTO_QUALITY = 90       # JPEG quality of the photos, as phone cameras save them
PHOTO_PAGE = 0.86        # the page's share of the photo's width: the rest is the table it lies on
PHOTO_ORIENTATIONS = (1, 6, 1, 8, 1, 3)   # EXIF orientation by photo index: half stored turned, as phones do
PHOTO_MARKER = ".photos-ok"
PHOTO_VERSION = 1        # bump when the photo generator changes, so that old sets are rewritten
STREET_SIZE = (1280, 720)   # (width, height) px of the street photos, as ICDAR 2015's
STREET_QUALITY = 80         # their JPEG quality: with the scene's texture, about as many bytes as ICDAR 2015's photos
STREET_VERSION = 1
# EXIF orientation -> the transpose from the upright photo to the stored pixels (the inverse of the display turn).
_STORED = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}


def bench_pages(n_images: int, words_per_page: int = 120, page_size=(1600, 2200)) -> Path:
    """Document-like sample pages (default ~120 words, a dense printed page)."""
    root = BENCH_DATA / f"pages-{n_images}-{words_per_page}-{page_size[0]}x{page_size[1]}"
    return write_sample_dataset(root, n_images=n_images, words_per_page=words_per_page, page_size=page_size, seed=0)


HELD_OUT_SEED = 101   # the held-out pages' generator seed: none of them is a training page of bench_pages


def held_out_pages(n_images: int, words_per_page: int = 120, page_size=(1600, 2200)) -> Path:
    """Pages like bench_pages' from another seed, as split "train" of their own root: a validation set that shares
    no page with any training set made here (bench_time_to_accuracy.py and bench_fusion.py score on it)."""
    return write_sample_dataset(BENCH_DATA / f"held-out-{n_images}-{words_per_page}", n_images=n_images,
                                words_per_page=words_per_page, page_size=page_size, seed=HELD_OUT_SEED)


def repeated_pages(n_images: int, distinct: int, words_per_page: int = 120, page_size=(1600, 2200)) -> Path:
    """n_images entries over `distinct` generated pages (bench_pages), each page file hard-linked under several
    names: a set as large as a steady-state run needs, generated in the time of a small one. Every name draws
    its own augmentation, so the cache still holds n_images different pages."""
    pages = bench_pages(distinct, words_per_page, page_size)
    root = BENCH_DATA / f"{pages.name}-x{n_images}"
    marker = root / PHOTO_MARKER
    args = {"pages": pages.name, "n_images": n_images}
    if marker.exists() and json.loads(marker.read_text()) == args:
        return root
    entries = list(json.loads((pages / "ufo" / "train.json").read_text())["images"].items())
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "ufo").mkdir(exist_ok=True)
    images = {}
    for k in range(n_images):
        name, entry = entries[k % len(entries)]
        copy = root / "images" / f"r{k:05d}_{name}"
        if not copy.exists():
            try:
                os.link(pages / "images" / name, copy)
            except OSError:   # another file system: a copy
                copy.write_bytes((pages / "images" / name).read_bytes())
        images[copy.name] = entry
    (root / "ufo" / "train.json").write_text(json.dumps({"images": images}) + "\n")
    marker.write_text(json.dumps(args))
    return root


def process_tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system) used so far by this process and every live descendant (loader workers), from
    /proc; None where there is no /proc. Busy cores over an interval: its difference over the wall time."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    tick, total, todo, seen = os.sysconf("SC_CLK_TCK"), 0.0, [os.getpid()], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick   # utime, stime
            for task in (proc / str(pid) / "task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):   # a process that left meanwhile
            continue
    return total


def bench_photos(n_images: int, words_per_page: int = 120) -> Path:
    """Camera-like photos of pages: PHOTO_SIZES in turn, JPEG at PHOTO_QUALITY, a page lying on a textured table
    under uneven light, lens blur and sensor noise, half of them stored turned with an EXIF orientation. Generated
    (deterministic), never downloaded; written once under BENCH_DATA."""
    root = BENCH_DATA / f"photos-{n_images}-{words_per_page}"
    args = {"version": PHOTO_VERSION, "n_images": n_images, "words_per_page": words_per_page}
    marker = root / PHOTO_MARKER
    if marker.exists() and json.loads(marker.read_text()) == args:
        return root
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "ufo").mkdir(exist_ok=True)
    images = {}
    for s, size in enumerate(PHOTO_SIZES):
        count = len(range(s, n_images, len(PHOTO_SIZES)))
        pages = write_sample_dataset(BENCH_DATA / f"photo-pages-{count}-{words_per_page}-{size[0]}x{size[1]}",
                                     n_images=count, words_per_page=words_per_page, page_size=size, seed=s)
        entries = json.loads((pages / "ufo" / "train.json").read_text())["images"]
        for k, (name, entry) in enumerate(entries.items()):
            index = s + k * len(PHOTO_SIZES)
            with Image.open(pages / "images" / name) as im:
                page = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
            rng = np.random.default_rng([7, index])
            photo, (x0, y0, kx, ky) = _photograph(rng, page)
            for word in entry["words"].values():
                word["points"] = [[round(x * kx + x0, 2), round(y * ky + y0, 2)] for x, y in word["points"]]
            images[_save_photo(photo, root / "images" / f"photo_{index:03d}.jpg", index)] = entry
    (root / "ufo" / "train.json").write_text(json.dumps({"images": images}, indent=1) + "\n")
    marker.write_text(json.dumps(args))
    return root


def bench_street_photos(n_images: int, words_per_page: int = 15) -> Path:
    """ICDAR-2015-like photos (STREET_SIZE, JPEG at STREET_QUALITY): a street-like scene (sky and ground, colour
    texture at four scales, blocks of patterned facades and signs) with the sample set's words painted on it in one
    colour, lens blur and sensor noise. Generated (deterministic), never downloaded; written once under BENCH_DATA."""
    root = BENCH_DATA / f"street-{n_images}-{words_per_page}"
    args = {"version": STREET_VERSION, "n_images": n_images, "words_per_page": words_per_page}
    marker = root / PHOTO_MARKER
    if marker.exists() and json.loads(marker.read_text()) == args:
        return root
    pages = write_sample_dataset(BENCH_DATA / f"street-pages-{n_images}-{words_per_page}", n_images=n_images,
                                 words_per_page=words_per_page, page_size=STREET_SIZE, seed=3)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "ufo").mkdir(exist_ok=True)
    images = {}
    for k, (name, entry) in enumerate(json.loads((pages / "ufo" / "train.json").read_text())["images"].items()):
        rng = np.random.default_rng([11, k])
        with Image.open(pages / "images" / name) as im:
            text = np.asarray(ImageOps.exif_transpose(im).convert("L"), np.float32)
        ink = np.clip((200 - text) / 180, 0, 1)[..., None]   # how dark the page's text is at each pixel
        photo = _street_scene(rng) * (1 - ink) + rng.uniform(0, 255, 3).astype(np.float32) * ink
        photo = cv2.GaussianBlur(photo, (0, 0), 0.9) + rng.standard_normal(photo.shape).astype(np.float32) * 1.5
        out = f"img_{k:03d}.jpg"
        Image.fromarray(np.clip(photo, 0, 255).astype(np.uint8)).save(root / "images" / out, quality=STREET_QUALITY)
        images[out] = {**entry, "img_w": STREET_SIZE[0], "img_h": STREET_SIZE[1]}
    (root / "ufo" / "train.json").write_text(json.dumps({"images": images}, indent=1) + "\n")
    marker.write_text(json.dumps(args))
    return root


def _street_scene(rng) -> np.ndarray:
    """float32 (H, W, 3) of STREET_SIZE: a sky and ground, colour texture at four scales, patterned blocks."""
    w, h = STREET_SIZE
    scene = np.empty((h, w, 3), np.float32)
    horizon = int(rng.uniform(0.3, 0.6) * h)
    scene[:horizon], scene[horizon:] = rng.uniform(120, 220, 3), rng.uniform(40, 120, 3)
    for cells, amplitude in ((4, 40), (16, 25), (64, 12), (256, 6)):
        scene += np.stack([_smooth_field(rng, (h, w), cells, -amplitude, amplitude) for _ in range(3)], -1)
    for _ in range(int(rng.integers(8, 20))):
        x0, y0 = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
        block = scene[y0:y0 + int(rng.integers(40, 400)), x0:x0 + int(rng.integers(40, 500))]
        yy, xx = np.mgrid[:block.shape[0], :block.shape[1]].astype(np.float32)
        period = rng.uniform(6, 30)
        pattern = 15 * (np.sin(xx / period * 6.28) > 0.6) + 10 * (np.sin(yy / period * 3.1) > 0.8)
        block[:] = 0.3 * block + 0.7 * rng.uniform(20, 235, 3).astype(np.float32) + pattern[..., None] - 12
    return scene


def _smooth_field(rng, shape: tuple, cells: int, lo: float, hi: float) -> np.ndarray:
    """float32 (H, W): random values on a coarse `cells`-wide grid, interpolated smoothly to the full size."""
    coarse = rng.uniform(lo, hi, size=(max(2, cells * shape[0] // shape[1]), cells)).astype(np.float32)
    return cv2.resize(coarse, shape[::-1], interpolation=cv2.INTER_CUBIC)


def _photograph(rng, page: np.ndarray) -> tuple[np.ndarray, tuple]:
    """The page (H, W, 3) shrunk to PHOTO_PAGE of its size on a wood-grain table, lit unevenly, blurred a
    little by the lens, with sensor noise: (photo of the page's size, (x0, y0, kx, ky): page px -> photo px
    is x * kx + x0, y * ky + y0)."""
    h, w = page.shape[:2]
    grain = _smooth_field(rng, (h, w), 400, -25, 25)[:, :1] + _smooth_field(rng, (h, w), 24, -20, 20)
    wood = np.clip(np.array([120, 80, 50], np.float32) + grain[..., None], 0, 255)
    pw, ph = round(w * PHOTO_PAGE), round(h * PHOTO_PAGE)
    x0, y0 = int(rng.integers(0, w - pw)), int(rng.integers(0, h - ph))
    wood[y0:y0 + ph, x0:x0 + pw] = cv2.resize(page, (pw, ph), interpolation=cv2.INTER_AREA)
    light = _smooth_field(rng, (h, w), 6, 0.7, 1.1)
    photo = cv2.GaussianBlur(wood * light[..., None], (0, 0), 0.8)
    photo += rng.standard_normal(photo.shape, np.float32) * 4
    return np.clip(photo, 0, 255).astype(np.uint8), (x0, y0, pw / w, ph / h)


def _save_photo(photo: np.ndarray, path: Path, index: int) -> str:
    orientation = PHOTO_ORIENTATIONS[index % len(PHOTO_ORIENTATIONS)]
    image, exif = Image.fromarray(photo), Image.Exif()
    exif[0x0112] = orientation
    if orientation in _STORED:
        image = image.transpose(_STORED[orientation])
    image.save(path, quality=PHOTO_QUALITY, exif=exif.tobytes())
    return path.name


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def median_over(pages: list, fn, repeat: int) -> float:
    """Median over pages of each page's median_time of fn(page): one slow page does not sway it."""
    return statistics.median(median_time(lambda p=p: fn(p), repeat) for p in pages)


def train_loader(ds, batch_size: int, workers: int = 0) -> tuple[EpochSampler, object]:
    """(sampler, loader): a CacheDataset read as train.py reads it, shuffled with seed 0, a new epoch at each
    sampler.set_epoch: in this process (a DataLoader with collate, for batches()'s thread), or by train.py's
    `workers` worker processes (east_cache/reader/workers.py)."""
    sampler, items = EpochSampler(make_sampler(ds, batch_size, shuffle=True, seed=0)), ds
    return sampler, (WorkerLoader(items, sampler, batch_size, workers) if workers else
                     DataLoader(items, batch_size=batch_size, sampler=sampler, collate_fn=collate))


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def arm_parser(description: str, arms: tuple[str, ...], quick_help: str) -> argparse.ArgumentParser:
    """The flags every GPU benchmark with arms takes: --device, --arms (a comma list of `arms`), --quick."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--arms", default=",".join(arms), help=f"which arms, of {', '.join(arms)} (default all)")
    p.add_argument("--quick", action="store_true", help=quick_help)
    return p


def parse_arms(p: argparse.ArgumentParser, argv, quick: dict, arms: tuple[str, ...]) -> argparse.Namespace:
    """The arguments, with `quick`'s sizes as the defaults under --quick (a flag given beside it still wins), the
    arms checked."""
    a = p.parse_args(argv)
    if a.quick:
        p.set_defaults(**quick)
        a = p.parse_args(argv)
    unknown = set(a.arms.split(",")) - set(arms)
    if unknown:
        p.error(f"--arms: no arm named {', '.join(sorted(unknown))}; there are {', '.join(arms)}")
    return a


def measured_device(name: str, note=None):
    """The torch.device to measure on, after the run's first line (the machine, the device's name, torch and `note`
    (device) -> str where given); or None after a note where it is CUDA and there is none. The device is set up as
    east-train and east-predict set theirs (setup_device: the CUDA device made current, cuDNN's benchmark mode on),
    so that a step measured in this process costs what it costs in theirs."""
    from east_cache.predict.device import setup_device
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("No CUDA device here: nothing measured (run this on a machine with an NVIDIA GPU, or pass --device "
              "cpu for the check run).")
        return None
    device = setup_device(name).device
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU"
    print(f"Machine: {machine()}; {gpu}, torch {torch.__version__}{note(device) if note else ''}\n")
    return device
