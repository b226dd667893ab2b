"""The training command line (`python train.py`, `east-train`): flags -> a TrainConfig resolved once -> a
training run, --eval-only, or --export-onnx. Errors whose messages say what to do print as one line."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

import torch.distributed as dist

from east_cache.model.augment import IMAGENET_MEAN, IMAGENET_STD
from east_cache.model.backbone import check_backbone_file
from east_cache.model.config import (
    AMP_DTYPES,
    BACKBONES,
    CPU_BATCH_SIZE,
    CPU_BUDGET_SECONDS,
    CPU_BUDGET_STEPS,
    TrainConfig,
    resolve_config,
)
from east_cache.model.engine import NonFiniteLoss
from east_cache.model.export import export_onnx
from east_cache.model.runinfo import INTERRUPTED, invoked_as
from east_cache.model.runtime import leave_group, setup_device
from east_cache.model.trainer import evaluate_checkpoint, train
from east_cache.errors import BuildError, CacheError, DataError, UsageError
from east_cache.location import flag_location, is_remote
from east_cache.store.remote.local_cache import add_local_cache_args

EXAMPLES = """examples:
  python train.py --cache cache/train --val-data /data/set     train; full-image rect hmean of its val split per epoch
  python train.py --cache cache/train --resume runs/east/latest.pt
                                                  go on where a run stopped (Ctrl-C saves, and prints this line)
  torchrun --nproc_per_node=4 train.py --cache cache/train      several GPUs; --batch-size is per process
  python train.py --eval-only --checkpoint runs/east/latest.pt --val-data /data/set
  python train.py --export-onnx east.onnx --checkpoint runs/east/latest.pt
