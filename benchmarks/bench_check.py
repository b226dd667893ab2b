"""`east-cache check`'s perceptual hash on planted copies: its recall on copies of a generated set (resized,
re-encoded, cropped by a few per cent, brightened, and all at once) and its false pairs among the set's distinct
images, for the DCT hash (pHash, the one `check` uses) and a gradient hash (dHash) at a sweep of Hamming distance
thresholds; then the images/s of the whole per-image work of `check` (file hash, reduced decode, pHash) on
camera-sized JPEGs. Prints markdown tables; asserts nothing.

The distinct images are half document pages (the synthetic sample set: white pages of words, which look alike to
a coarse hash) and half photo-like scenes (colour fields at several scales, gradients, blocks, sensor noise).

    python benchmarks/bench_check.py [--images 400] [--copies 60] [--photos 6] [--build-photos 8]
"""
from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from common import BENCH_DATA, bench_photos, machine, table
from PIL import Image

from east_cache.config import BuildConfig
from east_cache.build.run import build_cache
from east_cache.tools.leak import warn_build
from east_cache.tools.phash import NEAR_DISTANCE, THREADS, HashStore, dct_hash, distance, gradient_hash, gray_of
from east_cache.tools.sampledata import write_sample_dataset

SIZE = (800, 600)               # px (width, height) of the set's images
QUALITY = 90                    # JPEG quality they are saved at
SWEEP = (4, 6, 8, 10, 12, 14, 16)
METHODS = {"pHash (DCT 8x8 of 32x32)": dct_hash, "dHash (9x8 gradients)": gradient_hash}
# (width, height) of camera photos: 3, 8, 12 and 13 MP
CAMERA = ((2000, 1500), (3264, 2448), (4000, 3000), (4160, 3120))


