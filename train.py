"""Train EAST (Zhou et al., CVPR 2017) on a cache built by `python -m preprocess build`.

The cache holds ready uint8 crops and float16 targets, so a training step is: copy a batch to the
device, colour-jitter and normalise it there, run the model under autocast, and compute the loss in
float32. Single process: `python train.py --cache cache`; several GPUs:
`torchrun --nproc_per_node=N train.py --cache cache` (--batch-size is per process).

With --val-cache, every --eval-every epochs the model's maps for the validation crops are decoded into quads
(east.decode) and scored against the words stored in that cache with DetEval (east.deteval):
precision, recall and hmean go into the epoch's line of OUT/log.jsonl and its printed summary.
`python train.py --eval-only --checkpoint CKPT --val-cache DIR` does that for one checkpoint, appending to
OUT/eval.jsonl; `python train.py --export-onnx model.onnx --checkpoint CKPT` writes the model for ONNX
runtimes (needs `pip install -e ".[export]"`).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import pickle
import shutil
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm import tqdm

from dataset import CacheDataset, batches, collate, make_sampler
from east.decode import decode_maps
from east.deteval import evaluate_image, gt_quads, ratios
from preprocess.errors import BuildError, CacheError, DataError
from preprocess.store.manifest import Manifest
from preprocess.store.stale import check_stale

MAX_DISTANCE = 512.0         # px; the distance head's range, sigmoid * MAX_DISTANCE (the paper's text scale)
ANGLE_WEIGHT = 10.0          # weight of the angle loss against the IoU loss, as in the paper (lambda_theta)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601 grey, as torchvision's rgb_to_grayscale
RGB_TO_YIQ = (LUMA, (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))
# VGG16-BN: conv widths, "M" = 2x2 max-pool. Laid out as torchvision's `features` (conv, bn, relu per
# width), so a torchvision vgg16_bn state dict loads by its `features.N.*` keys.
VGG16_BN = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
MERGE_WIDTHS = (128, 64, 32)  # channels after merging strides 16, 8, 4 (the paper's g/h branch)
HEAD_WIDTH = 32
HEAD_INIT_STD = 0.01  # small head weights: sigmoids start unsaturated (distance ~256 px, angle ~0)
# px of score added to the dice numerator and denominator (Laplace smoothing): a text-free batch predicted
# text-free costs 0, not 1, and one with false positives still costs > 0 with a gradient pushing them down.
# Negligible next to the hundreds of positive px of a batch with words.
DICE_SMOOTH = 1.0
BATCH_SIZE = 8               # samples per step per process, and per inference batch of --eval-only
# `python train.py` without a GPU: a check run that ends within minutes on 2 cores, even at 1024 px
CPU_BUDGET_STEPS = 20        # optimiser steps
CPU_BUDGET_SECONDS = 120.0   # s; stop after the step that crosses this
CPU_BUDGET_BATCH = 1         # samples per step, unless --batch-size is given
ONNX_OPSET = 17              # --export-onnx; run by every onnxruntime since 1.13
EXPORT_MODULES = ("onnx", "onnxruntime")  # imported by --export-onnx: the exporter writes with onnx, the check runs ort
ONNX_TRACE_SHAPE = (1, 3, 64, 64)   # input the exporter traces; any multiple of 32 gives the same graph
ONNX_CHECK_SHAPE = (2, 3, 96, 128)  # another batch, height and width: the check shows they are dynamic


# ---------------------------------------------------------------- model

def vgg16_bn_features() -> nn.Sequential:
    layers, c_in = [], 3
    for v in VGG16_BN:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c_in, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            c_in = v
    return nn.Sequential(*layers)


def conv_bn_relu(c_in: int, c_out: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


def up2(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class EAST(nn.Module):
    """VGG16-BN features at strides 4/8/16/32, merged upward (U-shape), heads at stride 1/map_scale."""

    def __init__(self, map_scale: float = 0.5):
        super().__init__()
        if map_scale not in (0.5, 0.25):
            raise ValueError(f"map_scale {map_scale} must be 0.5 (stride-2 head) or 0.25 (stride 4)")
        self.features = vgg16_bn_features()
        pools = [i for i, m in enumerate(self.features) if isinstance(m, nn.MaxPool2d)]
        self.taps = pools[1:]  # outputs of pools 2-5: strides 4, 8, 16, 32
        widths = [self.features[i - 2].num_features for i in self.taps]  # BN before each pool: 128, 256, 512, 512
        c_in, merge = widths[-1], []
        for skip, w in zip(reversed(widths[:-1]), MERGE_WIDTHS):
            merge.append(nn.Sequential(conv_bn_relu(c_in + skip, w, 1), conv_bn_relu(w, w, 3)))
            c_in = w
        self.merge = nn.ModuleList(merge)
        self.extra_up = map_scale == 0.5  # one more upsampling takes the stride-4 merge to stride 2
        self.out = conv_bn_relu(c_in, HEAD_WIDTH, 3)
        self.score = nn.Conv2d(HEAD_WIDTH, 1, 1)
        self.dist = nn.Conv2d(HEAD_WIDTH, 4, 1)
        self.angle = nn.Conv2d(HEAD_WIDTH, 1, 1)
        self.apply(init_weights)
        for head in (self.score, self.dist, self.angle):
            nn.init.normal_(head.weight, std=HEAD_INIT_STD)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B,3,S,S) normalised -> score (B,1,m,m) in [0,1] and geo (B,5,m,m): distances to the top, bottom,
        left and right edges (input px), angle (rad); the cache's channel order."""
        taps = []
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.taps:
                taps.append(x)
        y = taps[-1]
        for skip, block in zip(reversed(taps[:-1]), self.merge):
            y = block(torch.cat((up2(y), skip), 1))
        y = self.out(up2(y) if self.extra_up else y)
        dist_px = torch.sigmoid(self.dist(y)) * MAX_DISTANCE
        angle = (torch.sigmoid(self.angle(y)) - 0.5) * math.pi  # (-pi/2, pi/2), the cache's angle range
        return torch.sigmoid(self.score(y)), torch.cat((dist_px, angle), 1)