"""


def get_args_parser() -> argparse.ArgumentParser:
    """Flags default to None (not given); TrainConfig's defaults, resolved once in resolve_config, fill them."""
    d = TrainConfig()
    p = argparse.ArgumentParser(
        prog=shlex.join(invoked_as()),
        description="Train the EAST text detector on a cache built by `python -m preprocess build`, evaluate a "
                    "checkpoint (--eval-only) or export one to ONNX (--export-onnx). Ctrl-C stops at the next "
                    "step and saves a checkpoint that --resume continues from exactly.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--cache", type=flag_location,
                      help=f"training cache directory, or URL (s3://bucket/prefix, read through --local-cache) "
                           f"(default: {d.cache})")
    data.add_argument("--val-cache", type=flag_location,
                      help="validation cache (directory or URL): its loss after every epoch, detection metrics per "
                           "--eval-every (default: none)")
    data.add_argument("--val-data", type=Path, metavar="ROOT",
                      help="dataset root whose full --val-split images are predicted and scored with the competition's "
                           "rect DetEval per --eval-every: the headline precision/recall/hmean (default: none)")
    data.add_argument("--val-split", help=f"with --val-data: which ROOT/ufo/SPLIT.json (default: {d.val_split})")
    data.add_argument("--eval-every", type=int, metavar="N",
                      help="epochs between detection metrics, and after the last: on --val-data's full images (rect "
                           "DetEval), else on --val-cache's crops (polygon DetEval against its words); 0: off "
                           "(default: 1 with --val-data or --val-cache, else 0)")
    data.add_argument("--rebuild", action="store_true",
                      help="update a stale cache (train or val) before training, or rebuild one that other sample code "
                           "or another cache format version made (default: off; such a cache stops the run with the "
                           "command that updates it)")
    data.add_argument("--workers", type=int,
                      help="worker processes that cut batches into shared slots; 0: this process reads one batch "
                           "ahead in a thread, enough for a --crop build cache (`python -m preprocess bench CACHE` "
                           "measures the settings) (default: on a GPU, a page-mode cache (--crop read) gets one "
                           "per core of this process, at most 4; otherwise 0)")
    remote = p.add_argument_group("caches at URLs, several machines")
    add_local_cache_args(remote)
    remote.add_argument("--node-share", action="store_true",
                        help="each machine reads a fixed share of the cache's whole files (downloading about 1/nodes "
                             "of a cache at a URL), shuffled within the machine; nodes and this machine's rank from "
                             "torchrun (default: off, every rank reads from the whole cache)")
    remote.add_argument("--nodes", type=int, help="with --node-share: machines in the run (default: torchrun's)")
    remote.add_argument("--node-rank", type=int, help="with --node-share: this machine's rank (default: torchrun's)")
    length = p.add_argument_group("run length (a CPU run given none of these is a short check run: "
                                  f"{CPU_BUDGET_STEPS} steps or {CPU_BUDGET_SECONDS:g} s)")
    length.add_argument("--epochs", type=int, help=f"epochs in all, counting resumed ones (default: {d.epochs})")
    length.add_argument("--max-steps", type=int, help="optimiser steps in all, counting resumed ones (default: no cap)")
    length.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="stop after the step that crosses this wall time, saving a checkpoint (default: none)")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--batch-size", type=int,
                     help=f"samples per micro-batch per process (default: {d.batch_size} on a GPU, "
                          f"{CPU_BATCH_SIZE} on a CPU)")
    opt.add_argument("--accum-steps", type=int, help=f"micro-batches per optimiser step (default: {d.accum_steps})")
    opt.add_argument("--lr", type=float, help=f"Adam learning rate, x0.1 at half the epochs (default: {d.lr:g})")
    opt.add_argument("--clip-grad", type=float, metavar="NORM", help="clip the gradient norm (default: no clipping)")
    opt.add_argument("--amp", choices=tuple(AMP_DTYPES),
                     help="mixed precision: fp16 (with loss scaling), bf16, or off (default: fp16 on CUDA, else off)")
    opt.add_argument("--compile", action="store_true", help="torch.compile the model (default: off)")
    opt.add_argument("--jitter", type=float,
                     help="colour jitter strength j: brightness, contrast, saturation x U[1-j, 1+j], hue "
                          f"U[-j/2, j/2] turns; 0: off (default: {d.jitter})")
    opt.add_argument("--seed", type=int, help=f"seed of shuffling, jitter and initialisation (default: {d.seed})")
    opt.add_argument("--backbone-weights", metavar="imagenet|random|FILE",
                     help="start the VGG16-BN backbone from torchvision's ImageNet weights (downloaded once, "
                          "528 MB, into the torch hub cache), from random weights, or from a torchvision vgg16_bn "
                          f"state dict file; ignored with --resume (default: {d.backbone_weights})")
    opt.add_argument("--max-bad-steps", type=int, metavar="N",
                     help=f"stop after N non-finite steps in a row (default: {d.max_bad_steps})")
    out = p.add_argument_group("output and resuming")
    out.add_argument("--out", type=flag_location,
                     help=f"folder for checkpoints (epoch_N.pt, latest.pt), log.jsonl and eval.jsonl (default: "
                          f"{d.out}; with --eval-only, the checkpoint's folder)")
    out.add_argument("--resume", type=Path, metavar="CKPT",
                     help="continue the run a checkpoint was saved in, at the step it was saved (default: none)")
    out.add_argument("--save-every", type=int, metavar="N",
                     help=f"checkpoint every N epochs and after the last (default: {d.save_every})")
    out.add_argument("--save-every-steps", type=int, metavar="N",
                     help="also checkpoint every N optimiser steps inside an epoch, keeping the newest such file "
                          "(default: only at epoch ends)")
    out.add_argument("--log-every", type=int, metavar="N",
                     help=f"optimiser steps between loss records in log.jsonl (default: {d.log_every})")
    out.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when there is one)")
    out.add_argument("--profile", type=int, metavar="N",
                     help="profile N steps after a warm-up one, write OUT/profile_trace.json and stop (default: off)")
    other = p.add_argument_group("other modes")
    other.add_argument("--checkpoint", type=Path, metavar="CKPT",
                       help="the checkpoint --eval-only or --export-onnx reads (default: none)")
    mode = other.add_mutually_exclusive_group()
    mode.add_argument("--eval-only", action="store_true",
                      help="no training: DetEval precision/recall/hmean of --checkpoint on --val-data's full images "
                           "(rect), else on --val-cache (or --cache), printed and appended to OUT/eval.jsonl")
    mode.add_argument("--export-onnx", type=Path, metavar="PATH",
                      help="no training: write --checkpoint as ONNX and check it with onnxruntime. Input 'image': "
                           "float32 (B, 3, H, W), RGB in [0, 1] normalised per channel as (x - mean) / std with the "
                           f"ImageNet mean {IMAGENET_MEAN} and std {IMAGENET_STD}; B, H, W dynamic, H and W "
                           "multiples of 32 (the backbone's stride). Outputs, at s = the map scale of the "
                           "checkpoint's cache: 'score' (B, 1, sH, sW) in [0, 1] and 'geo' (B, 5, sH, sW): distances "
                           "to the word's top, bottom, left, right edges in input px, angle in rad "
                           "(east_cache.model.decode.decode_maps turns them into quads). Needs pip install -e \".[export]\"")
    return p


