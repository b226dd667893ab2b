"""The training command line (`python train.py`, `east-train`): flags -> a TrainConfig resolved once -> a
training run, --eval-only, or --export-onnx. Errors whose messages say what to do print as one line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch.distributed as dist

from east.augment import IMAGENET_MEAN, IMAGENET_STD
from east.config import resolve_config
from east.engine import NonFiniteLoss
from east.export import export_onnx
from east.model import check_backbone_file
from east.runtime import leave_group, setup_device
from east.trainer import evaluate_checkpoint, train
from preprocess.errors import BuildError, CacheError, DataError, UsageError


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Train EAST on a cache built by `python -m preprocess build`; "
                                            "evaluate or export a checkpoint.")
    p.add_argument("--cache", type=Path, default=Path("cache"), help="training cache directory (default: cache)")
    p.add_argument("--val-cache", type=Path,
                   help="validation cache; its loss is computed after every epoch, detection metrics per --eval-every")
    p.add_argument("--eval-every", type=int, metavar="N",
                   help="epochs between detection metrics on --val-cache: predictions decoded to quads, DetEval "
                        "precision/recall/hmean against its words, logged with the epoch (and after the last); "
                        "default 1 with --val-cache, 0: off")
    p.add_argument("--rebuild", action="store_true",
                   help="if a cache (train or val) is stale, update it before training")
    p.add_argument("--out", type=Path, default=Path("runs/east"),
                   help="checkpoints, log.jsonl, eval.jsonl, profile trace")
    p.add_argument("--epochs", type=int, help="epochs (default 50; without a GPU a 1-epoch, 20-step check run)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps in total")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="stop after the step that crosses this wall time")
    p.add_argument("--batch-size", type=int, help="samples per step per process (default 8; 1 in the no-GPU check run)")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches accumulated per optimiser step")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate; x0.1 at half the epochs")
    p.add_argument("--clip-grad", type=float, help="clip the gradient norm to this value")
    p.add_argument("--amp", choices=("fp16", "bf16", "off"), help="autocast dtype (default fp16 on CUDA, off on CPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--jitter", type=float, default=0.5,
                   help="colour jitter strength: brightness/contrast/saturation x U[1-j,1+j], hue U[-j/2,j/2] (0: off)")
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader worker processes. 0 (default): this process reads the cache one batch ahead in "
                        "a thread, copying once into pinned memory; a cached batch is a memcpy, so one thread keeps "
                        "up (`python -m preprocess bench CACHE` measures both on your disk). N > 0: N processes, "
                        "e.g. for a cache on network storage where reads wait on I/O")
    p.add_argument("--device", help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0, help="seed of shuffling, jitter and initialisation")
    p.add_argument("--backbone-weights", type=Path,
                   help="torchvision-format vgg16_bn state dict (.pth) for the backbone; default: random init")
    p.add_argument("--resume", type=Path, help="checkpoint to continue from (e.g. runs/east/latest.pt)")
    p.add_argument("--save-every", type=int, default=1, help="write a checkpoint every N epochs (and after the last)")
    p.add_argument("--log-every", type=int, default=20, help="optimiser steps between loss logs (the only host syncs)")
    p.add_argument("--max-bad-steps", type=int, default=20, help="abort after this many non-finite steps in a row")
    p.add_argument("--profile", type=int, metavar="N", help="profile N steps, write out/profile_trace.json and stop")
    p.add_argument("--checkpoint", type=Path, metavar="CKPT", help="checkpoint for --eval-only or --export-onnx")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--eval-only", action="store_true",
                      help="no training: DetEval precision/recall/hmean of --checkpoint on --val-cache (or --cache), "
                           "printed and appended to OUT/eval.jsonl")
    mode.add_argument("--export-onnx", type=Path, metavar="PATH",
                      help="no training: write --checkpoint as ONNX and check it with onnxruntime. Input 'image': "
                           "float32 (B, 3, H, W), RGB in [0, 1] normalised per channel as (x - mean) / std with the "
                           f"ImageNet mean {IMAGENET_MEAN} and std {IMAGENET_STD}; B, H, W dynamic, H and W "
                           "multiples of 32 (the backbone's stride). Outputs, at s = the map scale of the "
                           "checkpoint's cache: 'score' (B, 1, sH, sW) in [0, 1] and 'geo' (B, 5, sH, sW): distances "
                           "to the word's top, bottom, left, right edges in input px, angle in rad "
                           "(east.decode.decode_maps turns them into quads). Needs pip install -e \".[export]\"")
    return p


# counts that have a floor: the least value each flag takes (0 for --workers: read in this process;
# 0 for --eval-every: no detection metrics)
LEAST_VALUES = {"--accum-steps": 1, "--log-every": 1, "--save-every": 1, "--batch-size": 1, "--epochs": 1,
                "--profile": 1, "--max-steps": 1, "--max-bad-steps": 1, "--workers": 0, "--eval-every": 0}


def check_flags(args) -> None:
    """Flags that only make sense together: --checkpoint with the modes that read it, --eval-every with the
    cache it evaluates on; counts out of range; a --backbone-weights file that is not there. Checked before
    anything slow starts."""
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
    if args.eval_every and not args.val_cache:
        raise UsageError("--eval-every needs --val-cache DIR, the cache whose words the predictions are scored on")
    if args.backbone_weights is not None:
        check_backbone_file(args.backbone_weights)



def run(argv: list[str] | None = None) -> None:
    """The command for these arguments; its errors propagate (main() turns them into one line)."""
    args = get_args_parser().parse_args(argv)
    check_flags(args)
    if args.export_onnx:
        export_onnx(args.checkpoint, args.export_onnx)
        return
    rt = setup_device(args.device)
    try:
        cfg = resolve_config(args, rt.device)
        if args.eval_only:
            evaluate_checkpoint(cfg, rt, args.checkpoint)
        else:
            train(cfg, rt)
        if rt.world > 1:
            # Leave together: rank 0 may still be writing its checkpoint, and a rank that tears its end of the
            # group down while a peer is still connected can abort at exit (a 2-process gloo run did, once).
            dist.barrier()
    finally:
        leave_group(rt)


def main(argv: list[str] | None = None) -> int:
    """The console entry point. Returns the exit status: 2 for bad flags, caches or data (also from --rebuild),
    1 when training diverged."""
    try:
        run(argv)
    except (CacheError, UsageError, DataError, BuildError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NonFiniteLoss as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