def init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


BACKBONE_HINT = ("--backbone-weights needs a torchvision vgg16_bn state dict, e.g. "
                 "torch.save(torchvision.models.vgg16_bn(weights='IMAGENET1K_V1').state_dict(), 'vgg16_bn.pth')")


def check_backbone_file(path: Path) -> None:
    if not path.is_file():
        raise UsageError(f"{path}: no such file; {BACKBONE_HINT}")


def load_backbone(model: EAST, path: Path) -> None:
    """Load the `features.*` part of a torchvision-format VGG16-BN state dict (the classifier is ignored).
    Anything else raises a UsageError that names the file and says what it must hold."""
    check_backbone_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only's refusal is a page of advice on trusting the source
        raise UsageError(f"{path}: holds more than tensors (a whole model saved with torch.save(model)?) or is "
                         f"not a torch file; {BACKBONE_HINT}") from None
    except Exception as e:  # truncated, not a zip: unreadable alike
        raise UsageError(f"{path}: cannot be read as a state dict ({type(e).__name__}: {str(e)[:200]}); "
                         f"{BACKBONE_HINT}") from None
    feats = ({k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
             if isinstance(state, dict) else {})
    if not feats:
        raise UsageError(f"{path}: no `features.N.*` keys; {BACKBONE_HINT}")
    try:
        model.features.load_state_dict(feats)
    except RuntimeError as e:  # other keys or shapes: plain vgg16 (no BN) numbers its layers differently
        raise UsageError(f"{path}: its `features` do not fit VGG16-BN ({str(e)[:300]}); {BACKBONE_HINT}") from None


# ---------------------------------------------------------------- loss

def east_loss(score, geo, gt_score, gt_geo, roi) -> dict[str, torch.Tensor]:
    """Dice + IoU + ANGLE_WEIGHT * (1 - cos) loss, in float32 whatever the prediction dtype.

    A 512 px box has an area of 1e6, past float16's 65504: the common baseline computes it under
    autocast and returns inf/NaN. Here everything is cast to float32 first.
    """
    p, d, theta = score.float(), geo[:, :4].float(), geo[:, 4:].float()
    roi = roi.float()
    pos = (gt_score > 0).float() * roi
    cls = 1 - (2 * (p * pos).sum() + DICE_SMOOTH) / ((p * roi).sum() + pos.sum() + DICE_SMOOTH)
    keep = pos > 0  # targets elsewhere are irrelevant; zeroing them keeps every map finite
    dg = torch.where(keep, gt_geo[:, :4].float(), 0.0)
    tg = torch.where(keep, gt_geo[:, 4:].float(), 0.0)
    area_p = (d[:, 0:1] + d[:, 1:2]) * (d[:, 2:3] + d[:, 3:4])
    area_g = (dg[:, 0:1] + dg[:, 1:2]) * (dg[:, 2:3] + dg[:, 3:4])
    h_i = torch.minimum(d[:, 0:1], dg[:, 0:1]) + torch.minimum(d[:, 1:2], dg[:, 1:2])
    w_i = torch.minimum(d[:, 2:3], dg[:, 2:3]) + torch.minimum(d[:, 3:4], dg[:, 3:4])
    inter = h_i * w_i
    iou_map = torch.log1p(area_p + area_g - inter) - torch.log1p(inter)  # -log((I+1)/(U+1))
    angle_map = 1 - torch.cos(theta - tg)
    n = pos.sum().clamp(min=1)  # no positives: the sums below are 0 and keep their graph
    iou = (iou_map * pos).sum() / n
    angle = (angle_map * pos).sum() / n
    return {"loss": cls + iou + ANGLE_WEIGHT * angle, "cls": cls, "iou": iou, "angle": angle}


LOSS_KEYS = ("loss", "cls", "iou", "angle")
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}  # --amp -> autocast dtype


# ---------------------------------------------------------------- input on the device

@functools.lru_cache
def constants(device: torch.device) -> dict[str, torch.Tensor]:
    """Colour constants, copied to the device once: a host-to-device copy per step would stall the stream."""
    yiq = torch.tensor(RGB_TO_YIQ, dtype=torch.float64)
    c = {"mean": torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), "std": torch.tensor(IMAGENET_STD).view(1, 3, 1, 1),
         "luma": torch.tensor(LUMA).view(1, 3, 1, 1), "yiq": yiq.float(), "rgb": torch.linalg.inv(yiq).float()}
    return {k: v.to(device) for k, v in c.items()}


