"""The build and the read of the working tree against earlier revisions, alternated in one run: each revision checked
out in a temporary git worktree (removed after), every tree's builds and reads run by its own code, on the same data
generated once. Prints markdown tables; asserts nothing.

    python benchmarks/compare.py REV [REV ...] [--rounds 4] [--pages 24] [--photos 24] [--small 6] [--streets 10]
        [--cpu-seconds 1.0] [--no-reads]

- Builds: `python -m preprocess build --strategy chunked --jobs 1` (the default build otherwise: --crop read
  --geometry read, --image-codec auto), a subprocess per build with PYTHONPATH set to its tree and its working folder
  outside every tree, a fresh --out each time: wall seconds (the process's start and imports included, as a user
  waits for them) and CPU seconds, each build started on a synced disk; cache bytes (blocks on disk of the cache
  folder, as `du`). Data: rendered pages
  (common.bench_pages, 1600x2200, ~120 words), camera-like photos (common.bench_photos: 12 MP and A4 300 dpi JPEGs)
  with the default codec and --image-codec jpeg, and ICDAR-like 1280x720 street photos (common.bench_street_photos,
  jpeg, --image-size 1280 --input-size 512). Rounds alternate the trees' order (A B, B A, ...): median [min-max]
  over rounds; a ratio is each round's own, then its median [min-max]. The working tree's builds with the options
  of --extra (where its build has them) are timed beside.
- Per extra photo: a build of the photos less a build of the first --small of them, over the difference: what a
  photo costs past the build's fixed start (process start, imports, ingest, manifest); wall and CPU seconds.
- The floor of a build per photo (the working tree's functions, in this process): the photo decoded as the build
  decodes it (DCT-reduced to the page's size), resized to the page's size (cv2.resize), for a jpeg cache its JPEG
  tiles encoded and packed, and those bytes written to a file (fsync'd); mean over the photos. Beside it the
  on-the-fly baseline's sample (bench_sample.baseline_sample) on the first --baseline-photos photos. Both are
  measured in every round, between its builds, wall and CPU seconds: each round's build is set against its own
  round's floor and baseline (a shared machine's load moves all of them).
- Reads: crops per CPU second of a loader worker (benchmarks/compare_read.py, run by each tree on the photos cache
  it built, raw and jpeg) at the cache's geometry and with all on (scale U[0.5, 1], perspective 0.1, rotation 20),
  1024- and 512-px crops; an arm a revision cannot read says n/a.

The data are generated once under BENCH_DATA; the run's length grows with --rounds and the revisions compared (its
section of docs/performance.md, recorded by `run_all.py --only compare`, says how long it took).
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
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from bench_sample import baseline_sample
from common import BENCH_DATA, REPO, bench_pages, bench_photos, bench_street_photos, machine, table

from east_cache.config import BuildConfig
from east_cache.ingest.imageio import contiguous_source
from east_cache.ingest.ufo import load_splits
from east_cache.sample.page import page_geometry
from east_cache.store.jpeg_tiles import JpegSettings, encode_tiles, pack
from east_cache.store.page_jpeg import JPEG_TILE_PX

HERE = Path(__file__).resolve().parent
WORK = "working tree"
BUILD = ["--strategy", "chunked", "--jobs", "1", "--quiet"]
JPEG = ["--image-codec", "jpeg"]
STREETS = ["--image-codec", "jpeg", "--image-size", "1280", "--input-size", "512"]
EXTRA = ["--levels"]   # the working tree's build with these options too, where it has them (its own rows)
# How a tree's code is run: PYTHONPATH puts the tree first, but an editable install's import hook (a meta path finder
# after PathFinder) would still answer for a module the tree lacks with the installed tree's file: it is dropped, so
# that a revision missing a module fails or does without it, as that revision does.
LAUNCH = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
          "getattr(f, '__module__', type(f).__module__)]; what, sys.argv = sys.argv[1], sys.argv[1:]; "
          "runpy.run_path(what, run_name='__main__') if what.endswith('.py') else "
          "runpy.run_module(what, run_name='__main__', alter_sys=True)")


@dataclass
class Tree:
    name: str
    root: Path
    options: set[str] = field(default_factory=set)   # the build flags its command line knows

    def env(self) -> dict:
        return {**os.environ, "PYTHONPATH": str(self.root)}

    def command(self, what: str, *args: str) -> list[str]:
        """The command line that runs module or script `what` with args by this tree's code (LAUNCH)."""
        return [sys.executable, "-c", LAUNCH, what, *args]