# counts that have a floor: the least value each flag takes (0 for --workers: read in this process;
# 0 for --eval-every: no detection metrics)
LEAST_VALUES = {"--accum-steps": 1, "--log-every": 1, "--save-every": 1, "--batch-size": 1, "--epochs": 1,
                "--profile": 1, "--max-steps": 1, "--max-bad-steps": 1, "--workers": 0, "--eval-every": 0,
                "--save-every-steps": 1}


def check_flags(args) -> None:
    """Flags that only make sense together: --checkpoint with the modes that read it, --eval-every with the
    cache it evaluates on; counts out of range; a --backbone-weights or --resume file that is not there.
    Checked before anything slow starts."""
    for flag, least in LEAST_VALUES.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None and value < least:  # None: not given, a default follows
            raise UsageError(f"{flag} {value}: must be {least} or more")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError(f"--time-limit {args.time_limit}: must be a positive number of seconds")
    wants = "--eval-only" if args.eval_only else "--export-onnx" if args.export_onnx else None
    if wants and args.checkpoint is None:
        raise UsageError(f"{wants} needs --checkpoint CKPT, a file that train.py wrote (e.g. runs/east/latest.pt)")
    if args.checkpoint is not None and not wants:
        raise UsageError("--checkpoint is read by --eval-only and --export-onnx only; to continue training from it, "
                         "pass --resume")
    if args.eval_every and not (args.val_cache or args.val_data):
        raise UsageError("--eval-every needs --val-data ROOT (full images) or --val-cache DIR (crops), the words the "
                         "predictions are scored on")
    if args.val_split is not None and args.val_data is None:
        raise UsageError("--val-split names a split of --val-data ROOT; pass --val-data too")
    if args.backbone_weights not in (None, *BACKBONES):
        check_backbone_file(Path(args.backbone_weights))
    if (args.nodes is not None or args.node_rank is not None) and not args.node_share:
        raise UsageError("--nodes and --node-rank say where --node-share splits the cache; pass --node-share too")
    if is_remote(args.out):
        raise UsageError(f"--out {args.out}: checkpoints and logs go to a local folder")
    if args.resume is not None and not args.resume.is_file():
        raise UsageError(f"--resume {args.resume}: no such checkpoint; pass a file that a run wrote into its --out, "
                         f"e.g. runs/east/latest.pt")



def run(argv: list[str] | None = None) -> int:
    """The command for these arguments; returns its exit status (0, or INTERRUPTED after Ctrl-C / SIGTERM).
    Errors propagate: main() turns them into one line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = get_args_parser().parse_args(argv)
    check_flags(args)
    if args.export_onnx:
        export_onnx(args.checkpoint, args.export_onnx)
        return 0
    rt = setup_device(args.device)
    try:
        cfg = resolve_config(args, rt.device)
        status = 0
        if args.eval_only:
            evaluate_checkpoint(cfg, rt, args.checkpoint)
        else:
            status = train(cfg, rt, argv)
        if rt.world > 1:
            # Leave together: rank 0 may still be writing its checkpoint, and a rank that tears its end of the
            # group down while a peer is still connected can abort at exit (a 2-process gloo run did, once).
            dist.barrier()
    finally:
        leave_group(rt)
    return status


def one_line(e: Exception) -> str:
    """The error's own message. One raised in a DataLoader worker (a cache rebuilt under a run) is re-raised
    by torch with the worker's traceback in its text, whose last line is "module.Class: message"."""
    text = str(e)
    return text.rstrip().splitlines()[-1].split(": ", 1)[-1] if "Original Traceback" in text else text


def main(argv: list[str] | None = None) -> int:
    """The console entry point. Returns the exit status: 2 for bad flags, caches or data (also from --rebuild),
    1 when training diverged, 130 when a signal stopped the run (after saving) or a second Ctrl-C did (unsaved)."""
    try:
        return run(argv)
    except (CacheError, UsageError, DataError, BuildError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except NonFiniteLoss as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted; nothing saved since the last checkpoint", file=sys.stderr)
        return INTERRUPTED


def entry() -> None:
    """`east-train` and train.py: main()'s status as the process's. A rank of a torchrun job (WORLD_SIZE > 1)
    then ends with os._exit, once its output is flushed: its work is done (the group left, every checkpoint
    written and renamed into place), and what os._exit skips is the interpreter's and the C++ libraries'
    teardown, where a 2-process gloo run aborted now and then after finishing ("terminate called without an
    active exception", no Python frame left on the stack), failing a job whose results were all saved."""
    status = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    entry()