def prepare_images(image: torch.Tensor, jitter: float) -> torch.Tensor:
    """uint8 (B,3,S,S) -> jittered (when jitter > 0), ImageNet-normalised float32, channels_last."""
    x = image.float().div_(255)
    if jitter > 0:
        x = color_jitter(x, jitter)
    c = constants(x.device)
    return ((x - c["mean"]) / c["std"]).contiguous(memory_format=torch.channels_last)


def grey(x: torch.Tensor) -> torch.Tensor:
    return (x * constants(x.device)["luma"]).sum(1, keepdim=True)


def color_jitter(x: torch.Tensor, s: float) -> torch.Tensor:
    """Per-sample brightness, contrast, saturation in U[1-s, 1+s] and hue in U[-s/2, s/2] turns,
    the baseline's ColorJitter(0.5, 0.5, 0.5, 0.25) at s = 0.5. x: float (B,3,H,W) in [0,1]."""
    def factor():
        return (1 + (torch.rand(x.shape[0], 1, 1, 1, device=x.device) * 2 - 1) * s).clamp(min=0)

    x = (x * factor()).clamp(0, 1)
    m = grey(x).mean((2, 3), keepdim=True)
    x = ((x - m) * factor() + m).clamp(0, 1)
    g = grey(x)
    x = ((x - g) * factor() + g).clamp(0, 1)
    return hue_rotate(x, (torch.rand(x.shape[0], device=x.device) * 2 - 1) * (s / 2) * 2 * math.pi)


def hue_rotate(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate the chroma plane of YIQ by `angle` (rad, per sample): one 3x3 matrix per image, close to an
    HSV hue shift without the per-pixel branches of an HSV round trip."""
    k = constants(x.device)
    c, s = torch.cos(angle), torch.sin(angle)
    rot = torch.zeros(x.shape[0], 3, 3, device=x.device)
    rot[:, 0, 0] = 1
    rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = c, -s, s, c
    m = k["rgb"] @ rot @ k["yiq"]
    return torch.einsum("bij,bjhw->bihw", m, x).clamp(0, 1)


# ---------------------------------------------------------------- data

class EpochSampler(Sampler):
    """Yields (epoch, index). Persistent DataLoader workers keep their own copy of the dataset, so
    `ds.set_epoch` in the main process would never reach them and the cached variants would not rotate."""

    def __init__(self, base: Sampler):
        self.base, self.epoch = base, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.base.set_epoch(epoch)

    def __iter__(self):
        epoch = self.epoch
        return ((epoch, i) for i in self.base)

    def __len__(self) -> int:
        return len(self.base)


class EpochDataset(Dataset):
    """Sets the wrapped dataset's epoch from the (epoch, index) keys of EpochSampler, in whichever process reads."""

    def __init__(self, ds: CacheDataset):
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, key):
        self.ds.set_epoch(key[0])
        return self.ds[key[1]]

    def __getitems__(self, keys):
        self.ds.set_epoch(keys[0][0])
        return self.ds.__getitems__([i for _, i in keys])


def make_loader(ds: CacheDataset, args, device: torch.device, rank: int, world: int, train: bool) -> DataLoader:
    # seeded by (seed, epoch) and split over the ranks: one code path, reproducible resumes
    sampler = EpochSampler(make_sampler(ds, args.batch_size, train, args.seed, rank, world))
    cuda, workers = device.type == "cuda", args.workers
    # Without worker processes, collate copies each batch once, straight into pinned memory (on CUDA), in the
    # thread of batches(); worker processes hand over shared memory, which DataLoader then copies to pinned.
    return DataLoader(EpochDataset(ds), batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=functools.partial(collate, pin=cuda and workers == 0), pin_memory=cuda and workers > 0,
                      persistent_workers=cuda and workers > 0, drop_last=train and len(sampler) >= args.batch_size)


def open_cache(path: Path, rebuild: bool, rank: int, world: int) -> CacheDataset:
    """Open a cache; with `rebuild`, rank 0 first brings a stale one up to date while the others wait.
    Without it a stale cache raises StaleCacheError, whose message says what to run."""
    if rebuild and rank == 0:
        changes = check_stale(Manifest.load(path))
        if changes.stale:
            from preprocess.store.build import rebuild as rebuild_cache
            print(f"{path}: {changes.describe()}; updating the cache (--rebuild)", flush=True)
            rebuild_cache(path, quiet=True)
    if rebuild and world > 1:
        dist.barrier()
    return CacheDataset(path)


# ---------------------------------------------------------------- training state

@dataclass
class Ctx:
    device: torch.device
    amp: torch.dtype | None          # autocast dtype; None: float32
    scaler: torch.amp.GradScaler      # enabled for fp16 only
    fused: bool                       # fused Adam skips a step on the device when found_inf is set: no host sync
    args: argparse.Namespace
    rank: int = 0
    world: int = 1
    step: int = 0                     # optimiser steps so far, over all epochs and resumes
    bad_run: torch.Tensor | None = None    # non-finite steps in a row (device scalar)
    bad_total: torch.Tensor | None = None
    deadline: float | None = None     # perf_counter time of --time-limit
    stopped: bool = False             # --max-steps or --time-limit reached
    log: object = None                # JSONL writer on rank 0, None elsewhere
    on_step: object = None            # profiler hook

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None)


