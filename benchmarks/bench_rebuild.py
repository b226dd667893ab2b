"""Rebuild costs: no-op rebuild for 1k and 10k source images (a fresh process, start-up included),
against the same no-op decided by reading every annotation (what a build does when a UFO file was
saved again unchanged, and what every no-op cost before the quick test); and rebuilding after
editing one image of 1k against the full build. Prints a markdown table; asserts nothing.

The pages are document-like (~110 words each, ~20 KB of UFO JSON per page, so 10k pages make a
~200 MB file): a few distinct pages hard-linked under many names, since the figures are about
bookkeeping (ingest, fingerprints, planning), not pixels.

    python benchmarks/bench_rebuild.py [--sizes 1000,10000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, machine, table

from east_cache.tools.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
DISTINCT_PAGES = 40
BUILD = ["--input-size", "64", "--image-size", "128", "--strategy", "chunked", "--chunk-size", "500", "--quiet"]


def many_pages(n: int) -> Path:
    """n source images named apart, backed by DISTINCT_PAGES real pages (hard links, one inode each)."""
    root = BENCH_DATA / f"docs-{n}"
    if (root / "ufo" / "train.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)   # an interrupted earlier run
    base = write_sample_dataset(BENCH_DATA / "docs-base", n_images=DISTINCT_PAGES, words_per_page=120,
                                page_size=(800, 600), seed=0)
    pages = json.loads((base / "ufo" / "train.json").read_text())["images"]
    names = sorted(pages)
    (root / "images").mkdir(parents=True, exist_ok=True)
    images = {}
    for i in range(n):
        src = names[i % len(names)]
        name = f"{i:06d}-{src}"
        os.link(base / "images" / src, root / "images" / name)
        images[name] = pages[src]
    (root / "ufo").mkdir(exist_ok=True)
    tmp = root / "ufo" / "train.json.tmp"
    tmp.write_text(json.dumps({"images": images}))
    tmp.rename(root / "ufo" / "train.json")
    return root


def run_build(data: Path, out: Path, jobs: int = 2) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "preprocess", "build", "--data", str(data), "--out", str(out),
                    "--jobs", str(jobs), *BUILD], cwd=REPO, check=True)
    return time.perf_counter() - t0


def noop(data: Path, out: Path, reread: bool) -> float:
    """Median of 3 up-to-date builds; reread: the UFO file's mtime is bumped first, so the quick
    fingerprint test fails and every annotation entry is parsed and compared."""
    times = []
    for _ in range(3):
        if reread:
            os.utime(data / "ufo" / "train.json")
        times.append(run_build(data, out))
    return statistics.median(times)


def edit_one(data: Path) -> None:
    """Move one word of the first image by a pixel (written to a new file: the hard-linked base stays)."""
    path = data / "ufo" / "train.json"
    ufo = json.loads(path.read_text())
    entry = ufo["images"][sorted(ufo["images"])[0]]
    word = next(iter(entry["words"].values()))
    word["points"] = [[x + 1, y] for x, y in word["points"]]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ufo))
    tmp.rename(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000", help="source image counts (default 1000,10000)")
    a = p.parse_args()
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        data = many_pages(n)
        mb = (data / "ufo" / "train.json").stat().st_size / 2**20
        with tempfile.TemporaryDirectory(prefix="east-bench-rebuild-") as tmp:
            out = Path(tmp) / "cache"
            full = run_build(data, out)
            quick, reread = noop(data, out, reread=False), noop(data, out, reread=True)
            rows.append([n, f"{mb:.0f}", "full build", f"{full:.1f}", "", ""])
            rows.append([n, f"{mb:.0f}", "no-op, annotations re-read", f"{reread:.2f}", f"{reread / full:.3f}", ""])
            rows.append([n, f"{mb:.0f}", "no-op, quick fingerprint test", f"{quick:.2f}", f"{quick / full:.4f}",
                         f"{reread / quick:.0f}x faster"])
            if n == 1000:
                work = Path(tmp) / "data"
                subprocess.run(["cp", "-a", str(data), str(work)], check=True)   # cp -a keeps the hard links
                out2 = Path(tmp) / "cache2"
                full2 = run_build(work, out2)
                edit_one(work)
                one = run_build(work, out2)
                rows.append([n, f"{mb:.0f}", "rebuild after editing 1 image", f"{one:.2f}", f"{one / full2:.3f}", ""])
    print(f"Machine: {machine()}. Each build is a fresh `python -m preprocess build --jobs 2` (start-up "
          f"included); no-op figures are the median of 3; input 64 px so that bookkeeping, not pixels, dominates.\n")
    print(table(["source images", "UFO MB", "operation", "seconds", "x full build", ""], rows))


if __name__ == "__main__":
    main()
