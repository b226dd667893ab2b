"""What a training run is asked to do (TrainConfig, frozen, built once from the command line) and what changes
while it runs (RunState).

Defaults depend on the device only, never on which other flags were given: a GPU trains EPOCHS epochs in
batches of BATCH_SIZE; a CPU reads batches of CPU_BATCH_SIZE, and when no run length is given at all
(--epochs, --max-steps, --time-limit) it makes a short check run that CPU_BUDGET_* bound.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from east_cache.errors import UsageError

EPOCHS = 50                  # epochs when --epochs is not given
BATCH_SIZE = 8               # samples per micro-batch per process on a GPU (training and --eval-only)
CPU_BATCH_SIZE = 1           # the same on a CPU: a 1024 px batch of 8 needs ~9 GB there and minutes per step
# `python train.py` on a CPU without --epochs, --max-steps or --time-limit: a check run that ends within minutes
CPU_BUDGET_STEPS = 20        # optimiser steps
CPU_BUDGET_SECONDS = 120.0   # s; stop after the step that crosses this
OUT = Path("runs/east")      # --out of a training run
BACKBONES = ("imagenet", "random")  # --backbone-weights words; anything else is a file
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}  # --amp -> autocast dtype


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run, defaults resolved. The flags of the same name in east_cache.model.cli say more."""
    cache: Path | str = Path("cache")      # training cache directory, or URL (s3://bucket/prefix)
    val_cache: Path | str | None = None    # validation cache: loss every epoch, detection metrics per eval_every
    val_data: Path | None = None           # dataset root: full val_split images predicted, rect DetEval per eval_every
    val_split: str = "val"                 # val_data's split: ROOT/ufo/{val_split}.json
    out: Path = OUT                        # checkpoints, log.jsonl, eval.jsonl, profile trace
    epochs: int = EPOCHS                   # epochs in all, counting those a resumed checkpoint has done
    max_steps: int | None = None           # optimiser steps in all (over resumes); None: no cap
    time_limit: float | None = None        # s of wall time for this run; stop after the step that crosses it
    batch_size: int = BATCH_SIZE           # samples per micro-batch per process
    accum_steps: int = 1                   # micro-batches per optimiser step
    lr: float = 1e-3                       # Adam learning rate; x0.1 at half the epochs
    clip_grad: float | None = None         # max gradient L2 norm; None: no clipping
    amp: str = "off"                       # autocast: "fp16" (with GradScaler), "bf16" or "off" (float32)
    compile: bool = False                  # torch.compile the model
    jitter: float = 0.5                    # colour jitter strength (0: off), see east_cache.model.augment.color_jitter
    workers: int | None = None             # loader worker processes; 0: a prefetch thread in this process; None: auto
    seed: int = 0                          # seed of shuffling, jitter and initialisation
    backbone_weights: str = "imagenet"     # "imagenet" (torchvision's, downloaded once), "random" or a .pth file
    resume: Path | None = None             # checkpoint to continue from
    save_every: int = 1                    # epochs between checkpoints (the last is always saved)
    save_every_steps: int | None = None    # optimiser steps between mid-epoch checkpoints; None: none
    log_every: int = 20                    # optimiser steps between loss logs (the host syncs)
    max_bad_steps: int = 20                # non-finite optimiser steps in a row before giving up
    eval_every: int = 0                    # epochs between detection metrics (val_data, else val_cache); 0: none
    rebuild: bool = False                  # update a stale cache before training
    local_cache: Path | None = None        # caches at URLs are downloaded into LOCAL_CACHE/HASH; None: ~/.cache/east-cache
    local_cache_limit: str = "0"           # most bytes each such folder holds, e.g. "20G"; "0": no limit
    node_share: bool = False               # each machine reads a fixed share of the cache's files
    nodes: int | None = None               # machines of the run with node_share; None: torchrun's environment says
    node_rank: int | None = None           # this machine's place among them; None: torchrun's environment says
    profile: int | None = None             # steps to profile (after one warm-up), then stop; None: no profiling
    check_run: bool = False                # the short CPU run that CPU_BUDGET_* bound, chosen by default

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return AMP_DTYPES[self.amp]

    def to_dict(self) -> dict:
        """JSON-ready: paths as strings (for checkpoints and log records)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


@dataclass
class RunState:
    """What changes while a run goes: counters, the place in the epoch, stop flags. Device scalars stay on the
    device so that counting a step needs no host sync."""
    step: int = 0                              # optimiser steps so far, over all epochs and resumes
    epoch: int = 0                             # the epoch in progress, 0-based (logs and files say epoch + 1)
    epoch_micro: int = 0                       # micro-batches of that epoch already consumed
    epoch_sums: torch.Tensor | None = None     # that epoch's loss sums and good-step count (east_cache.model.engine)
    step_limit: int | None = None              # stop when step reaches this (--max-steps, or --profile's end)
    deadline: float | None = None              # time.perf_counter() value of --time-limit
    stopped: bool = False                      # step_limit, deadline or a signal reached
    signal: int | None = None                  # SIGINT / SIGTERM received: stop at the next step boundary
    last_checkpoint: Path | None = None        # the newest checkpoint this run wrote
    last_complete: bool = True                 # whether that one ends an epoch (else the next save replaces it)
    bad_run: torch.Tensor = field(default_factory=lambda: torch.zeros(()))    # non-finite steps in a row
    bad_total: torch.Tensor = field(default_factory=lambda: torch.zeros(()))  # non-finite steps in all

    def to(self, device: torch.device) -> RunState:
        self.bad_run, self.bad_total = self.bad_run.to(device), self.bad_total.to(device)
        return self


def resolve_amp(amp: str | None, device: torch.device) -> str:
    """--amp defaults to fp16 on CUDA, off elsewhere."""
    amp = amp or ("fp16" if device.type == "cuda" else "off")
    if amp == "fp16" and device.type != "cuda":
        raise UsageError("--amp fp16 needs CUDA (GradScaler); use --amp bf16 or --amp off on this device")
    return amp


def resolve_config(args: argparse.Namespace, device: torch.device) -> TrainConfig:
    """The flags with their defaults filled in, once: AMP mode and batch size by device, the check run on a
    CPU given no run length, detection metrics every epoch with a validation cache, --eval-only's output
    beside its checkpoint. Flags TrainConfig does not hold (modes, --device) are left out."""
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    cuda = device.type == "cuda"
    given["amp"] = resolve_amp(args.amp, device)
    given.setdefault("batch_size", BATCH_SIZE if cuda else CPU_BATCH_SIZE)
    lengths = (args.epochs, args.max_steps, args.time_limit)
    if not cuda and all(v is None for v in lengths) and not getattr(args, "eval_only", False):
        given.update(epochs=1, max_steps=CPU_BUDGET_STEPS, time_limit=CPU_BUDGET_SECONDS, check_run=True)
    if args.eval_every is None:
        given["eval_every"] = 1 if args.val_cache or getattr(args, "val_data", None) else 0
    if args.out is None:
        checkpoint = getattr(args, "checkpoint", None)
        given["out"] = checkpoint.parent if getattr(args, "eval_only", False) and checkpoint else OUT
    return TrainConfig(**given)