class NonFiniteLoss(RuntimeError):
    """Too many non-finite steps in a row: training has diverged."""


class UsageError(ValueError):
    """Flags that cannot work together on this machine."""


def forward_loss(model, batch: dict, ctx: Ctx, jitter: float) -> dict[str, torch.Tensor]:
    batch = {k: v.to(ctx.device, non_blocking=True) for k, v in batch.items()}
    x = prepare_images(batch["image"], jitter)
    with ctx.autocast():
        score, geo = model(x)
    return east_loss(score, geo, batch["score"], batch["geo"], batch["roi"])  # outside autocast: float32


def optimizer_step(model, optimizer, ctx: Ctx, loss: torch.Tensor) -> torch.Tensor:
    """Step unless the loss or a gradient is not finite; returns the skip flag (device bool), no host sync."""
    bad = ~torch.isfinite(loss)
    if ctx.world > 1:  # every rank must skip together
        flag = bad.float()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        bad = flag > 0
    params = [p for p in model.parameters() if p.grad is not None]
    if ctx.scaler.is_enabled():
        params[0].grad.add_(torch.where(bad, math.nan, 0.0))  # a NaN grad makes the scaler skip this step
        if ctx.args.clip_grad:
            ctx.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, ctx.args.clip_grad)
        ctx.scaler.step(optimizer)
        ctx.scaler.update()
    else:
        norm = (nn.utils.clip_grad_norm_(params, ctx.args.clip_grad) if ctx.args.clip_grad
                else nn.utils.get_total_norm([p.grad for p in params]))
        bad = bad | ~torch.isfinite(norm)
        if ctx.fused:
            optimizer.found_inf = bad.float()  # the protocol GradScaler uses with fused optimisers
            optimizer.step()
            del optimizer.found_inf
        elif not bad.item():
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return bad


def train_one_epoch(model, loader, optimizer, ctx: Ctx, epoch: int) -> dict:
    model.train()
    args, accum = ctx.args, ctx.args.accum_steps
    n_micro = len(loader) // accum * accum  # a trailing partial accumulation is not stepped
    total = torch.zeros(len(LOSS_KEYS) + 1, device=ctx.device)   # loss sums over good steps, good steps
    window = torch.zeros_like(total)
    acc = torch.zeros(len(LOSS_KEYS), device=ctx.device)
    wait, steps, t0 = 0.0, 0, time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    bar = tqdm(total=n_micro // accum, desc=f"epoch {epoch}", disable=ctx.rank != 0, leave=False, dynamic_ncols=True)
    it = batches(loader)
    for i in range(n_micro):
        t = time.perf_counter()
        batch = next(it)
        wait += time.perf_counter() - t
        last = (i + 1) % accum == 0
        sync = nullcontext() if last or ctx.world == 1 else model.no_sync()
        with sync:
            parts = forward_loss(model, batch, ctx, args.jitter)
            ctx.scaler.scale(parts["loss"] / accum).backward()
        acc += torch.stack([parts[k].detach() for k in LOSS_KEYS]) / accum
        if not last:
            continue
        bad = optimizer_step(model, optimizer, ctx, acc[0])
        count_step(ctx, bad, acc, (total, window))
        steps += 1
        bar.update()
        if ctx.on_step:
            ctx.on_step()
        if ctx.step % args.log_every == 0:
            log_window(window, ctx, epoch, optimizer, bar)
        if should_stop(ctx):
            ctx.stopped = True
            break
    bar.close()
    if hasattr(it, "close"):
        it.close()  # a prefetch thread left mid-epoch stops now, not when the generator is collected
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)  # the epoch's time must include the queued GPU work
    seconds = time.perf_counter() - t0
    check_bad_steps(ctx)
    stats = mean_losses(total, ctx)
    n_samples = steps * accum * args.batch_size * ctx.world
    return {**stats, "steps": steps, "samples_per_s": n_samples / seconds, "data_wait": wait / seconds,
            "seconds": seconds}


def count_step(ctx: Ctx, bad: torch.Tensor, acc: torch.Tensor, sums: tuple) -> None:
    """Add a step's losses to the running sums unless it was skipped; all on the device."""
    good = torch.cat((torch.where(bad, 0.0, acc), (~bad).float()[None]))
    for s in sums:
        s += good
    ctx.bad_run = (ctx.bad_run + 1) * bad
    ctx.bad_total += bad
    acc.zero_()
    ctx.step += 1


def should_stop(ctx: Ctx) -> bool:
    """--max-steps or --time-limit reached. Under DDP the clock is read at log intervals only and agreed on
    by all ranks, so that no rank leaves while the others wait in a collective."""
    if ctx.args.max_steps and ctx.step >= ctx.args.max_steps:
        return True
    if ctx.deadline is None:
        return False
    late = time.perf_counter() >= ctx.deadline
    if ctx.world == 1:
        return late
    if ctx.step % ctx.args.log_every:
        return False
    flag = torch.tensor(float(late), device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag)


def mean_losses(sums: torch.Tensor, ctx: Ctx) -> dict:
    """(loss sums..., count) on the device -> means, reduced over ranks; one host sync."""
    if ctx.world > 1:
        dist.all_reduce(sums)
    return means(sums.tolist())


