"""What a training run is asked to do: the flags of `east-train` (`python train.py`), checked before anything
slow starts, and the frozen TrainConfig they resolve to, once; and what changes while it runs (RunState).

Defaults depend on the device only, never on which other flags were given: a GPU trains EPOCHS epochs in
batches of BATCH_SIZE; a CPU reads batches of CPU_BATCH_SIZE, and when no run length is given at all
(--epochs, --max-steps, --time-limit) it makes a short check run that CPU_BUDGET_* bound.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from east_cache.augment import add_flags as add_augment_flags
from east_cache.bounds import COUNT, COUNT_OR_ZERO, POSITIVE, SEED, THREADS, WORKERS, flag_number
from east_cache.model.model import check_backbone_file
from east_cache.train.report import REPORT_TO, chosen
from east_cache.reader.images import BASELINE_JITTER, IMAGENET_MEAN, IMAGENET_STD, JITTER
from east_cache.errors import CommandParser, UsageError, cache_command
from east_cache.location import flag_location, is_remote
from east_cache.store.remote.local_cache import add_local_cache_args
from east_cache.store.selection import add_flags as add_selection_flags, given_repeat

EPOCHS = 50                  # epochs when --epochs is not given
BATCH_SIZE = 8               # samples per micro-batch per process on a GPU (training and --eval-only)
CPU_BATCH_SIZE = 1           # the same on a CPU, where a GPU batch of 1024 px crops needs gigabytes and minutes a step
# `python train.py` on a CPU without --epochs, --max-steps or --time-limit: a check run that ends within minutes
CPU_BUDGET_STEPS = 20        # optimiser steps
CPU_BUDGET_SECONDS = 120.0   # s of training; stop before a step that would cross this (by the last step's time)
OUT = Path("runs/east")      # --out of a training run
BACKBONES = ("imagenet", "random")  # --backbone-weights words; anything else is a file
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}  # --amp -> autocast dtype


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run, defaults resolved. The flags of the same name (get_args_parser) say more."""
    cache: Path | str = Path("cache")      # training cache directory, or URL (s3://bucket/prefix)
    val_cache: Path | str | None = None    # validation cache: loss every epoch, detection metrics per eval_every
    val_data: Path | None = None           # dataset root: full val_split images predicted, rect DetEval per eval_every
    val_split: str = "val"                 # val_data's split: ROOT/ufo/{val_split}.json
    split: str | None = None               # the cache's images trained on (store/selection.py); None: all
    repeat: dict | None = None             # {source: R}: its images R times an epoch on average; None: 1 each
    out: Path = OUT                        # checkpoints, log.jsonl, eval.jsonl, profile trace
    epochs: int = EPOCHS                   # epochs in all, counting those a resumed checkpoint has done
    max_steps: int | None = None           # optimiser steps in all (over resumes); None: no cap
    time_limit: float | None = None        # s of wall time for this run; stop before a step that would cross it
    batch_size: int = BATCH_SIZE           # samples per micro-batch per process
    accum_steps: int = 1                   # micro-batches per optimiser step
    lr: float = 1e-3                       # Adam learning rate; x0.1 at half the epochs
    clip_grad: float | None = None         # max gradient L2 norm; None: no clipping
    amp: str = "off"                       # autocast: "fp16" (with GradScaler), "bf16" or "off" (float32)
    compile: bool = False                  # torch.compile the model
    jitter: float = BASELINE_JITTER        # colour jitter strength (0: off), see east_cache.reader.images.color_jitter
    augment: str | None = None             # a recipe of per-crop transforms (east_cache/reader/transform.py); None: none
    # the reader's geometric draw (east_cache/augment.py Augment, flags of the same names); None: the cache's build
    # value (scale 1, perspective 0), or with --resume the checkpoint's
    height_jitter: float | None = None
    max_rotation: float | None = None
    input_size: int | None = None
    scale: tuple[float, float] | None = None
    perspective: float | None = None
    scale_p: float | None = None
    perspective_p: float | None = None
    workers: int | None = None             # loader worker processes; 0: a prefetch thread in this process; None: auto
    seed: int = 0                          # seed of shuffling, jitter and initialisation
    backbone_weights: str = "imagenet"     # "imagenet" (torchvision's, downloaded once), "random" or a .pth file
    resume: Path | None = None             # checkpoint to continue from
    init_from: Path | None = None          # checkpoint whose weights a new run starts from (other data)
    keep_last: int = 3                     # newest epoch checkpoints kept (latest.pt and best.pt too); 0: all
    save_every: int = 1                    # epochs between checkpoints (the last is always saved)
    save_every_steps: int | None = None    # optimiser steps between mid-epoch checkpoints; None: none
    log_every: int = 20                    # optimiser steps between loss logs (the host syncs)
    max_bad_steps: int = 20                # non-finite optimiser steps in a row before giving up
    eval_every: int = 0                    # epochs between detection metrics (val_data, else val_cache); 0: none
    rebuild: bool = False                  # update a stale cache before training
    local_cache: Path | None = None        # caches at URLs are downloaded into LOCAL_CACHE/HASH; None: ~/.cache/east-cache
    local_cache_limit: str = "0"           # most bytes each such folder holds, e.g. "20G"; "0": no limit
    nvjpeg: bool = False                   # jpeg page tiles decoded on the GPU by nvJPEG, not by the loader workers
    node_share: bool = False               # each machine reads a fixed share of the cache's files
    nodes: int | None = None               # machines of the run with node_share; None: torchrun's environment says
    node_rank: int | None = None           # this machine's place among them; None: torchrun's environment says
    profile: int | None = None             # steps to profile (after one warm-up), then stop; None: no profiling
    check_run: bool = False                # the short CPU run that CPU_BUDGET_* bound, chosen by default
    threads: int | None = None             # torch intra-op threads of each process; None: torch's default
    report_to: tuple[str, ...] = ()        # experiment trackers the run reports to (east_cache.train.report)
    run_name: str | None = None            # the run's name there; None: --out's folder name

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
    epoch_sums: torch.Tensor | None = None     # that epoch's loss sums and good-step count (east_cache.train.engine)
    step_limit: int | None = None              # stop when step reaches this (--max-steps, or --profile's end)
    deadline: float | None = None              # time.perf_counter() value of --time-limit
    step_s: float = 0.0                        # s the last optimiser step took, batch included: the next one's guess
    stopped: bool = False                      # step_limit, deadline or a signal reached
    signal: int | None = None                  # SIGINT / SIGTERM received: stop at the next step boundary
    last_checkpoint: Path | None = None        # the newest checkpoint this run wrote
    last_complete: bool = True                 # whether that one ends an epoch (else the next save replaces it)
    best: dict | None = None                   # {"metric", "value", "epoch"} of best.pt, the best saved epoch
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
    if args.nvjpeg and not cuda:
        raise UsageError(f"--nvjpeg decodes on a CUDA device, and this run's is {device}: drop --nvjpeg (the loader "
                         f"workers decode), or pass --device cuda on a machine with a GPU")
    given.setdefault("batch_size", BATCH_SIZE if cuda else CPU_BATCH_SIZE)
    lengths = (args.epochs, args.max_steps, args.time_limit)
    if not cuda and all(v is None for v in lengths) and not getattr(args, "eval_only", False):
        given.update(epochs=1, max_steps=CPU_BUDGET_STEPS, time_limit=CPU_BUDGET_SECONDS, check_run=True)
    if args.eval_every is None:
        given["eval_every"] = 1 if args.val_cache or getattr(args, "val_data", None) else 0
    given["report_to"] = chosen(getattr(args, "report_to", None))
    given["repeat"] = given_repeat(getattr(args, "repeat", None))
    if args.out is None:
        checkpoint = getattr(args, "checkpoint", None)
        given["out"] = checkpoint.parent if getattr(args, "eval_only", False) and checkpoint else OUT
    return TrainConfig(**given)