def scene(rng, size: tuple[int, int]) -> np.ndarray:
    """A photo-like uint8 (H, W, 3) image: colour fields at four scales, a gradient, bright blocks, noise."""
    w, h = size
    img = np.zeros((h, w, 3), np.float32) + rng.uniform(60, 190, 3).astype(np.float32)
    for cells, amplitude in ((3, 60), (8, 35), (32, 20), (128, 10)):
        coarse = rng.uniform(-amplitude, amplitude, (max(2, cells * h // w), cells, 3)).astype(np.float32)
        img += cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC)
    img += np.linspace(-30, 30, w, dtype=np.float32)[None, :, None] * rng.choice([-1, 1])
    for _ in range(int(rng.integers(3, 10))):
        x0, y0 = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
        img[y0:y0 + int(rng.integers(20, h // 2)), x0:x0 + int(rng.integers(20, w // 2))] = rng.uniform(0, 255, 3)
    img += rng.standard_normal(img.shape, np.float32) * 6
    return np.clip(img, 0, 255).astype(np.uint8)


def distinct_images(n: int) -> list[np.ndarray]:
    """n distinct RGB images: the first half sample pages, the rest scenes."""
    pages = n // 2
    root = write_sample_dataset(BENCH_DATA / f"check-pages-{pages}", n_images=pages, words_per_page=30,
                                page_size=SIZE, seed=5)
    out = []
    for path in sorted((root / "images").iterdir()):
        with Image.open(path) as im:
            out.append(np.asarray(im.convert("RGB").resize(SIZE)))
    rng = np.random.default_rng(1)
    return out + [scene(rng, SIZE) for _ in range(n - len(out))]


def jpeg(rgb: np.ndarray, quality: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def resized(rgb, f):
    return cv2.resize(rgb, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)


def cropped(rgb, share, rng):
    h, w = rgb.shape[:2]
    dx, dy = round(w * share), round(h * share)
    x0, y0 = int(rng.integers(0, dx + 1)), int(rng.integers(0, dy + 1))   # the cut split between the sides
    return rgb[y0:h - (dy - y0), x0:w - (dx - x0)]


def brighter(rgb, shift):
    return np.clip(rgb.astype(np.int16) + shift, 0, 255).astype(np.uint8)


def copies(rgb: np.ndarray, rng) -> dict[str, bytes]:
    """The planted copies of one image, JPEG files' bytes by what was done to it."""
    return {"resized 0.5x": jpeg(resized(rgb, 0.5), QUALITY), "resized 0.75x": jpeg(resized(rgb, 0.75), QUALITY),
            "JPEG q60": jpeg(rgb, 60), "JPEG q95": jpeg(rgb, 95),
            "cropped 2%": jpeg(cropped(rgb, 0.02, rng), QUALITY), "cropped 5%": jpeg(cropped(rgb, 0.05, rng), QUALITY),
            "brightness +-20": jpeg(brighter(rgb, int(rng.choice([-20, 20]))), QUALITY),
            "all: 0.75x, q70, 3% crop, +10": jpeg(brighter(cropped(resized(rgb, 0.75), 0.03, rng), 10), 70)}


def hashes_of(folder: Path, files: dict[str, bytes]) -> dict[str, dict[str, int]]:
    """{file name: {method: hash}}, each from the file decoded as `check` decodes it."""
    out = {}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        gray, _ = gray_of(folder / name)
        out[name] = {m: f(gray) for m, f in METHODS.items()}
    return out


def recall_tables(n_images: int, n_copies: int) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    images = distinct_images(n_images)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        originals = hashes_of(folder, {f"o{i:04d}.jpg": jpeg(im, QUALITY) for i, im in enumerate(images)})
        planted = {}   # (original index, transform) -> hashes
        step = max(1, n_images // n_copies)   # copies of pages and of scenes alike
        for i in range(0, n_images, step)[:n_copies]:
            made = copies(images[i], rng)
            got = hashes_of(folder, {f"c{i:04d}-{k}.jpg": data for k, data in enumerate(made.values())})
            planted.update({(i, kind): h for kind, h in zip(made, got.values())})
    kinds = list(dict.fromkeys(k for _, k in planted))
    names = sorted(originals)
    rows, summary = [], []
    for method in METHODS:
        orig = [originals[n][method] for n in names]
        between = np.array([distance(orig[a], orig[b]) for a in range(len(orig)) for b in range(a + 1, len(orig))])
        pages = n_images // 2   # distinct_images: the pages first
        both_pages = np.array([b < pages for a in range(len(orig)) for b in range(a + 1, len(orig))])
        to_copy = {key: distance(orig[key[0]], h[method]) for key, h in planted.items()}
        for t in SWEEP:
            found = {k: np.mean([d <= t for (i, kind), d in to_copy.items() if kind == k]) for k in kinds}
            false, among_pages = int((between <= t).sum()), int(((between <= t) & both_pages).sum())
            chosen = " (check's)" if t == NEAR_DISTANCE and method.startswith("pHash") else ""
            rows.append([method, f"<= {t}{chosen}",
                         f"{np.mean([d <= t for d in to_copy.values()]):.3f}",
                         *(f"{found[k]:.2f}" for k in kinds), f"{false} of {len(between)}",
                         f"{among_pages} of {int(both_pages.sum())}"])
        summary.append([method, f"{np.median(list(to_copy.values())):.0f}", f"{max(to_copy.values())}",
                        f"{between.min()}", f"{np.percentile(between, 1):.0f}"])
    recall = table(["hash", "distance", "recall, all copies", *kinds, "false pairs among distinct images",
                    "of them, pairs of two pages"], rows)
    spread = table(["hash", "median distance to a copy", "largest", "smallest between distinct images",
                    "1st percentile between distinct"], summary)
    return recall, spread


def speed_table(n_photos: int) -> str:
    rng = np.random.default_rng(2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w, h in CAMERA:
            paths = []
            for k in range(n_photos):
                path = Path(tmp) / f"{w}x{h}-{k}.jpg"
                path.write_bytes(jpeg(scene(rng, (w, h)), QUALITY))
                paths.append(path)
            t0 = time.perf_counter()
            HashStore(None).hashes(paths[:1], quiet=True)   # warm-up: imports, page cache
            one = []
            for p in paths:
                t0 = time.perf_counter()
                HashStore(None).hashes([p], quiet=True)
                one.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            HashStore(None).hashes(paths, quiet=True)
            pooled = len(paths) / (time.perf_counter() - t0)
            mb = np.mean([p.stat().st_size for p in paths]) / 1e6
            rows.append([f"{w}x{h}", f"{w * h / 1e6:.0f}", f"{mb:.1f}", f"{1000 * np.median(one):.0f}",
                         f"{1 / np.median(one):.0f}", f"{pooled:.0f}"])
    return table(["camera JPEG (q90)", "MP", "MB", "ms per image, 1 thread", "images/s, 1 thread",
                  f"images/s, {THREADS} threads"], rows)


def build_table(n_photos: int) -> str:
    """The build's train/val check on camera photos (bench_photos: 12 MP and A4 at 300 dpi), a quarter of them in
    val: its first run (every image hashed) and a rebuild's (hashes read back), beside the build itself (1 job)."""
    photos = bench_photos(n_photos)
    root = BENCH_DATA / f"check-photos-{n_photos}"
    entries = json.loads((photos / "ufo" / "train.json").read_text())["images"]
    names = sorted(entries)
    n_val = max(1, n_photos // 4)
    (root / "ufo").mkdir(parents=True, exist_ok=True)
    if not (root / "images").exists():
        (root / "images").symlink_to(photos / "images")
    for split, part in (("train", names[n_val:]), ("val", names[:n_val])):
        (root / "ufo" / f"{split}.json").write_text(json.dumps({"images": {n: entries[n] for n in part}}))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_cache(BuildConfig(), [root], Path(tmp), jobs=1, quiet=True)
        build = time.perf_counter() - t0
        for what in ("first build: every image hashed", "rebuild: hashes read back"):
            t0 = time.perf_counter()
            warn_build([root], "train", tmp, lambda line: None)
            took = time.perf_counter() - t0
            rows.append([what, f"{n_photos - n_val} + {n_val}", f"{took:.3f}", f"{build:.1f}", f"{took / build:.2f}"])
    return table(["train/val check", "train + val photos", "seconds", "build, 1 job, s", "x build"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=400, help="distinct images (half pages, half scenes)")
    ap.add_argument("--copies", type=int, default=60, help="originals that get each kind of planted copy")
    ap.add_argument("--photos", type=int, default=6, help="camera JPEGs per size for the speed table")
    ap.add_argument("--build-photos", type=int, default=8, help="camera photos of the build's check table")
    a = ap.parse_args()
    recall, spread = recall_tables(a.images, a.copies)
    print(f"Machine: {machine()}. {a.images} distinct {SIZE[0]}x{SIZE[1]} images (half sample pages, half "
          f"photo-like scenes), JPEG q{QUALITY}; each kind of copy planted of {min(a.copies, a.images)} of them; "
          f"hashes of the files as `check` decodes them.\n")
    print(recall + "\n")
    print(spread + "\n")
    print(f"Speed: file hash + reduced decode + pHash per image (what `check` does per image), {a.photos} "
          f"photo-like JPEGs per size.\n")
    print(speed_table(a.photos) + "\n")
    print(f"The build's train/val check (`east-cache build` with a val split beside train; {THREADS} threads) on "
          f"camera photos, beside the build itself at its defaults with 1 job.\n")
    print(build_table(a.build_photos))


if __name__ == "__main__":
    main()
