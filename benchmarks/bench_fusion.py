"""Two fold models and the ways of combining them, on the device they train on: `east-predict` with both checkpoints
under --fuse maps (their maps averaged, one decode) and --fuse quads (each decoded, the words fused), each model
alone, and `east-cache ensemble` of the two single-model files, all scored by `east-cache evaluate` (rect DetEval) on
held-out pages: which fusion scores higher, and what each prediction costs. Prints markdown tables; asserts nothing;
with --device cuda and no CUDA device it prints a note and measures nothing.

Every step is the project's own command, run in this process through its main(): generated pages (common.bench_pages)
divided by `east-cache split --folds 2`, a cache built per fold (`east-cache build --split train{k}`), a model
trained on each for the same --time-limit (`east-train`, random backbone: no download), then the predictions of the
held-out pages (common.held_out_pages: another seed, no training page among them) and their scores. Two fused passes
keep a word both found (--votes defaults to a majority); the rows with --votes 1 keep a word either found.

    python benchmarks/bench_fusion.py                          # GPU sizes: 48 pages, 45 s of training per model
    python benchmarks/bench_fusion.py --quick --device cpu     # a check that every step runs (the models score ~0)
    python benchmarks/bench_fusion.py --time-limit 90 --val-images 32
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import bench_pages, held_out_pages, measured_device, table

import common
from east_cache import cli
from east_cache.predict import predict
from east_cache.train import train
from east_cache.train.train import INTERRUPTED

QUICK = {"train_images": 4, "val_images": 2, "words": 20, "image_size": 192, "input_size": 64, "batch_size": 2,
         "time_limit": 4.0, "jobs": 1}


class Interrupted(Exception):
    """A command stopped by the session's timeout (SIGINT): the rows made so far are printed."""


def quiet(main, argv: list[str]) -> float:
    """Seconds a command's main(argv) took, its output swallowed; a failure raises with its last lines, a stop by
    SIGINT (status 130, or a KeyboardInterrupt) raises Interrupted naming the command."""
    out, t0 = io.StringIO(), time.perf_counter()
    command = {train.main: "east-train", predict.main: "east-predict"}.get(main, f"east-cache {argv[0]}")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = main(argv)
    except KeyboardInterrupt:
        raise Interrupted(command) from None
    if status == INTERRUPTED:
        raise Interrupted(command)
    if status:
        raise RuntimeError(f"{argv}: exit status {status}: {out.getvalue()[-2000:]}")
    return time.perf_counter() - t0


def fold_root(here: Path, train_images: int, val_images: int, words: int) -> Path:
    """A data set root of its own: the training pages as split train, the held-out ones as split val (renamed
    heldout_*, hard links to the generated files), so that `split` writes its fold files there."""
    root = here / "data"
    (root / "images").mkdir(parents=True)
    (root / "ufo").mkdir()
    for split, source, prefix in (("train", bench_pages(train_images, words), ""),
                                  ("val", held_out_pages(val_images, words), "heldout_")):
        images = json.loads((source / "ufo" / "train.json").read_text())["images"]
        for name in images:
            try:
                os.link(source / "images" / name, root / "images" / f"{prefix}{name}")
            except OSError:   # another file system: a copy
                shutil.copyfile(source / "images" / name, root / "images" / f"{prefix}{name}")
        entries = {f"{prefix}{name}": entry for name, entry in images.items()}
        (root / "ufo" / f"{split}.json").write_text(json.dumps({"images": entries}) + "\n")
    return root


def score(gt: Path, pred: Path) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["evaluate", "--gt", str(gt), "--pred", str(pred), "--json"])
    if status:
        raise RuntimeError(f"evaluate {pred}: exit status {status}")
    return json.loads(out.getvalue())