def means(v: list[float]) -> dict:
    """[loss sums..., count] -> {key: mean}; NaN when every step was skipped."""
    return {k: (v[j] / v[-1] if v[-1] else math.nan) for j, k in enumerate(LOSS_KEYS)}


def log_window(window: torch.Tensor, ctx: Ctx, epoch: int, optimizer, bar) -> None:
    """The only per-interval host sync: mean losses of the last --log-every steps, and the bad-step check."""
    m = means(window.tolist())
    window.zero_()
    check_bad_steps(ctx)
    if ctx.rank != 0:
        return
    bar.set_postfix(loss=f"{m['loss']:.4f}", bad=int(ctx.bad_total))
    ctx.log({"event": "step", "epoch": epoch, "step": ctx.step, "lr": optimizer.param_groups[0]["lr"], **m,
             "bad_steps": int(ctx.bad_total)})


def check_bad_steps(ctx: Ctx) -> None:
    run = int(ctx.bad_run)
    if run >= ctx.args.max_bad_steps:
        raise NonFiniteLoss(f"the loss or the gradients were not finite for {run} optimiser steps in a row "
                            f"(step {ctx.step}); try a lower --lr, --clip-grad 10, or --amp bf16 / off")


@torch.no_grad()
def evaluate(model, loader, ctx: Ctx) -> dict:
    model.eval()
    sums = torch.zeros(len(LOSS_KEYS) + 1, device=ctx.device)
    for batch in batches(loader):
        parts = forward_loss(model, batch, ctx, jitter=0.0)
        n = parts["loss"].new_full((1,), batch["image"].shape[0])
        sums += torch.cat((torch.stack([parts[k] for k in LOSS_KEYS]) * n, n))
    return {f"val_{k}": v for k, v in mean_losses(sums, ctx).items()}


# ---------------------------------------------------------------- detection metrics

@torch.no_grad()
def detect(model: EAST, image: torch.Tensor, map_scale: float, ctx: Ctx) -> list[np.ndarray]:
    """Quads (K, 4, 2) in input px for each uint8 image of a batch (B, 3, H, W): one forward on the device,
    one copy of the maps to the host, decoding on the CPU."""
    x = prepare_images(image.to(ctx.device, non_blocking=True), 0.0)
    with ctx.autocast():
        score, geo = model(x)
    score, geo = score.float().cpu().numpy(), geo.float().cpu().numpy()
    return [decode_maps(s, g, map_scale)[0] for s, g in zip(score, geo)]


def detection_metrics(model: EAST, ds: CacheDataset, ctx: Ctx) -> dict:
    """DetEval precision, recall and hmean of the decoded predictions against the words stored in ds, and the
    number of detections it counted (not on a don't-care word; 0 while no score passes decode's threshold).

    Reads epoch 0's variants, the samples of the validation loss, so that epochs compare. Takes the bare
    model, not DDP's wrapper: each rank runs its own share of the images (every world-th, no padding), so the
    ranks' forward counts differ; their DetEval counts are summed at the end.
    """
    model.eval()
    ds.set_epoch(0)
    mine = range(ctx.rank, len(ds), ctx.world)
    counts = np.zeros(4)  # care gts, kept detections, recall credits, precision credits
    t0 = time.perf_counter()
    for start in range(0, len(mine), ctx.args.batch_size):
        idx = list(mine[start:start + ctx.args.batch_size])
        dets = detect(model, collate(ds.__getitems__(idx))["image"], ds.config.map_scale, ctx)
        for i, det in zip(idx, dets):
            counts += evaluate_image(*gt_quads(*ds.quads(i)), det)[:4]
    if ctx.world > 1:
        total = torch.tensor(counts, device=ctx.device)
        dist.all_reduce(total)
        counts = total.cpu().numpy()
    n_gt, n_det, recall_sum, precision_sum = counts.tolist()
    precision, recall, hmean = ratios(recall_sum, precision_sum, round(n_gt), round(n_det))
    return {"precision": precision, "recall": recall, "hmean": hmean, "detections": round(n_det),
            "eval_seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- checkpoints

def save_atomic(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(state: dict, path: Path) -> None:
    """path (e.g. OUT/epoch_N.pt), then latest.pt beside it as a hard link to it (no second write), both atomic."""
    out = path.parent
    save_atomic(state, path)
    tmp = out / "latest.pt.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # file systems without hard links
        shutil.copyfile(path, tmp)
    os.replace(tmp, out / "latest.pt")


def checkpoint_state(model, optimizer, scheduler, ctx: Ctx, epoch: int, ds: CacheDataset) -> dict:
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(ctx.args).items()}
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": ctx.scaler.state_dict(),
            "scheduler": scheduler.state_dict(), "epoch": epoch, "step": ctx.step, "args": args,
            "fingerprint": ds.fingerprint, "config": ds.config.to_dict()}


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by train.py, or a UsageError that names the file and says what to pass."""
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint; pass a file that train.py wrote, e.g. runs/east/latest.pt")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, not a torch file, foreign pickle: all unreadable alike
        raise UsageError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {str(e)[:200]}); "
                         f"pass a file that train.py wrote, e.g. runs/east/latest.pt") from None
    if not isinstance(ck, dict) or not {"model", "config", "epoch"} <= ck.keys():
        raise UsageError(f"{path}: not a train.py checkpoint (no model, config and epoch entries); a torchvision "
                         f"backbone goes to --backbone-weights")
    return ck


def inference_model(ck: dict, path: Path, device: torch.device) -> EAST:
    """The checkpoint's model in eval mode, its head at the map scale of the cache it was trained on."""
    model = EAST(ck["config"]["map_scale"])
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise UsageError(f"{path}: its weights do not fit this EAST model ({str(e)[:300]}); was it written by "
                         f"another version of train.py?") from None
    return model.to(device, memory_format=torch.channels_last).eval()


