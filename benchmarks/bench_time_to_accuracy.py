"""Time to accuracy: the same EAST, optimiser, schedule, seed and number of samples trained (a) from a cache
through train.py's loader, (b) on the fly with this project's make_sample in DataLoader workers (a new draw per
image per epoch) and (c) the slow way a common baseline does it (PIL, per-word Python targets); the full-image rect
DetEval hmean on held-out generated pages after every --eval-every epochs, and the training wall time to each
(evaluations excluded). Claim only what the curves show: the hmean per sample seen, and the ratio of wall times.
benchmarks/tta.py says what each arm does. Prints markdown tables; asserts nothing.

    python benchmarks/bench_time_to_accuracy.py                        # GPU sizes: 96 pages, 512-px crops ...
    python benchmarks/bench_time_to_accuracy.py --quick --device cpu   # a check that every arm runs
    python benchmarks/bench_time_to_accuracy.py --arms cache,fly --epochs 12 --time-limit 120

Data: generated document pages (1600x2200 px, ~120 words): --train-images names over --distinct pages to train on
(common.repeated_pages: each name draws its own augmentation), and --val-images others, from another seed, held
out. The cache is built at --image-size / --input-size (map scale 0.5).
"""
from __future__ import annotations

import argparse
import sys

from common import arm_parser, held_out_pages, measured_device, parse_arms, repeated_pages, table
from tta import Schedule, curve_rows, make_loader, ratio_rows, same_hmean_rows, train_arm, warm_up

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.train.validate import val_pages
from east_cache.build.run import build_cache

ARMS = ("cache", "fly", "baseline")
QUICK = {"train_images": 4, "distinct": 2, "val_images": 2, "image_size": 192, "input_size": 64, "batch_size": 2, "epochs": 2,
         "eval_every": 1, "workers": 1, "words": 20}


def parse(argv=None) -> argparse.Namespace:
    p = arm_parser(__doc__.splitlines()[0], ARMS, "tiny sizes unless given (a CPU check that every arm runs)")
    p.add_argument("--train-images", type=int, default=96, help="training pages: samples per epoch (default 96)")
    p.add_argument("--distinct", type=int, default=48,
                   help="distinct generated pages among them, each under several names (default 48)")
    p.add_argument("--val-images", type=int, default=16, help="held-out pages scored (default 16)")
    p.add_argument("--words", type=int, default=120, help="words per page (default 120)")
    p.add_argument("--image-size", type=int, default=1024, help="pages' long side, px (default 1024)")
    p.add_argument("--input-size", type=int, default=512, help="crop side, px (default 512)")
    p.add_argument("--codec", default="raw", help="the cache's page codec, raw or jpeg (default raw)")
    p.add_argument("--batch-size", type=int, default=12, help="crops per step (default 12)")
    p.add_argument("--epochs", type=int, default=12, help="epochs per arm (default 12)")
    p.add_argument("--eval-every", type=int, default=3, help="epochs between evaluations (default 3)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3, train.py's)")
    p.add_argument("--seed", type=int, default=0, help="seed of every arm (default 0)")
    p.add_argument("--workers", type=int, help="loader workers (default: the cache as train.py picks, the "
                                                "others one per core)")
    p.add_argument("--time-limit", type=float, default=0.0,
                   help="s of training per arm: it stops before a step that would pass it, then it is evaluated "
                        "(default 0: none)")
    p.add_argument("--jobs", type=int, default=8, help="build jobs (default 8)")
    return parse_arms(p, argv, QUICK, ARMS)


def main(argv=None) -> int:
    a = parse(argv)
    device = measured_device(a.device)
    if device is None:
        return 0
    amp = "fp16" if device.type == "cuda" else "off"
    data = repeated_pages(a.train_images, a.distinct, a.words)
    held = held_out_pages(a.val_images, a.words)
    config = BuildConfig(image_size=a.image_size, input_size=a.input_size, image_codec=a.codec)
    cache = data.parent / f"{data.name}-cache-{a.codec}-{a.image_size}-{a.input_size}"
    build_cache(config, [data], cache, jobs=a.jobs, quiet=True)
    pages = val_pages(held, "train", config, a.batch_size)
    s = Schedule(a.epochs, a.eval_every, a.batch_size, a.lr, a.seed, amp, a.time_limit)
    warm_up(config.map_scale, s, a.input_size, device)
    curves = {}
    for arm in a.arms.split(","):
        print(f"{arm}:", file=sys.stderr, flush=True)
        try:
            loader = make_loader(arm, data, cache, config, s, a.workers, device)
            try:
                train_arm(loader, config.map_scale, s, pages, device,
                          say=lambda line: print(line, file=sys.stderr, flush=True), points=curves.setdefault(arm, []))
            finally:
                loader.close()
        except KeyboardInterrupt:   # a session's timeout (SIGINT): the evaluations made so far are still printed
            print(f"interrupted during the {arm} arm; the tables hold the evaluations made before it", file=sys.stderr)
            break
    curves = {arm: points for arm, points in curves.items() if points}
    drawn = Augment.of_cache(config).describe()
    print(f"Training {a.train_images} generated pages ({a.input_size}-px crops of pages at {a.image_size} px, "
          f"batches of {a.batch_size}, Adam lr {a.lr:g} x0.1 after epoch {max(1, a.epochs // 2)}, seed {a.seed}, "
          f"AMP {amp}, random backbone) on {device.type}; rect DetEval on {a.val_images} held-out pages, predicted "
          f"whole; seconds: training wall time so far, evaluations excluded. The cache (a {a.codec} page cache built "
          f"with the defaults: --crop {config.crop} --geometry {config.geometry}, pages stored resized only) draws "
          f"each crop at read time, {drawn}; on the fly and the baseline draw the same per sample from the "
          f"source image\n")
    print(table(["arm", "samples seen", "hmean", "precision", "recall", "loss", "seconds"], curve_rows(curves)))
    print("\nAt the cache arm's sample counts: each arm's hmean, and its training seconds (x the cache's); '-': not "
          "evaluated there (stopped earlier by --time-limit)\n")
    print(table(["samples", *(f"{arm} hmean" for arm in curves), *(f"{arm} s" for arm in curves)],
                ratio_rows(curves)))
    target, rows = same_hmean_rows(curves)
    if rows:
        print(f"\nTime to the same hmean: the first evaluation of each arm at or above {target:.3f}, the highest "
              f"hmean every arm reached; seconds x the cache arm's\n")
        print(table(["arm", "hmean", "samples seen", "seconds", "x cache"], rows))
    else:
        print("\nTime to the same hmean: not measured (an arm never rose above 0 or was not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