def run(a, device: torch.device, here: Path, rows: list, trained: dict) -> None:
    """Fills rows (one per prediction file: what, command, precision, recall, hmean, detections, s per image) and
    trained (fold: seconds, steps) as each step is done."""
    root = fold_root(here, a.train_images, a.val_images, a.words)
    quiet(cli.main, ["split", "--data", str(root), "--split", "train", "--folds", "2", "--quiet"])
    runs = []
    for k in (0, 1):
        print(f"fold {k}: build, then {a.time_limit:g} s of east-train", file=sys.stderr, flush=True)
        cache, out = here / f"cache{k}", here / f"run{k}"
        quiet(cli.main, ["build", "--data", str(root), "--split", f"train{k}", "--out", str(cache), "--image-size",
                         str(a.image_size), "--input-size", str(a.input_size), "--jobs", str(a.jobs), "--quiet"])
        flags = ["--cache", str(cache), "--out", str(out), "--device", str(device), "--time-limit", str(a.time_limit),
                 "--epochs", "100000", "--batch-size", str(a.batch_size), "--backbone-weights", "random",
                 "--seed", str(a.seed), "--keep-last", "1"]
        quiet(train.main, flags + (["--workers", str(a.workers)] if a.workers is not None else []))
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        epochs = [r for r in log if r.get("event") == "epoch"]
        trained[k] = (sum(r["seconds"] for r in epochs), epochs[-1]["step"] if epochs else 0)
        runs.append(out / "latest.pt")
    gt, n = root / "ufo" / "val.json", a.val_images
    both = ["--checkpoint", str(runs[0]), "--checkpoint", str(runs[1])]
    predictions = [(f"fold {k}", f"east-predict --checkpoint run{k}", ["--checkpoint", str(runs[k])]) for k in (0, 1)]
    predictions += [("folds 0 + 1, maps averaged", "east-predict (both) --fuse maps", [*both, "--fuse", "maps"]),
                    ("folds 0 + 1, quads fused", "east-predict (both) --fuse quads", [*both, "--fuse", "quads"]),
                    ("folds 0 + 1, quads fused, either", "east-predict (both) --fuse quads --votes 1",
                     [*both, "--fuse", "quads", "--votes", "1"])]
    files = {}
    for k, (what, command, flags) in enumerate(predictions):
        print(f"{what}: predict, evaluate", file=sys.stderr, flush=True)
        files[what] = here / f"pred{k}.json"
        seconds = quiet(predict.main, [*flags, "--data", str(root), "--split", "val", "--out", str(files[what]),
                                       "--device", str(device), "--quiet"])
        rows.append(row(what, command, score(gt, files[what]), seconds / n))
    for what, command, votes in (("ensemble of the fold files", "east-cache ensemble", []),
                                 ("ensemble of the fold files, either", "east-cache ensemble --votes 1",
                                  ["--votes", "1"])):
        out = here / f"{what.replace(' ', '_')}.json"
        seconds = quiet(cli.main, ["ensemble", "--pred", str(files["fold 0"]), "--pred", str(files["fold 1"]),
                                   "--out", str(out), *votes])
        rows.append(row(what, command + " (after the two single-model predictions)", score(gt, out), seconds / n))


def row(what: str, command: str, r: dict, per_image: float) -> list[str]:
    return [what, command, f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['hmean']:.4f}", str(r["detections"]),
            f"{per_image:.3f}"]


def verdict(rows: list[list[str]]) -> str:
    """Which of --fuse maps and --fuse quads (default votes) scored the higher hmean, in words."""
    hmean = {r[0]: float(r[4]) for r in rows}
    maps, quads = hmean.get("folds 0 + 1, maps averaged"), hmean.get("folds 0 + 1, quads fused")
    if maps is None or quads is None:
        return "Fusion: not measured (the run stopped before both fused predictions)"
    best = max((v, k) for k, v in hmean.items())
    if best[0] == 0:
        return "Fusion: no prediction scored above 0 (the models learned too little to tell the fusions apart)"
    if maps == quads:
        which = f"--fuse maps and --fuse quads scored the same hmean, {maps:.4f}"
    else:
        which = (f"--fuse {'maps' if maps > quads else 'quads'} scored the higher hmean: maps {maps:.4f}, "
                 f"quads {quads:.4f}")
    return f"Fusion: {which}; the best of all rows: {best[1]}, {best[0]:.4f}"


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--quick", action="store_true", help="tiny sizes unless given (a CPU check that every step runs)")
    p.add_argument("--train-images", type=int, default=48, help="generated training pages, split into 2 folds "
                                                               "(default 48)")
    p.add_argument("--val-images", type=int, default=16, help="held-out pages predicted and scored (default 16)")
    p.add_argument("--words", type=int, default=120, help="words per page (default 120)")
    p.add_argument("--image-size", type=int, default=1024, help="the fold caches' --image-size, px (default 1024)")
    p.add_argument("--input-size", type=int, default=512, help="the fold caches' --input-size, px (default 512)")
    p.add_argument("--batch-size", type=int, default=12, help="east-train --batch-size (default 12)")
    p.add_argument("--time-limit", type=float, default=45.0,
                   help="east-train --time-limit of each fold model, s (default 45)")
    p.add_argument("--workers", type=int, help="east-train --workers (default: as train.py picks them)")
    p.add_argument("--seed", type=int, default=0, help="east-train --seed of both models (default 0)")
    p.add_argument("--jobs", type=int, default=8, help="build jobs (default 8)")
    a = p.parse_args(argv)
    if a.quick:
        p.set_defaults(**QUICK)
        a = p.parse_args(argv)
    return a


def main(argv=None) -> int:
    a = parse(argv)
    device = measured_device(a.device)
    if device is None:
        return 0
    rows, trained = [], {}
    common.BENCH_DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=common.BENCH_DATA, prefix="fusion-") as tmp:
        try:
            run(a, device, Path(tmp), rows, trained)
        except Interrupted as e:
            print(f"interrupted during {e}: the table holds the rows made before it", file=sys.stderr)
    steps = ", ".join(f"fold {k}: {s:.0f} s, {n} steps" for k, (s, n) in trained.items()) or "none finished"
    print(f"Two fold models: {a.train_images} generated pages split into 2 folds (east-cache split), a cache of each "
          f"at --image-size {a.image_size} --input-size {a.input_size} (the build's defaults otherwise: pages stored "
          f"resized only), east-train --time-limit {a.time_limit:g} --batch-size {a.batch_size} --backbone-weights "
          f"random on {device.type} ({steps}); east-predict of {a.val_images} held-out pages at the caches' image "
          f"size; rect DetEval (east-cache evaluate); s per image: the command's wall time (checkpoint loading "
          f"included) over the images\n")
    print(table(["predictions", "command", "precision", "recall", "hmean", "detections", "s per image"], rows))
    print(f"\n{verdict(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