def check_fits_cache(ck: dict, path: Path, ds: CacheDataset) -> None:
    """A model predicts maps at the scale it was trained for: a cache at another scale (or crop size, as
    check_caches demands of a validation cache) would be scored against targets it never learnt."""
    want = (ck["config"]["input_size"], ck["config"]["map_scale"])
    have = (ds.config.input_size, ds.config.map_scale)
    if want != have:
        raise UsageError(f"{path} was trained on {want[0]}px crops with maps at x{want[1]} but {ds.cache_dir} holds "
                         f"{have[0]}px at x{have[1]}; evaluate on a cache built with `python -m preprocess build "
                         f"--input-size {want[0]} --map-scale {want[1]}`")


def resume(path: Path, model, optimizer, scheduler, ctx: Ctx, ds: CacheDataset) -> int:
    """Restore everything from a checkpoint; returns the number of epochs already done."""
    ck = load_checkpoint(path)
    if ck["config"]["map_scale"] != ds.config.map_scale:
        raise UsageError(f"{path} has a head for map_scale {ck['config']['map_scale']}, {ds.cache_dir} has "
                         f"{ds.config.map_scale}; resume on a cache built with the same --map-scale")
    if ck["fingerprint"] != ds.fingerprint and ctx.rank == 0:
        warnings.warn(f"{path} was trained on a cache with another build fingerprint ({ck['fingerprint']}) than "
                      f"{ds.cache_dir} ({ds.fingerprint}): the config or the target code changed", stacklevel=2)
    model.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck["optimizer"])
    scheduler.load_state_dict(ck["scheduler"])
    if ctx.scaler.is_enabled() and ck["scaler"]:
        ctx.scaler.load_state_dict(ck["scaler"])
    elif ctx.scaler.is_enabled() and ctx.rank == 0:  # trained without GradScaler: --amp bf16 / off, or the CPU
        warnings.warn(f"{path} has no GradScaler state (trained without --amp fp16); starting from a fresh loss "
                      f"scale", stacklevel=2)
    ctx.step = ck["step"]
    return ck["epoch"]


# ---------------------------------------------------------------- ONNX export

def export_onnx(args) -> None:
    """--export-onnx: the checkpoint's model as ONNX (batch, height, width dynamic), run once in onnxruntime
    against PyTorch on another shape than the traced one.

    It uses the TorchScript exporter (dynamo=False), deprecated since torch 2.9: on this plain conv net it gives
    the same outputs as the torch.export one in a tenth of the time (2 s against 20 s on 2 CPU cores), without
    symbolic-shape constraints for "a multiple of 32", and needs no onnxscript.
    """
    missing = [m for m in EXPORT_MODULES if not importable(m)]
    if missing:
        raise UsageError(f"--export-onnx needs {' and '.join(missing)}: pip install -e \".[export]\"")
    ck = load_checkpoint(args.checkpoint)
    model = inference_model(ck, args.checkpoint, torch.device("cpu"))
    maps = {0: "batch", 2: "map_height", 3: "map_width"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the exporter's own, see the docstring
        torch.onnx.export(model, (torch.zeros(ONNX_TRACE_SHAPE),), str(args.export_onnx), dynamo=False,
                          opset_version=ONNX_OPSET, input_names=["image"], output_names=["score", "geo"],
                          dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}, "score": maps, "geo": maps})
    diff = onnx_max_diff(args.export_onnx, model, torch.randn(ONNX_CHECK_SHAPE))
    print(f"wrote {args.export_onnx} ({args.checkpoint}, epoch {ck['epoch']}, maps at x{ck['config']['map_scale']}): "
          f"input 'image' (B, 3, H, W) float32 ImageNet-normalised RGB, H and W multiples of 32; outputs 'score' "
          f"and 'geo'. onnxruntime matches PyTorch within {diff:.1e} at {ONNX_CHECK_SHAPE}", flush=True)


def importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def onnx_max_diff(path: Path, model: EAST, x: torch.Tensor) -> float:
    """Largest absolute difference between onnxruntime's outputs for x and the model's (score, geo)."""
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model(x)
    out = session.run(None, {"image": x.numpy()})
    return max(float(np.abs(o - r.numpy()).max()) for o, r in zip(out, ref))


# ---------------------------------------------------------------- setup

