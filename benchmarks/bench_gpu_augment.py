"""train.py on a GPU at steady state under each augmentation a run may ask for, on the default cache (pages stored
resized only, --geometry read: every crop warped by its epoch's draw in the loader workers): the samples/s, the share
of step time waiting for data over the epochs after the first, and the CPU cores busy, with the loader's workers as
train.py picks them, raw and JPEG pages. Prints markdown tables; asserts nothing; with --device cuda and no CUDA device
it prints a note and measures nothing.

Arms (each train.py's epoch function on train.py's loader, made by train.py's own calls: gpu_steady.py):
  baseline  the baseline's augmentation, east_cache.Augment's defaults: height x U[0.8, 1.2], rotation U[-10, 10]
  all-on    everything the reader draws: Augment(scale=(0.5, 1), perspective=0.1, max_rotation=20)
  recipe    the baseline's geometry and a team's albumentations recipe, east-train --augment (default
            benchmarks/aug_team.yaml: six transforms, one of them moving the words)
Goal (issue 46): under 2% of the step time waiting for data for baseline and all-on; the recipe's is reported.
--recipe-workers N adds the recipe arm read by N workers: whether more of the machine's cores keep the GPU fed.

    python benchmarks/bench_gpu_augment.py                          # GPU sizes: 360 crops per epoch, 3 epochs ...
    python benchmarks/bench_gpu_augment.py --quick --device cpu     # seconds: that every arm runs
    python benchmarks/bench_gpu_augment.py --arms all-on --codecs raw --epochs 4

Data: generated document pages (1600x2200 px, ~120 words): --distinct pages, listed --images times under names of
their own (common.repeated_pages), built once per codec at --image-size / --input-size with the build's defaults
(bench_gpu.py's caches of the same sizes, shared).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_gpu import cache_of
from common import arm_parser, measured_device, parse_arms, repeated_pages, table
from gpu_steady import Steady, after_start_up, steady_epochs

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.errors import UsageError

ARMS = ("baseline", "all-on", "recipe")
CODECS = ("raw", "jpeg")
GOAL = 0.02          # the share of step time waiting for data that baseline and all-on must stay under
GOAL_ARMS = ("baseline", "all-on")
ALL_ON = {"scale": (0.5, 1.0), "perspective": 0.1, "max_rotation": 20.0}
RECIPE = Path(__file__).resolve().parent / "aug_team.yaml"
QUICK = {"images": 4, "distinct": 2, "epochs": 2, "batch_size": 2, "image_size": 192, "input_size": 64,
         "step_repeats": 2, "jobs": 1}


def arm_settings(arm: str, recipe: Path) -> tuple[tuple, str | None]:
    """(train.py's augmentation flags as (Augment field, value) pairs, its --augment recipe) of an arm."""
    if arm == "all-on":
        return tuple(ALL_ON.items()), None
    return (), str(recipe) if arm == "recipe" else None


def describe_arm(arm: str, input_size: int) -> str:
    flags, _ = arm_settings(arm, RECIPE)
    geometry = Augment(input_size=input_size, **dict(flags)).resolve(BuildConfig(input_size=input_size)).describe()
    return geometry + (", then the recipe" if arm == "recipe" else "")


def run_arms(arms: list[tuple[str, str, int | None]], codecs: list[str], caches: dict, a, device) -> dict:
    """{(arm label, codec): steady_epochs' result, or {"skipped": why}} of arms (label, arm, loader workers), in
    order; a KeyboardInterrupt (the session's timeout) ends the loop with the runs done so far."""
    amp = "fp16" if device.type == "cuda" else "off"   # train.py refuses fp16 off CUDA
    done = {}
    try:
        for label, arm, workers in arms:
            flags, recipe = arm_settings(arm, a.recipe)
            for codec in codecs:
                print(f"{label}, {codec} pages:", file=sys.stderr, flush=True)
                cfg = Steady(epochs=a.epochs, batch_size=a.batch_size, amp=amp, profile_steps=0,
                             step_repeats=a.step_repeats, workers=workers, augment=flags, recipe=recipe)
                try:
                    done[(label, codec)] = steady_epochs(caches[codec], cfg, device)
                except UsageError as e:   # the recipe does not load here (albumentations missing): said, not measured
                    done[(label, codec)] = {"skipped": str(e)}
    except KeyboardInterrupt:
        print("interrupted: the tables hold the runs done before it", file=sys.stderr)
    return done


def tables(done: dict) -> tuple[list, list]:
    """(per-epoch rows, summary rows) of run_arms' results."""
    per_epoch, summary = [], []
    for (label, codec), r in done.items():
        if "skipped" in r:
            summary.append([label, codec, "", f"skipped: {r['skipped']}", "", "", "", "", "", "", ""])
            continue
        for k, e in enumerate(r["epochs"]):
            per_epoch.append([label, codec, str(k + 1) + (" (start-up)" if k == 0 else ""), f"{e['samples_per_s']:.1f}",
                              f"{100 * e['data_wait']:.1f}%", f"{e['seconds']:.1f}", f"{e['loss']:.3f}"])
        rate, wait = after_start_up(r["epochs"])
        goal = label in GOAL_ARMS
        summary.append([label, codec, r["workers"], f"{rate:.1f}", f"{100 * wait:.2f}%",
                        f"< {100 * GOAL:g}%" if goal else "reported", ("yes" if wait < GOAL else "no") if goal else "",
                        f"{r['cores']:.1f}" if r["cores"] is not None else "n/a", f"{r['step_alone']:.1f}",
                        f"{r['loader_alone']:.1f}", f"{r['loader_alone'] / r['step_alone']:.2f}"])
    return per_epoch, summary


def parse(argv=None) -> argparse.Namespace:
    p = arm_parser(__doc__.splitlines()[0], ARMS, "tiny sizes unless given (a CPU check that every arm runs)")
    p.add_argument("--codecs", default=",".join(CODECS), help="page codecs, of raw and jpeg (default both)")
    p.add_argument("--images", type=int, default=360, help="pages in each cache: crops per epoch (default 360)")
    p.add_argument("--distinct", type=int, default=48, help="distinct generated pages among them (default 48)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run, the first one start-up (default 3)")
    p.add_argument("--batch-size", type=int, default=12, help="crops per step (default 12)")
    p.add_argument("--image-size", type=int, default=2048, help="cache pages' long side, px (default 2048)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side, px (default 1024)")
    p.add_argument("--workers", type=int, help="loader workers of every arm (default: as train.py picks them)")
    p.add_argument("--recipe", type=Path, default=RECIPE,
                   help="the recipe arm's --augment file (default benchmarks/aug_team.yaml)")
    p.add_argument("--recipe-workers", type=int,
                   help="also run the recipe arm with this many loader workers (default: not)")
    p.add_argument("--step-repeats", type=int, default=10, help="timed steps of the step alone (default 10)")
    p.add_argument("--jobs", type=int, default=8, help="build jobs (default 8)")
    a = parse_arms(p, argv, QUICK, ARMS)
    unknown = set(a.codecs.split(",")) - set(CODECS)
    if unknown:
        p.error(f"--codecs: no codec named {', '.join(sorted(unknown))}; there are {', '.join(CODECS)}")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    device = measured_device(a.device)
    if device is None:
        return 0
    codecs = a.codecs.split(",")
    data = repeated_pages(a.images, a.distinct)
    caches = {codec: cache_of(data, codec, a.image_size, a.input_size, a.jobs) for codec in codecs}
    arms = [(arm, arm, a.workers) for arm in a.arms.split(",")]
    if a.recipe_workers is not None and "recipe" in a.arms.split(","):
        arms.append((f"recipe, {a.recipe_workers} workers", "recipe", a.recipe_workers))
    done = run_arms(arms, codecs, caches, a, device)
    per_epoch, summary = tables(done)
    amp = "fp16 with loss scaling" if device.type == "cuda" else "off"
    print(f"train.py at steady state under each augmentation: engine.train_one_epoch on train.py's loader (its own "
          f"calls, workers as train.py picks them unless said), {a.epochs} epochs of {a.images} {a.input_size}-px "
          f"crops of pages stored resized only at {a.image_size} px (--geometry read, the default), batches of "
          f"{a.batch_size}, AMP {amp}, random backbone, colour jitter on the device, on {device.type}. Arms: "
          + "; ".join(f"{arm}: {describe_arm(arm, a.input_size)}" for arm in dict.fromkeys(x for _, x, _ in arms))
          + f"; the recipe: {a.recipe.name}\n")
    print(table(["arm", "codec", "epoch", "samples/s", "time waiting for data", "seconds", "loss"], per_epoch))
    print(f"\nEpochs after the first: samples/s, the share of step time waiting for data (goal: under "
          f"{100 * GOAL:g}% for {' and '.join(GOAL_ARMS)}), CPU cores busy (CPU seconds of this process and its "
          f"workers over the wall time); then the training step alone on one batch kept on the device and the loader "
          f"alone (an epoch read with nothing else running): loader / step below 1 means the reader cannot keep up\n")
    print(table(["arm", "codec", "reading", "samples/s", "waiting", "goal", "met", "busy CPU cores",
                 "step alone samples/s", "loader alone samples/s", "loader / step"], summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
