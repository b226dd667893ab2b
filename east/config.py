"""What a training run is asked to do (TrainConfig, frozen, built once from the command line) and what changes
while it runs (RunState)."""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from preprocess.errors import UsageError

BATCH_SIZE = 8               # samples per step per process, and per inference batch of --eval-only
EPOCHS = 50                  # epochs of a run on a GPU when --epochs is not given
# `python train.py` without a GPU: a check run that ends within minutes on 2 cores, even at 1024 px
CPU_BUDGET_STEPS = 20        # optimiser steps
CPU_BUDGET_SECONDS = 120.0   # s; stop after the step that crosses this
CPU_BUDGET_BATCH = 1         # samples per step, unless --batch-size is given
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}  # --amp -> autocast dtype


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run, defaults resolved (device-dependent ones included). The flags of the same name
    in east.cli say more."""
    cache: Path = Path("cache")            # training cache directory
    val_cache: Path | None = None          # validation cache: loss every epoch, detection metrics per eval_every
    out: Path = Path("runs/east")          # checkpoints, log.jsonl, eval.jsonl, profile trace
    epochs: int = EPOCHS                   # epochs in all, counting those a resumed checkpoint has done
    max_steps: int | None = None           # optimiser steps in all (over resumes); None: no cap
    time_limit: float | None = None        # s of wall time; stop after the step that crosses it; None: no limit
    batch_size: int = BATCH_SIZE           # samples per micro-batch per process
    accum_steps: int = 1                   # micro-batches per optimiser step
    lr: float = 1e-3                       # Adam learning rate; x0.1 at half the epochs
    clip_grad: float | None = None         # max gradient L2 norm; None: no clipping
    amp: str = "off"                       # autocast: "fp16" (with GradScaler), "bf16" or "off" (float32)
    compile: bool = False                  # torch.compile the model
    jitter: float = 0.5                    # colour jitter strength (0: off), see east.augment.color_jitter
    workers: int = 0                       # DataLoader worker processes; 0: a prefetch thread in this process
    seed: int = 0                          # seed of shuffling, jitter and initialisation
    backbone_weights: Path | None = None   # torchvision vgg16_bn state dict; None: random init
    resume: Path | None = None             # checkpoint to continue from
    save_every: int = 1                    # epochs between checkpoints (the last is always saved)
    log_every: int = 20                    # optimiser steps between loss logs (the host syncs)
    max_bad_steps: int = 20                # non-finite optimiser steps in a row before giving up
    eval_every: int = 0                    # epochs between detection metrics on val_cache; 0: none
    rebuild: bool = False                  # update a stale cache before training
    profile: int | None = None             # steps to profile (after one warm-up), then stop; None: no profiling
    check_run: bool = False                # the short no-GPU run that CPU_BUDGET_* bound, chosen by default

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return AMP_DTYPES[self.amp]

    def to_dict(self) -> dict:
        """JSON-ready: paths as strings (for checkpoints and log records)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


@dataclass
class RunState:
    """What changes while a run goes: counters and stop flags. Device scalars stay on the device so that
    counting a step needs no host sync."""
    step: int = 0                              # optimiser steps so far, over all epochs and resumes
    step_limit: int | None = None              # stop when step reaches this (--max-steps, or --profile's end)
    deadline: float | None = None              # time.perf_counter() value of --time-limit
    stopped: bool = False                      # step_limit or deadline reached
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
    """The flags with their defaults filled in: those that depend on the device or on other flags (AMP mode, the
    short check run on a machine without a GPU, detection metrics every epoch with a validation cache) once,
    here. Flags TrainConfig does not hold (modes, --device) are left out."""
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    given["amp"] = resolve_amp(args.amp, device)
    if args.epochs is None and args.max_steps is None and device.type != "cuda" and not args.eval_only:
        given.update(epochs=1, max_steps=CPU_BUDGET_STEPS, check_run=True,
                     time_limit=args.time_limit or CPU_BUDGET_SECONDS, batch_size=args.batch_size or CPU_BUDGET_BATCH)
    if args.eval_every is None:
        given["eval_every"] = 1 if args.val_cache else 0
    return TrainConfig(**given)
