"""A run chooses its images from one cache (issue 49): k-fold cross-validation as k builds and k caches (the per-fold
way: `build --split train{k}`) against one build and one cache whose runs take `--split train{k}`; then items per
CPU second of a selection and of a repeated mix against the whole cache. Prints markdown tables; asserts nothing.

- Builds: camera photos (common.bench_photos: 12 MP and A4 300 dpi JPEGs, a page on a table), split into --folds
  folds by hand (image j in val{j % folds}); each build `python -m preprocess build --jobs 1` (the defaults
  otherwise) as a process of its own, a fresh --out each, wall and CPU seconds (the process's start and the leak
  check's image hashes included where the root has folds, as a user waits for them), cache bytes (blocks on disk, as
  `du`). The one-cache way builds train.json alone (nothing to check: no hashes), then again after `split` (the
  memberships recorded, computed 0, every image hashed once). Beside them, a build of the folded root in this process
  without its hashes (build_cache) and the hashes alone (leak.warn_build, a fresh hash file): what the hashes cost the
  build that first records the folds.
- Reads: the one cache, its photos split over two sources (--data A with folds, --data B without), read as train.py
  reads it (in this process, a batch at a time, shuffled): whole; --split train0 (A's fold, all of B); a repeated mix
  (A x 0.5, B x 2: other photos in other shares, each with its own cost); every photo twice (A x 2, B x 2: the whole
  cache's photos, so the selection's own cost). Items per CPU second of this process over --epochs epochs, rounds
  alternating the arms, median [min-max] over rounds.

    python benchmarks/bench_selection.py [--photos 24] [--folds 5] [--epochs 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, REPO, bench_photos, machine, table, train_loader

from east_cache import CacheDataset
from east_cache.build.run import build_cache
from east_cache.config import BuildConfig
from east_cache.tools.leak import warn_build
from east_cache.tools.phash import CACHE_FILE

BLOCK = 512   # bytes per st_blocks unit


def folded_root(photos: Path, names: list[str], folds: int, where: Path) -> Path:
    """A root of the photos `names` (its images/ a link to photos') with ufo/train.json and, for folds > 0,
    ufo/train{k}.json and val{k}.json: image j in val{j % folds}."""
    entries = json.loads((photos / "ufo" / "train.json").read_text())["images"]
    (where / "ufo").mkdir(parents=True, exist_ok=True)
    if not (where / "images").exists():
        (where / "images").symlink_to(photos / "images")
    files = {"train": names}
    for k in range(folds):
        files[f"train{k}"] = [n for j, n in enumerate(names) if j % folds != k]
        files[f"val{k}"] = [n for j, n in enumerate(names) if j % folds == k]
    for split, part in files.items():
        (where / "ufo" / f"{split}.json").write_text(json.dumps({"images": {n: entries[n] for n in part}}))
    return where


def du(path: Path) -> int:
    return sum(p.lstat().st_blocks * BLOCK for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def cli_build(*args) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, stderr) of `python -m preprocess build ARGS --jobs 1`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "preprocess", "build", *map(str, args), "--jobs", "1"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(done.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


def builds_table(photos: Path, folds: int, tmp: Path) -> tuple[str, str]:
    names = sorted(json.loads((photos / "ufo" / "train.json").read_text())["images"])
    root = folded_root(photos, names, folds, tmp / "root")   # the per-fold way's: folds before its builds
    rows, per_fold = [], [0.0, 0.0, 0]
    for k in range(folds):
        wall, cpu, _ = cli_build("--data", root, "--split", f"train{k}", "--out", tmp / f"fold{k}")
        per_fold = [per_fold[0] + wall, per_fold[1] + cpu, per_fold[2] + du(tmp / f"fold{k}")]
    fresh = folded_root(photos, names, 0, tmp / "fresh")   # the one cache's: train.json alone, then `split`
    wall, cpu, _ = cli_build("--data", fresh, "--out", tmp / "one")
    folded_root(photos, names, folds, fresh)
    again, again_cpu, said = cli_build("--out", tmp / "one")
    computed = "computed 0" if "computed 0, splits recorded" in said else said.strip().splitlines()[-1]
    one = du(tmp / "one")
    rows.append([f"per fold: `build --split train{{k}}`, k < {folds}", str(folds), f"{per_fold[0]:.1f}",
                 f"{per_fold[1]:.1f}", f"{per_fold[2] / 2**20:,.1f}", f"{per_fold[2] / one:.2f}"])
    rows.append(["one cache: `build` of train", "1", f"{wall:.1f}", f"{cpu:.1f}", f"{one / 2**20:,.1f}", "1.00"])
    rows.append(["one cache, built again after `split` (memberships, hashes)", f"1 ({computed})", f"{again:.1f}",
                 f"{again_cpu:.1f}", "+0", "-"])
    builds = table(["how", "builds", "wall s", "CPU s", "cache MiB", "x one cache's bytes"], rows)
    # what the leak check's hashes cost the build that records the folds: the build alone, then the hashes alone
    plain = tmp / "plain"
    t0, c0 = time.perf_counter(), time.process_time()
    build_cache(BuildConfig(), [root], plain, jobs=1, quiet=True)
    build_s, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    (plain / CACHE_FILE).unlink(missing_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    warn_build([root], "train", plain, lambda line: None, quiet=True)
    hash_s, hash_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    warn_build([root], "train", plain, lambda line: None, quiet=True)
    read_s = time.perf_counter() - t0
    hashes = table(["part of a build of a root with folds", "wall s", "CPU s", "x the build's wall s"],
                   [["the build (build_cache, 1 job)", f"{build_s:.1f}", f"{build_cpu:.1f}", "1.00"],
                    [f"every image's hashes (leak check, {len(names)} photos)", f"{hash_s:.2f}", f"{hash_cpu:.2f}",
                     f"{hash_s / build_s:.2f}"],
                    ["a rebuild's: the hashes read back", f"{read_s:.3f}", "-", f"{read_s / build_s:.3f}"]])
    return builds, hashes


def reads_table(photos: Path, folds: int, epochs: int, rounds: int, tmp: Path) -> str:
    names = sorted(json.loads((photos / "ufo" / "train.json").read_text())["images"])
    half = len(names) // 2
    a = folded_root(photos, names[:half], folds, tmp / "A")
    b = folded_root(photos, names[half:], 0, tmp / "B")
    cache = tmp / "two"
    build_cache(BuildConfig(), [a, b], cache, jobs=-1, quiet=True)
    arms = {"whole cache": {}, "--split train0": {"split": "train0"},
            "--repeat A=0.5,B=2": {"repeat": {"A": 0.5, "B": 2}},   # another mix of the photos: their own costs
            "--repeat A=2,B=2": {"repeat": {"A": 2, "B": 2}}}       # the whole cache's photos, each twice
    rates: dict[str, list[float]] = {k: [] for k in arms}
    items: dict[str, int] = {}
    for r in range(rounds):
        for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
            ds = CacheDataset(cache, **arms[name])
            sampler, loader = train_loader(ds, 1)
            n, c0 = 0, time.process_time()
            for epoch in range(epochs):
                sampler.set_epoch(epoch)
                ds.set_epoch(epoch)
                for batch in loader:
                    n += len(batch["image"])
            rates[name].append(n / (time.process_time() - c0))
            items[name] = len(ds)
    whole = statistics.median(rates["whole cache"])
    rows = [[name, str(items[name]), f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]",
             f"{statistics.median(v) / whole:.2f}"] for name, v in rates.items()]
    return table(["read", "items an epoch", "items per CPU second", "x whole cache"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=24, help="camera photos (common.bench_photos)")
    ap.add_argument("--folds", type=int, default=5, help="folds (k)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs read per arm and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the read arms, alternating their order")
    a = ap.parse_args()
    photos = bench_photos(a.photos)
    BENCH_DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BENCH_DATA) as tmp:
        builds, hashes = builds_table(photos, a.folds, Path(tmp))
        print(f"Machine: {machine()}. {a.photos} camera photos (12 MP and A4 at 300 dpi JPEGs), {a.folds} folds; "
              f"builds at the defaults (pages 2048 px, --crop read, --image-codec auto) with --jobs 1, each a "
              f"process of its own; CPU s of the process and its children.\n")
        print(builds + "\n")
        print(hashes + "\n")
        shutil.rmtree(Path(tmp) / "plain", ignore_errors=True)
        print(f"Reads: the photos as two sources of one cache (A: {a.photos // 2} photos with {a.folds} folds, B: "
              f"{a.photos - a.photos // 2} without), 1024-px crops at the cache's geometry read in this process as "
              f"train.py reads them, {a.epochs} epoch(s) per arm and round, {a.rounds} rounds.\n")
        print(reads_table(photos, a.folds, a.epochs, a.rounds, Path(tmp)))


if __name__ == "__main__":
    main()