@dataclass
class BuildArm:
    label: str
    data: Path
    flags: list[str]
    trees: list[str]          # which trees build it
    times: dict = field(default_factory=dict)    # tree -> [(wall s, CPU s)] per round
    bytes: dict = field(default_factory=dict)    # tree -> cache bytes on disk


def rev_name(rev: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


def add_worktree(rev: str, work: Path) -> Tree:
    """REV checked out detached in a worktree under work (removed by remove_worktrees)."""
    name = rev_name(rev)
    path = work / f"tree-{name}"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(path), rev], cwd=REPO, check=True)
    return Tree(name, path)


def remove_worktrees(trees: list[Tree]) -> None:
    for t in trees:
        if t.name != WORK:
            subprocess.run(["git", "worktree", "remove", "--force", str(t.root)], cwd=REPO, check=False)
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)


def build_options(tree: Tree, cwd: Path) -> set[str]:
    """The flags of the tree's `build` command, read from its --help."""
    done = subprocess.run(tree.command("preprocess", "build", "--help"), cwd=cwd, env=tree.env(),
                          capture_output=True, text=True, check=True)
    return {w.strip("[],") for w in done.stdout.split() if w.startswith(("--", "[--"))}


def subset(root: Path, n: int) -> Path:
    """A data set of root's first n images (by name): its image files hard-linked, its UFO file cut."""
    out = BENCH_DATA / f"{root.name}-first{n}"
    entries = sorted(json.loads((root / "ufo" / "train.json").read_text())["images"].items())[:n]
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "ufo").mkdir(exist_ok=True)
    for name, _ in entries:
        copy = out / "images" / name
        if not copy.exists():
            try:
                os.link(root / "images" / name, copy)
            except OSError:
                shutil.copyfile(root / "images" / name, copy)
    (out / "ufo" / "train.json").write_text(json.dumps({"images": dict(entries)}) + "\n")
    return out


def disk_bytes(folder: Path) -> int:
    """Bytes of the blocks the files under folder take, as `du` counts them."""
    return sum(os.lstat(Path(d) / f).st_blocks * 512 for d, _, files in os.walk(folder) for f in files)


def source_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in (data / "images").iterdir())