# ---------------------------------------------------------------- the command line

EXAMPLES = """examples:
  {train} --cache cache/train --val-data /data/set     train; full-image rect hmean of its val split per epoch
  {train} --cache cache/train --scale 0.5,1 --perspective 0.05 --max-rotation 15
                                                  choose the crops' geometry: no rebuild (--geometry read caches)
  {train} --cache cache/train --split train0 --val-data /data/set --val-split val0 --repeat cord=0.5
                                                  fold 0 of one cache, half of the cord source's images an epoch
  {train} --cache cache/train --resume runs/east/latest.pt
                                                  go on where a run stopped (Ctrl-C saves, and prints this line)
  torchrun --nproc_per_node=4 train.py --cache cache/train      several GPUs; --batch-size is per process
  {train} --cache cache/train --out runs/lr3e-4 --lr 3e-4 --report-to tensorboard wandb
                                                  also to TensorBoard and (offline) wandb; `{runs}`
  {train} --eval-only --checkpoint runs/east/latest.pt --val-data /data/set
  {train} --export-onnx east.onnx --checkpoint runs/east/latest.pt
"""


def get_args_parser() -> argparse.ArgumentParser:
    """Flags default to None (not given); TrainConfig's defaults, resolved once in resolve_config, fill them."""
    d = TrainConfig()
    p = CommandParser(
        prog=shlex.join(invoked_as()),
        description=f"Train the EAST text detector on a cache built by `{cache_command('build')}`, evaluate a "
                    "checkpoint (--eval-only) or export one to ONNX (--export-onnx). Ctrl-C stops at the next "
                    "step and saves a checkpoint that --resume continues from exactly.",
        epilog=EXAMPLES.format(train=shlex.join(invoked_as()), runs=cache_command("runs runs/*")), formatter_class=argparse.RawDescriptionHelpFormatter)
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
    data.add_argument("--eval-every", type=flag_number(COUNT_OR_ZERO), metavar="N",
                      help="epochs between detection metrics, and after the last: on --val-data's full images (rect "
                           "DetEval), else on --val-cache's crops (polygon DetEval against its words); 0: off "
                           "(default: 1 with --val-data or --val-cache, else 0)")
    data.add_argument("--rebuild", action="store_true",
                      help="update a stale cache (train or val) before training, or rebuild one that other sample code "
                           "or another cache format version made (default: off; such a cache stops the run with the "
                           "command that updates it)")
    data.add_argument("--workers", type=flag_number(WORKERS),
                      help="worker processes that cut batches into shared slots; 0: this process reads one batch "
                           f"ahead in a thread, enough for a --crop build cache (`{cache_command('bench CACHE')}` "
                           "measures the settings) (default: on a GPU, a page-mode cache (--crop read) gets one "
                           "per core of this process but one, at most 12; otherwise 0)")
    data.add_argument("--nvjpeg", action="store_true",
                      help="a jpeg page cache's tiles decoded on the GPU by nvJPEG (needs torchvision: pip install -e "
                           "\".[gpu]\"), instead of by the loader workers on the CPU (default: off, the workers)")
    remote = p.add_argument_group("caches at URLs, several machines")
    add_local_cache_args(remote)
    remote.add_argument("--node-share", action="store_true",
                        help="each machine reads a fixed share of the cache's whole files (downloading about 1/nodes "
                             "of a cache at a URL), shuffled within the machine; nodes and this machine's rank from "
                             "torchrun (default: off, every rank reads from the whole cache)")
    remote.add_argument("--nodes", type=flag_number(COUNT),
                        help="with --node-share: machines in the run (default: torchrun's)")
    remote.add_argument("--node-rank", type=flag_number(COUNT_OR_ZERO),
                        help="with --node-share: this machine's rank (default: torchrun's)")
    length = p.add_argument_group("run length (a CPU run given none of these is a short check run: "
                                  f"{CPU_BUDGET_STEPS} steps or {CPU_BUDGET_SECONDS:g} s)")
    length.add_argument("--epochs", type=flag_number(COUNT),
                        help=f"epochs in all, counting resumed ones (default: {d.epochs})")
    length.add_argument("--max-steps", type=flag_number(COUNT),
                        help="optimiser steps in all, counting resumed ones (default: no cap)")
    length.add_argument("--time-limit", type=flag_number(POSITIVE), metavar="SECONDS",
                        help="stop before a step that would pass this wall time of training (by the last step's "
                             "time), saving a checkpoint (default: none)")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--batch-size", type=flag_number(COUNT),
                     help=f"samples per micro-batch per process (default: {d.batch_size} on a GPU, "
                          f"{CPU_BATCH_SIZE} on a CPU)")
    opt.add_argument("--accum-steps", type=flag_number(COUNT),
                     help=f"micro-batches per optimiser step (default: {d.accum_steps})")
    opt.add_argument("--lr", type=flag_number(POSITIVE),
                     help=f"Adam learning rate, x0.1 at half the epochs (default: {d.lr:g})")
    opt.add_argument("--clip-grad", type=flag_number(POSITIVE), metavar="NORM",
                     help="clip the gradient norm (default: no clipping)")
    opt.add_argument("--amp", choices=tuple(AMP_DTYPES),
                     help="mixed precision: fp16 (with loss scaling), bf16, or off (default: fp16 on CUDA, else off)")
    opt.add_argument("--compile", action="store_true", help="torch.compile the model (default: off)")
    opt.add_argument("--jitter", type=flag_number(JITTER),
                     help="colour jitter strength j: brightness, contrast, saturation x U[1-j, 1+j], hue "
                          f"U[-j/2, j/2] turns; 0: off (default: {d.jitter})")
    opt.add_argument("--augment", metavar="RECIPE",
                     help="your own transforms of each training crop, run by the loader workers before the jitter and "
                          "the normalisation: an albumentations pipeline file (A.save(pipeline, 'aug.yaml', "
                          "data_format='yaml'), or .json; its geometric transforms move the words too) or FILE.py:NAME "
                          "(a pipeline or callable image -> image in a Python file); recorded in the checkpoint, "
                          "which --resume reuses; never on validation (default: none; needs pip install -e "
                          "\".[augment]\")")
    add_augment_flags(p)
    add_selection_flags(p)
    opt.add_argument("--seed", type=flag_number(SEED),
                     help=f"seed of shuffling, jitter and initialisation (default: {d.seed})")
    opt.add_argument("--backbone-weights", metavar="imagenet|random|FILE",
                     help="start the VGG16-BN backbone from torchvision's ImageNet weights (downloaded once, "
                          "528 MB, into the torch hub cache), from random weights, or from a torchvision vgg16_bn "
                          f"state dict file; ignored with --resume and --init-from (default: {d.backbone_weights})")
    opt.add_argument("--max-bad-steps", type=flag_number(COUNT), metavar="N",
                     help=f"stop after N non-finite steps in a row (default: {d.max_bad_steps})")
    out = p.add_argument_group("output and resuming")
    out.add_argument("--out", type=flag_location,
                     help=f"folder for checkpoints (epoch_N.pt, latest.pt), log.jsonl and eval.jsonl (default: "
                          f"{d.out}; with --eval-only, the checkpoint's folder)")
    out.add_argument("--resume", type=Path, metavar="CKPT",
                     help="continue the run a checkpoint was saved in, at the step it was saved, on the cache it "
                          "was trained on (default: none)")
    out.add_argument("--init-from", type=Path, metavar="CKPT",
                     help="start a new run from a checkpoint's weights only (optimiser, schedule and epochs anew): "
                          "the way to go on with other data; --backbone-weights is then ignored (default: none)")
    out.add_argument("--keep-last", type=flag_number(COUNT_OR_ZERO), metavar="N",
                     help=f"keep the newest N epoch checkpoints (latest.pt and best.pt, the best by validation, "
                          f"always); 0: keep all (default: {d.keep_last})")
    out.add_argument("--save-every", type=flag_number(COUNT), metavar="N",
                     help=f"checkpoint every N epochs and after the last (default: {d.save_every})")
    out.add_argument("--save-every-steps", type=flag_number(COUNT), metavar="N",
                     help="also checkpoint every N optimiser steps inside an epoch, keeping the newest such file "
                          "(default: only at epoch ends)")
    out.add_argument("--log-every", type=flag_number(COUNT), metavar="N",
                     help=f"optimiser steps between loss records in log.jsonl (default: {d.log_every})")
    out.add_argument("--report-to", nargs="+", action="extend", choices=REPORT_TO, metavar="NAME",
                     help="also send the run to experiment trackers, one or more of tensorboard (event files in "
                          "--out), wandb (offline in OUT/wandb unless you are logged in or WANDB_MODE says), mlflow "
                          "(MLFLOW_TRACKING_URI, else MLflow's local store in the working folder): losses, lr, "
                          "samples/s, data wait, validation metrics, the whole recipe as config, the first batch and "
                          "the worst validation images as pictures; each needs its extra, e.g. pip install -e "
                          "\".[wandb]\" (default: none)")
    out.add_argument("--run-name", help="the run's name in the trackers (default: --out's folder name)")
    out.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when there is one)")
    out.add_argument("--threads", type=flag_number(THREADS), metavar="N",
                     help="torch's intra-op threads in each process, for the model's work on a CPU (default: torch's, "
                          "one per core)")
    out.add_argument("--profile", type=flag_number(COUNT), metavar="N",
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
                           "(east_cache.model.decode.decode_maps turns them into quads). Needs "
                           "pip install -e \".[export]\"")
    return p


