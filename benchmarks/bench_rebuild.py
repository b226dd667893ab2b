"""Rebuild costs: no-op rebuild for 1k and 10k source images (a fresh process, start-up included), and
rebuilding after editing one image of 1k against the full build. Prints a markdown table; asserts nothing.

    python benchmarks/bench_rebuild.py [--sizes 1000,10000]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, machine, table
from preprocess.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
# Tiny pages and crops: the figures are about bookkeeping (ingest, fingerprints, planning), not pixels.
BUILD = ["--input-size", "64", "--image-size", "128", "--strategy", "chunked", "--chunk-size", "500", "--quiet"]


def run_build(data: Path, out: Path, jobs: int = 2) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "preprocess", "build", "--data", str(data), "--out", str(out),
                    "--jobs", str(jobs), *BUILD], cwd=REPO, check=True)
    return time.perf_counter() - t0


def edit_one(data: Path) -> None:
    path = data / "ufo" / "train.json"
    ufo = json.loads(path.read_text())
    entry = ufo["images"][sorted(ufo["images"])[0]]
    word = next(iter(entry["words"].values()))
    word["points"] = [[x + 1, y] for x, y in word["points"]]
    path.write_text(json.dumps(ufo))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000", help="source image counts (default 1000,10000)")
    a = p.parse_args()
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        data = write_sample_dataset(BENCH_DATA / f"tiny-{n}", n_images=n, words_per_page=4, page_size=(160, 120), seed=0)
        with tempfile.TemporaryDirectory(prefix="east-bench-rebuild-") as tmp:
            out = Path(tmp) / "cache"
            full = run_build(data, out)
            noop = min(run_build(data, out) for _ in range(3))
            rows.append([n, "full build", f"{full:.1f}", ""])
            rows.append([n, "no-op rebuild (up to date)", f"{noop:.2f}", f"{noop / full:.3f}"])
            if n == 1000:
                work = Path(tmp) / "data"
                subprocess.run(["cp", "-a", str(data), str(work)], check=True)
                out2 = Path(tmp) / "cache2"
                full2 = run_build(work, out2)
                edit_one(work)
                one = run_build(work, out2)
                rows.append([n, "rebuild after editing 1 image", f"{one:.2f}", f"{one / full2:.3f}"])
    print(f"Machine: {machine()}. Builds with --jobs 2 in a fresh process each (Python start-up included); "
          f"input 64 px so that bookkeeping, not pixels, dominates.\n")
    print(table(["source images", "operation", "seconds", "x full build"], rows))


if __name__ == "__main__":
    main()