def run_build(tree: Tree, arm: BuildArm, out: Path, cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one build of the arm by the tree's code, into out (made anew). The disk is synced first:
    what the last build left to write or discard (its deleted files' blocks, on a file system mounted with discard)
    would otherwise land in this build's fsync, whichever tree ran before it."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    command = tree.command("preprocess", "build", "--data", str(arm.data), "--out", str(out), *BUILD, *arm.flags)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=tree.env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{tree.name}: {' '.join(command)} failed:\n{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def order(trees: list, r: int) -> list:
    """Round r's order of the trees: rotated each round, reversed every other (A B, B A, ... for two)."""
    k = r // 2 % len(trees)
    turned = trees[k:] + trees[:k]
    return turned[::-1] if r % 2 else turned


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def floor_seconds(records: list, jpeg: bool, work: Path) -> tuple[float, float]:
    """(wall, CPU) seconds per photo of the floor, the mean over the records: decode (DCT-reduced, as the build) +
    resize to the page's size + (jpeg) JPEG tiles encoded and packed + those bytes written and fsync'd."""
    cfg = BuildConfig()
    settings = JpegSettings(JPEG_TILE_PX, cfg.image_quality, cfg.image_chroma)
    path = work / "floor.bin"
    os.sync()   # as before a build (run_build)
    t0, c0 = time.perf_counter(), time.process_time()
    for rec in records:
        d, _, (w, h) = page_geometry(rec, cfg, 0)   # decoded as the build decodes it
        pixels, to_pixels = contiguous_source(d.image)
        turned = abs(to_pixels[0, 0]) < 0.5   # a transposed view: the stored px are the page turned
        page = cv2.resize(pixels, (h, w) if turned else (w, h), interpolation=cv2.INTER_LINEAR)
        data_bytes = pack(encode_tiles(page, settings)) if jpeg else page
        with open(path, "wb") as f:
            f.write(memoryview(np.ascontiguousarray(data_bytes)).cast("B"))
            f.flush()
            os.fsync(f.fileno())
    path.unlink(missing_ok=True)
    return (time.perf_counter() - t0) / len(records), (time.process_time() - c0) / len(records)


def baseline_seconds(records: list) -> tuple[float, float]:
    """(wall, CPU) seconds of the on-the-fly baseline's sample (bench_sample.baseline_sample), the mean over the
    records."""
    cfg = BuildConfig()
    t0, c0 = time.perf_counter(), time.process_time()
    for k, rec in enumerate(records):
        baseline_sample(rec, cfg, np.random.default_rng(k))
    return (time.perf_counter() - t0) / len(records), (time.process_time() - c0) / len(records)


def read_rates(tree: Tree, cache: Path, cwd: Path, cpu_seconds: float) -> dict[str, float]:
    done = subprocess.run(tree.command(str(HERE / "compare_read.py"), str(cache), "--cpu-seconds", str(cpu_seconds)),
                          cwd=cwd, env=tree.env(), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree.name}: reading {cache} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio_cells(values: dict, base: str, others: list[str], fmt: str = "{:.2f}") -> list[str]:
    """Per other tree: each round's base / other, median [min-max]; n/a where either is missing."""
    cells = []
    for o in others:
        pairs = [a / b for a, b in zip(values.get(base, []), values.get(o, [])) if b]
        cells.append(spread(pairs, fmt) if pairs and len(values.get(base, [])) == len(values.get(o, [])) else "n/a")
    return cells


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("revs", nargs="+", help="earlier revisions to compare with (commits, tags, branches)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of every build and read, trees alternated (default 4)")
    p.add_argument("--pages", type=int, default=24, help="rendered pages (default 24)")
    p.add_argument("--photos", type=int, default=24, help="camera-like photos (default 24)")
    p.add_argument("--small", type=int, default=6, help="photos of the small build, for the cost per extra photo "
                                                        "(default 6)")
    p.add_argument("--streets", type=int, default=10, help="ICDAR-like 1280x720 photos; 0: none (default 10)")
    p.add_argument("--baseline-photos", type=int, default=3, help="photos the baseline's sample is timed on in each "
                                                                  "round (default 3)")
    p.add_argument("--cpu-seconds", type=float, default=1.0, help="CPU seconds of each read process's slowest arm "
                                                                  "(default 1.0)")
    p.add_argument("--no-reads", action="store_true", help="builds only")
    a = p.parse_args()
    t_start = time.perf_counter()
    pages, photos = bench_pages(a.pages), bench_photos(a.photos)
    small = subset(photos, a.small)
    streets = bench_street_photos(a.streets) if a.streets else None
    work = Path(tempfile.mkdtemp(prefix="compare-", dir=BENCH_DATA))
    cwd = work / "cwd"   # outside every tree: nothing there shadows a tree's packages
    cwd.mkdir()
    trees = [Tree(WORK, REPO)]
    try:
        for rev in a.revs:
            trees.append(add_worktree(rev, work))
        for t in trees:
            t.options = build_options(t, cwd)
        names = [t.name for t in trees]
        extra = [WORK] if set(EXTRA) <= trees[0].options else []
        arms = [BuildArm("rendered pages", pages, [], names),
                BuildArm("camera photos", photos, [], names),
                BuildArm(f"camera photos, first {a.small}", small, [], names),
                BuildArm("camera photos, jpeg", photos, JPEG, names),
                BuildArm(f"camera photos, first {a.small}, jpeg", small, JPEG, names)]
        if streets is not None:
            arms.append(BuildArm("ICDAR-like photos, jpeg", streets, STREETS, names))
        if extra:
            arms += [BuildArm(f"camera photos, {' '.join(EXTRA)}", photos, EXTRA, extra),
                     BuildArm(f"camera photos, first {a.small}, {' '.join(EXTRA)}", small, EXTRA, extra),
                     BuildArm(f"camera photos, jpeg, {' '.join(EXTRA)}", photos, JPEG + EXTRA, extra)]
        caches = work / "caches"
        records = load_splits([photos], "train", BuildConfig())[0]
        floors, baseline = {"raw": [], "jpeg": []}, []   # per round: (wall, CPU) seconds per photo
        for r in range(a.rounds):
            print(f"round {r + 1} of {a.rounds}: builds, floor and baseline", file=sys.stderr, flush=True)
            for k, arm in enumerate(arms):
                for t in order([t for t in trees if t.name in arm.trees], r):
                    out = caches / t.name / arm.label.replace(" ", "_").replace(",", "")
                    arm.times.setdefault(t.name, []).append(run_build(t, arm, out, cwd))
                    arm.bytes[t.name] = disk_bytes(out)
                if k == 1:   # amid the round's builds
                    for codec, v in floors.items():
                        v.append(floor_seconds(records, codec == "jpeg", work))
                    baseline.append(baseline_seconds(records[:a.baseline_photos]))
        reads = {}   # (tree label, cache arm label) -> {read arm: [rates per round]}
        read_caches = [("raw", "camera photos"), ("jpeg", "camera photos, jpeg")]
        if not a.no_reads:
            readers = [(t, codec, label) for codec, label in read_caches for t in trees]
            if extra:
                readers += [(trees[0], f"{codec}, {' '.join(EXTRA)}", f"{label}, {' '.join(EXTRA)}")
                            for codec, label in read_caches]
            for r in range(a.rounds):
                print(f"round {r + 1} of {a.rounds}: reads", file=sys.stderr, flush=True)
                for t, codec, label in order(readers, r):
                    cache = caches / t.name / label.replace(" ", "_").replace(",", "")
                    for k, v in read_rates(t, cache, cwd, a.cpu_seconds).items():
                        reads.setdefault((t.name, codec), {}).setdefault(k, []).append(v)
    finally:
        remove_worktrees(trees)
        shutil.rmtree(work, ignore_errors=True)
    report(a, trees, arms, reads, floors, baseline, source_bytes(photos), streets and source_bytes(streets),
           time.perf_counter() - t_start)


def report(a, trees: list[Tree], arms: list[BuildArm], reads: dict, floors: dict, baseline: list,
           photo_bytes: int, street_bytes: int | None, seconds: float) -> None:
    names = [t.name for t in trees]
    others = names[1:]
    print(f"Machine: {machine()}. The working tree against {', '.join(others)}; {a.rounds} rounds, trees alternated; "
          f"median [min-max] over rounds (a ratio: each round's own); builds `python -m preprocess build "
          f"{' '.join(BUILD)}` as subprocesses of each tree's code; {seconds / 60:.0f} minutes in all.\n")
    print("### Builds: wall seconds (process start included), cache MB on disk\n")
    head = ["data, options", *(f"{n} s" for n in names), *(f"{WORK} / {o}, s" for o in others),
            *(f"{n} MB" for n in names), *(f"{WORK} / {o}, MB" for o in others)]
    rows = []
    for arm in arms:
        wall = {n: [w for w, _ in arm.times.get(n, [])] for n in names}
        size = {n: arm.bytes.get(n) for n in names}
        rows.append([arm.label, *(spread(wall[n]) for n in names), *ratio_cells(wall, WORK, others),
                     *(f"{size[n] / 1e6:.1f}" if size[n] else "n/a" for n in names),
                     *(f"{size[WORK] / size[o]:.3f}" if size[WORK] and size[o] else "n/a" for o in others)])
    print(table(head, rows))
    print("\n### Builds: CPU seconds\n")
    rows = []
    for arm in arms:
        cpu = {n: [c for _, c in arm.times.get(n, [])] for n in names}
        rows.append([arm.label, *(spread(cpu[n]) for n in names), *ratio_cells(cpu, WORK, others)])
    print(table(["data, options", *(f"{n} CPU s" for n in names), *(f"{WORK} / {o}" for o in others)], rows))

    by_label = {arm.label: arm for arm in arms}

    def extra_ms(big: str, little: str, k: int) -> dict[str, list[float]]:
        """tree -> per round ms per extra photo: (seconds of the photos' build - the small one's) / the difference;
        k: 0 wall, 1 CPU seconds."""
        b, s = by_label.get(big), by_label.get(little)
        if b is None or s is None:
            return {}
        n = a.photos - a.small
        return {t: [(x[k] - y[k]) / n * 1e3 for x, y in zip(b.times[t], s.times[t])] for t in b.times if t in s.times}

    lev = " ".join(EXTRA)
    kinds = [("raw (the default codec here)", "raw", "camera photos", f"camera photos, first {a.small}"),
             ("jpeg", "jpeg", "camera photos, jpeg", f"camera photos, first {a.small}, jpeg"),
             (f"raw, {lev}", "raw", f"camera photos, {lev}", f"camera photos, first {a.small}, {lev}")]
    print(f"\n### Camera photos: ms per extra photo ({a.photos} photos less {a.small}), its floor, the on-the-fly "
          f"baseline (each round's own)\n")
    rows = []
    for label, codec, big, little in kinds:
        for k, clock in ((0, "wall"), (1, "CPU")):
            per = extra_ms(big, little, k)
            floor = [f[k] * 1e3 for f in floors[codec]]
            base = [b[k] * 1e3 for b in baseline]
            for t in names:
                if t not in per:
                    continue
                rows.append([label, clock, t, spread(per[t], "{:.0f}"), spread(floor, "{:.0f}"),
                             spread([v / f for v, f in zip(per[t], floor)]),
                             spread([b / v for v, b in zip(per[t], base)], "{:.1f}"),
                             "" if t == WORK else ratio_cells(per, WORK, [t])[0]])
    print(table(["codec", "clock", "tree", "build ms per extra photo", "floor ms", "build / floor",
                 "baseline / build", f"{WORK} / tree"], rows))
    print(f"\nFloor: decode (DCT-reduced as the build) + cv2.resize to the page + (jpeg) tiles encoded and packed + "
          f"write and fsync, per photo. Baseline: bench_sample.baseline_sample, "
          f"{spread([b[0] * 1e3 for b in baseline], '{:.0f}')} ms wall, "
          f"{spread([b[1] * 1e3 for b in baseline], '{:.0f}')} ms CPU per sample (the mean of "
          f"{a.baseline_photos} photos). CPU: the build process's own, the floor's and the baseline's in this one.\n")
    rows = []
    for label, source, arm_label in (("camera photos", photo_bytes, "camera photos, jpeg"),
                                     ("ICDAR-like photos", street_bytes, "ICDAR-like photos, jpeg")):
        arm = by_label.get(arm_label)
        if arm is None or not source:
            continue
        rows.append([label, f"{source / 1e6:.1f}", *(f"{arm.bytes[n] / source:.2f}" if n in arm.bytes else "n/a"
                                                      for n in names)])
    print("### Jpeg caches over the photos' bytes\n")
    print(table(["data", "photos MB", *(f"{n} cache / photos" for n in names)], rows))
    if not reads:
        return
    print("\n### Reads: crops per CPU second of a loader worker (compact items into a batch slot, cv2 on one thread), "
          "camera photos\n")
    arms_read = sorted({k for v in reads.values() for k in v}, key=lambda k: (-int(k.split()[0]), k))
    rows = []
    for codec in sorted({c for _, c in reads}, key=lambda c: (len(c), c)):
        trees_here = [n for n in names if (n, codec) in reads]
        for k in arms_read:
            values = {n: reads[(n, codec)].get(k, []) for n in trees_here}
            base_codec = codec.split(",")[0]
            ref = {n: reads.get((n, base_codec), {}).get(k, []) for n in others}
            rates = {**{n: v for n, v in values.items()}, **({} if codec == base_codec else ref)}
            rows.append([codec, k, *(spread(rates.get(n, []), "{:.0f}") for n in names),
                         *ratio_cells(rates, WORK, others)])
    print(table(["cache", "arm", *(f"{n} crops / CPU s" for n in names), *(f"{WORK} / {o}" for o in others)], rows))
    print(f"\nAll on: scale U[0.5, 1], perspective 0.1, rotation 20. A `{lev}` row reads the working tree's cache built "
          f"with {lev}, against each revision's default cache. n/a: an arm that revision's code cannot read.")


if __name__ == "__main__":
    main()