def check_flags(args) -> None:
    """Flags that only make sense together: --checkpoint with the modes that read it, --eval-every with the
    cache it evaluates on, --node-rank within --nodes; a --backbone-weights or --resume file that is not there.
    Checked before anything slow starts; each number's own range is its flag's type (east_cache/bounds.py)."""
    wants = "--eval-only" if args.eval_only else "--export-onnx" if args.export_onnx else None
    if wants and args.checkpoint is None:
        raise UsageError(f"{wants} needs --checkpoint CKPT, a file that train.py wrote (e.g. "
                         f"{(args.out or OUT) / 'latest.pt'})")
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
    check_node_flags(args.nodes, args.node_rank)
    if is_remote(args.out):
        raise UsageError(f"--out {args.out}: checkpoints and logs go to a local folder")
    if args.resume is not None and args.init_from is not None:
        raise UsageError("--resume continues a run, --init-from starts a new one from its weights: pass one of them")
    for flag, path in (("--resume", args.resume), ("--init-from", args.init_from)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such checkpoint; pass a file that a run wrote into its --out, "
                             f"e.g. {path.parent / 'latest.pt'}")


def check_node_flags(nodes: int | None, node_rank: int | None) -> None:
    """--nodes N (N > 1) names a run over several machines: outside torchrun, which says the machine's rank, this
    one's must be given, else every machine would read node 0's share."""
    if node_rank is not None and nodes is not None and node_rank >= nodes:
        raise UsageError(f"--node-rank {node_rank} must lie in [0, --nodes {nodes})")
    if nodes is not None and nodes > 1 and node_rank is None and not under_launcher():
        raise UsageError(f"--nodes {nodes}: pass --node-rank too (0 to {nodes - 1}, this machine's place), or start "
                         f"the run with torchrun, which tells each machine its rank")


def under_launcher() -> bool:
    """Whether torchrun (or a launcher like it) started this process: it sets the machine's rank."""
    return any(k in os.environ for k in ("GROUP_RANK", "NODE_RANK"))


def invoked_as() -> list[str]:
    """How this process was started, as a user would type it: python train.py, python -m east_cache.train.train,
    east-train."""
    started = Path(sys.argv[0])
    if started.name and started.resolve() == Path(__file__).with_name("train.py").resolve():
        return ["python", "-m", "east_cache.train.train"]
    return ["python", sys.argv[0]] if started.name == "train.py" else ["east-train"]