def setup_device(args) -> tuple[torch.device, int, int]:
    """Device, rank and world size; joins the process group when torchrun started several processes."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device; pass cuda, cuda:N or cpu") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: no CUDA device here; pass --device cpu, or leave --device out")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}; pass one of them")
    if device.type == "cuda":
        device = torch.device("cuda", local if world > 1 else (device.index or 0))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # fixed input size: let cuDNN pick the fastest kernels once
    if world > 1:
        # device_id binds the process's GPU to the group, so that NCCL collectives, barrier() included, use it
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world,
                                device_id=device if device.type == "cuda" else None)
    return device, rank, world


def resolve_amp(args, device: torch.device) -> None:
    """--amp defaults to fp16 on CUDA, off elsewhere."""
    if args.amp is None:
        args.amp = "fp16" if device.type == "cuda" else "off"
    if args.amp == "fp16" and device.type != "cuda":
        raise UsageError("--amp fp16 needs CUDA (GradScaler); use --amp bf16 or --amp off on this device")


def resolve_defaults(args, device: torch.device, say) -> None:
    """Defaults that depend on the device or on other flags: AMP mode, a short run on a machine without a
    GPU, detection metrics every epoch when there is a validation cache."""
    resolve_amp(args, device)
    if args.epochs is None and args.max_steps is None and device.type != "cuda":
        args.epochs, args.max_steps = 1, CPU_BUDGET_STEPS
        args.time_limit = args.time_limit or CPU_BUDGET_SECONDS
        args.batch_size = args.batch_size or CPU_BUDGET_BATCH
        say(f"no GPU: a check run of 1 epoch, at most {args.max_steps} steps of batch {args.batch_size} or "
            f"{args.time_limit:.0f} s (pass --epochs or --max-steps to train for real)")
    args.epochs = args.epochs or 50
    args.batch_size = args.batch_size or BATCH_SIZE
    if args.eval_every is None:
        args.eval_every = 1 if args.val_cache else 0


def make_model(args, cfg, device: torch.device) -> EAST:
    model = EAST(cfg.map_scale)
    if args.backbone_weights:
        load_backbone(model, args.backbone_weights)
    return model.to(device, memory_format=torch.channels_last)


def jsonl_writer(path: Path):
    def write(record: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    return write


def profiler(args, out: Path, device: torch.device, say):
    """--profile N: record N steps after one warm-up step, write a Chrome trace and print the top ops.
    CUDA activity only when the run is on CUDA: a --device cpu run on a GPU machine has no kernels to trace."""
    from torch.profiler import ProfilerActivity, profile, schedule
    cuda = device.type == "cuda"
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"

    def ready(p) -> None:
        p.export_chrome_trace(str(out / "profile_trace.json"))
        say(p.key_averages().table(sort_by=sort, row_limit=15))
        say(f"trace: {out / 'profile_trace.json'}")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=args.profile, repeat=1),
                   on_trace_ready=ready)


# ---------------------------------------------------------------- main

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
                           "(preprocess.decode.decode_maps turns them into quads). Needs pip install -e \".[export]\"")
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


def main(args) -> None:
    check_flags(args)
    if args.export_onnx:
        export_onnx(args)
        return
    device, rank, world = setup_device(args)
    try:
        (evaluate_checkpoint if args.eval_only else train)(args, device, rank, world)
        if world > 1:
            # Leave together: rank 0 may still be writing its checkpoint, and a rank that tears its end of the
            # group down while a peer is still connected can abort at exit (a 2-process gloo run did, once).
            dist.barrier()
    finally:
        if world > 1:
            dist.destroy_process_group()


def train(args, device: torch.device, rank: int, world: int) -> None:
    say = (lambda msg: print(msg, flush=True)) if rank == 0 else (lambda msg: None)
    resolve_defaults(args, device, say)
    torch.manual_seed(args.seed + rank)  # DDP broadcasts rank 0's initial weights; the jitter differs per rank
    ds = open_cache(args.cache, args.rebuild, rank, world)
    val = open_cache(args.val_cache, args.rebuild, rank, world) if args.val_cache else None
    check_caches(ds, val, args)
    cfg = ds.config
    say(f"cache {args.cache}: {len(ds)} images, input {cfg.input_size}px, maps at x{cfg.map_scale}, "
        f"{cfg.variants} variant(s); device {device}, amp {args.amp}, world {world}")
    model = make_model(args, cfg, device)
    fused = device.type in ("cuda", "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, fused=fused)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [max(1, args.epochs // 2)], gamma=0.1)
    amp = AMP_DTYPES[args.amp]
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")
    ctx = Ctx(device, amp, scaler, fused, args, rank, world, bad_run=torch.zeros((), device=device),
              bad_total=torch.zeros((), device=device))
    start = resume(args.resume, model, optimizer, scheduler, ctx, ds) if args.resume else 0
    if args.resume:
        say(f"resumed from {args.resume}: {start} epoch(s), {ctx.step} step(s) done")
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    net = torch.compile(net) if args.compile else net
    loaders = (make_loader(ds, args, device, rank, world, True),
               make_loader(val, args, device, rank, world, False) if val is not None else None)
    if len(loaders[0]) < args.accum_steps:
        raise UsageError(f"{args.cache}: {len(ds)} images make {len(loaders[0])} batches per process, fewer than "
                         f"--accum-steps {args.accum_steps}; lower --batch-size or --accum-steps")
    args.out.mkdir(parents=True, exist_ok=True)
    ctx.log = jsonl_writer(args.out / "log.jsonl") if rank == 0 else None
    ctx.deadline = time.perf_counter() + args.time_limit if args.time_limit else None
    run_epochs(net, model, loaders, optimizer, scheduler, ctx, ds, start, say)


def evaluate_checkpoint(args, device: torch.device, rank: int, world: int) -> None:
    """--eval-only: detection metrics of --checkpoint on --val-cache, or --cache when there is none."""
    resolve_amp(args, device)
    args.batch_size = args.batch_size or BATCH_SIZE
    ck = load_checkpoint(args.checkpoint)
    cache = args.val_cache or args.cache
    ds = open_cache(cache, args.rebuild, rank, world)
    check_fits_cache(ck, args.checkpoint, ds)
    model = inference_model(ck, args.checkpoint, device)
    ctx = Ctx(device, AMP_DTYPES[args.amp], torch.amp.GradScaler(device.type, enabled=False), False, args, rank, world)
    metrics = detection_metrics(model, ds, ctx)
    if rank != 0:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "eval.jsonl"
    jsonl_writer(log)({"event": "eval", "checkpoint": str(args.checkpoint), "epoch": ck["epoch"], "cache": str(cache),
                       "images": len(ds), **metrics})
    print(f"{args.checkpoint} (epoch {ck['epoch']}) on {cache}, {len(ds)} images: "
          f"precision {metrics['precision']:.4f}, recall {metrics['recall']:.4f}, hmean {metrics['hmean']:.4f}; "
          f"appended to {log}", flush=True)


def check_caches(ds: CacheDataset, val: CacheDataset | None, args) -> None:
    if val is not None and (val.config.input_size, val.config.map_scale) != (ds.config.input_size, ds.config.map_scale):
        raise CacheError(f"{args.val_cache} has input {val.config.input_size}px at x{val.config.map_scale} but "
                         f"{args.cache} has {ds.config.input_size}px at x{ds.config.map_scale}; build both alike")


def run_epochs(net, model, loaders, optimizer, scheduler, ctx: Ctx, ds, start: int, say) -> None:
    args = ctx.args
    prof = profiler(args, args.out, ctx.device, say) if args.profile and ctx.rank == 0 else nullcontext()
    if args.profile:
        args.max_steps = ctx.step + args.profile + 1  # + the warm-up step
    with prof:
        ctx.on_step = prof.step if args.profile and ctx.rank == 0 else None
        for epoch in range(start, args.epochs):
            if ctx.stopped or (args.max_steps and ctx.step >= args.max_steps):
                break
            loaders[0].sampler.set_epoch(epoch)
            stats = train_one_epoch(net, loaders[0], optimizer, ctx, epoch)
            lr = optimizer.param_groups[0]["lr"]
            # An epoch cut short by --max-steps / --time-limit is not done: its checkpoint counts it out and the
            # lr schedule stays put, so that --resume runs it again whole rather than skipping its other batches.
            whole = stats["steps"] == len(loaders[0]) // args.accum_steps
            if whole:
                scheduler.step()
            if loaders[1] is not None:
                stats.update(evaluate(net, loaders[1], ctx))
            if args.eval_every and ((epoch + 1) % args.eval_every == 0 or last_epoch(epoch, ctx)):
                stats.update(detection_metrics(model, loaders[1].dataset.ds, ctx))
            end_epoch(stats, epoch, whole, lr, model, optimizer, scheduler, ctx, ds, say)
    say(f"done: {ctx.step} steps, {int(ctx.bad_total)} skipped as non-finite; outputs in {args.out}")


def end_epoch(stats: dict, epoch: int, whole: bool, lr: float, model, optimizer, scheduler, ctx: Ctx, ds,
              say) -> None:
    """Log the epoch and write checkpoints (rank 0 only). A cut epoch (not whole) is saved as
    epoch_N_step_S.pt with N epochs done, beside epoch_N.pt rather than over it."""
    if ctx.rank != 0:
        return
    args, done = ctx.args, epoch + whole
    record = {"event": "epoch", "epoch": epoch, "step": ctx.step, "lr": lr, **stats, "bad_steps": int(ctx.bad_total)}
    ctx.log(record)
    val = f", val loss {stats['val_loss']:.4f}" if "val_loss" in stats else ""
    if "hmean" in stats:
        val += f", precision {stats['precision']:.4f}, recall {stats['recall']:.4f}, hmean {stats['hmean']:.4f}"
    say(f"epoch {epoch}: loss {stats['loss']:.4f} (dice {stats['cls']:.4f}, iou {stats['iou']:.4f}, "
        f"angle {stats['angle']:.4f}){val}; {stats['samples_per_s']:.3g} samples/s, "
        f"{100 * stats['data_wait']:.0f}% of the time waiting for data")
    if not args.profile and ((whole and done % args.save_every == 0) or last_epoch(epoch, ctx)):
        name = f"epoch_{done}.pt" if whole else f"epoch_{done}_step_{ctx.step}.pt"
        save_checkpoint(checkpoint_state(model, optimizer, scheduler, ctx, done, ds), args.out / name)


def last_epoch(epoch: int, ctx: Ctx) -> bool:
    """Whether epoch (0-based) ends the run: the last of --epochs, or cut short by --max-steps / --time-limit."""
    return epoch + 1 >= ctx.args.epochs or ctx.stopped


def cli(argv: list[str] | None = None) -> int:
    """main() for the command line: the errors whose messages say what to do print as one line, no traceback.
    Returns the exit status: 2 for bad flags, caches or data (also from --rebuild), 1 when training diverged."""
    try:
        main(get_args_parser().parse_args(argv))
    except (CacheError, UsageError, DataError, BuildError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NonFiniteLoss as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
