"""The review page (`python -m preprocess review`): how long building it takes, what it writes, and how fast it loads
in a headless Chromium (navigation start to the load event, from the page's performance timing; the thumbnails
load lazily, so only those in view count), then how long a re-sort of every card takes there. Sets: the sample
pages (document-like, JPEG and PNG) and camera photos (12 MP and A4 at 300 dpi, half stored turned with EXIF),
each with predictions that miss and add words (tests/helpers.py planted_predictions). Prints markdown tables;
asserts nothing.

    python benchmarks/bench_review.py [--images 500] [--photos 24] [--loads 3]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from common import bench_pages, bench_photos, machine, table
from helpers import planted_predictions

from east_cache.cli import main as east_cache
from east_cache.evaluate.review import DEFAULT_SIDE, THUMB_SIDE
from east_cache.evaluate.review_draw import THUMB_QUALITY

PAGE_SIZE = (1200, 1600)   # (w, h) px of the sample pages
PAGE_WORDS = 60
MISS_SHARE = 0.3           # images with missed words; each misses 1 to MISS_MOST of them
MISS_MOST = 8
FALSE_SHARE = 0.3          # images with false words, 1 to FALSE_MOST each, scored U[0, 1]
FALSE_MOST = 4
WINDOW = (1400, 1000)      # px, the browser window


def predictions(root: Path, folder: Path, seed: int = 0) -> Path:
    """A predictions file in folder for root's train split, with planted misses and scored false words."""
    gt = json.loads((root / "ufo" / "train.json").read_text())["images"]
    rng = np.random.default_rng(seed)
    plan = {name: (int(rng.integers(1, MISS_MOST + 1)) if rng.random() < MISS_SHARE else 0,
                   list(rng.uniform(0, 1, int(rng.integers(1, FALSE_MOST + 1))).round(3))
                   if rng.random() < FALSE_SHARE else [])
            for name in gt}
    path = folder / f"{root.name}-pred.json"
    path.write_text(json.dumps({"predicted_by": "bench_review", "images": planted_predictions(gt, plan, seed)}))
    return path


def build(root: Path, pred: Path, out: Path) -> float:
    """Seconds of one review into a fresh out, in this process (its summary line swallowed)."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        status = east_cache(["review", "--gt", str(root / "ufo" / "train.json"), "--pred", str(pred), "--images",
                             str(root / "images"), "--out", str(out), "--quiet"])
    if status:
        raise SystemExit(f"review failed with status {status}")
    return time.perf_counter() - t0


def mib(paths) -> float:
    return sum(p.stat().st_size for p in paths) / 2**20


def browser():
    """Headless Chromium through the system's chromedriver, or None (with the reason printed) where missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("selenium is not installed: no load times (pip install -e .[dev])\n")
        return None
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chrome and driver):
        print("chromium or chromedriver is missing: no load times (apt-get install chromium chromium-driver)\n")
        return None
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(flag)
    options.binary_location = chrome
    return webdriver.Chrome(service=Service(driver), options=options)


def load_times(d, page: Path, loads: int) -> tuple[float, float]:
    """(median ms from navigation start to the load event, median ms of re-sorting every card by name and back)."""
    load, sort = [], []
    for _ in range(loads):
        d.get(page.as_uri())
        load.append(d.execute_script("const t = performance.getEntriesByType('navigation')[0];"
                                     "return t.loadEventEnd - t.startTime;"))
        sort.append(d.execute_script(
            "const s = document.getElementById('sort'), t0 = performance.now();"
            "for (const v of ['name', 'hmean']) { s.value = v; s.dispatchEvent(new Event('change')); }"
            "document.body.offsetHeight; return (performance.now() - t0) / 2;"))
    return statistics.median(load), statistics.median(sort)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=500, help="sample pages (default 500)")
    p.add_argument("--photos", type=int, default=24, help="camera photos (default 24; 0: none)")
    p.add_argument("--loads", type=int, default=3, help="page loads timed per set (default 3)")
    a = p.parse_args()
    sets = [(f"sample pages {PAGE_SIZE[0]}x{PAGE_SIZE[1]}", bench_pages(a.images, PAGE_WORDS, PAGE_SIZE))]
    if a.photos:
        sets.append(("camera photos, 12 MP and A4 300 dpi", bench_photos(a.photos)))
    d = browser()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for what, root in sets:
                out = Path(tmp) / "review"
                seconds = build(root, predictions(root, Path(tmp)), out)
                n = len(list((out / "images").iterdir()))
                pngs, thumbs = list((out / "images").iterdir()), list((out / "thumbs").iterdir())
                load, sort = load_times(d, out / "index.html", a.loads) if d else (float("nan"), float("nan"))
                rows.append([what, n, f"{seconds:.1f}", f"{n / seconds:.1f}", f"{mib(pngs):.1f}",
                             f"{mib(pngs) * 1024 / n:.0f}", f"{mib(thumbs) * 1024 / n:.0f}",
                             f"{(out / 'index.html').stat().st_size / 1024:.0f}", f"{load:.0f}", f"{sort:.1f}"])
    finally:
        if d:
            d.quit()
    print(f"review: build and load of the page; {machine()}. Each image drawn into a PNG {DEFAULT_SIDE} px on its "
          f"long side (with its legend strip) and a JPEG thumbnail of {THUMB_SIDE} px at quality {THUMB_QUALITY}; "
          f"browser window {WINDOW[0]}x{WINDOW[1]}, median of {a.loads} loads\n")
    print(table(["set", "images", "build s", "images/s", "PNGs MiB", "KiB per PNG", "KiB per thumbnail",
                 "index.html KiB", "load ms", "re-sort ms"], rows))


if __name__ == "__main__":
    main()
