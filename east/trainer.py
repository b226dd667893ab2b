"""The run itself, wired from its parts: caches -> model, optimiser, schedule -> epochs of the engine, each
logged and checkpointed; and --eval-only, the detection metrics of one checkpoint."""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from dataset import CacheDataset
from east.checkpoint import (
    check_fits_cache,
    checkpoint_state,
    inference_model,
    load_checkpoint,
    resume,
    save_checkpoint,
)
from east.config import TrainConfig
from east.data import check_caches, make_loader, open_cache
from east.engine import Context, evaluate, new_context, train_one_epoch
from east.metrics import detection_metrics
from east.model import EAST, load_backbone
from east.runtime import Runtime, jsonl_writer, profiler
from preprocess.errors import UsageError


def train(cfg: TrainConfig, rt: Runtime) -> None:
    if cfg.check_run:
        rt.say(f"no GPU: a check run of 1 epoch, at most {cfg.max_steps} steps of batch {cfg.batch_size} or "
               f"{cfg.time_limit:.0f} s (pass --epochs or --max-steps to train for real)")
    torch.manual_seed(cfg.seed + rt.rank)  # DDP broadcasts rank 0's initial weights; the jitter differs per rank
    ds = open_cache(cfg.cache, cfg.rebuild, rt)
    val = open_cache(cfg.val_cache, cfg.rebuild, rt) if cfg.val_cache else None
    check_caches(ds, val)
    c = ds.config
    rt.say(f"cache {cfg.cache}: {len(ds)} images, input {c.input_size}px, maps at x{c.map_scale}, "
           f"{c.variants} variant(s); device {rt.device}, amp {cfg.amp}, world {rt.world}")
    model = make_model(cfg, c.map_scale, rt.device)
    ctx = new_context(cfg, rt)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=ctx.fused)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [max(1, cfg.epochs // 2)], gamma=0.1)
    start = resume(cfg.resume, model, optimizer, scheduler, ctx, ds) if cfg.resume else 0
    if cfg.resume:
        rt.say(f"resumed from {cfg.resume}: {start} epoch(s), {ctx.state.step} step(s) done")
    net = torch.nn.parallel.DistributedDataParallel(model) if rt.world > 1 else model
    net = torch.compile(net) if cfg.compile else net
    loaders = (make_loader(ds, cfg, rt, True), make_loader(val, cfg, rt, False) if val is not None else None)
    if len(loaders[0]) < cfg.accum_steps:
        raise UsageError(f"{cfg.cache}: {len(ds)} images make {len(loaders[0])} batches per process, fewer than "
                         f"--accum-steps {cfg.accum_steps}; lower --batch-size or --accum-steps")
    cfg.out.mkdir(parents=True, exist_ok=True)
    ctx.log = jsonl_writer(cfg.out / "log.jsonl") if rt.rank == 0 else None
    # --profile N stops after its N steps and the warm-up step, counted from where this run starts
    ctx.state.step_limit = ctx.state.step + cfg.profile + 1 if cfg.profile else cfg.max_steps
    ctx.state.deadline = time.perf_counter() + cfg.time_limit if cfg.time_limit else None
    run_epochs(net, model, loaders, optimizer, scheduler, ctx, ds, start)


def make_model(cfg: TrainConfig, map_scale: float, device: torch.device) -> EAST:
    model = EAST(map_scale)
    if cfg.backbone_weights:
        load_backbone(model, cfg.backbone_weights)
    return model.to(device, memory_format=torch.channels_last)


def run_epochs(net, model, loaders, optimizer, scheduler, ctx: Context, ds: CacheDataset, start: int) -> None:
    cfg, rt, state = ctx.cfg, ctx.rt, ctx.state
    profiling = bool(cfg.profile) and rt.rank == 0
    prof = profiler(cfg.profile, cfg.out, rt.device, rt.say) if profiling else nullcontext()
    with prof:
        ctx.on_step = prof.step if profiling else None
        for epoch in range(start, cfg.epochs):
            if state.stopped or (state.step_limit is not None and state.step >= state.step_limit):
                break
            loaders[0].sampler.set_epoch(epoch)
            stats = train_one_epoch(net, loaders[0], optimizer, ctx, epoch)
            lr = optimizer.param_groups[0]["lr"]
            # An epoch cut short by --max-steps / --time-limit is not done: its checkpoint counts it out and the
            # lr schedule stays put, so that --resume runs it again whole rather than skipping its other batches.
            whole = stats["steps"] == len(loaders[0]) // cfg.accum_steps
            if whole:
                scheduler.step()
            if loaders[1] is not None:
                stats.update(evaluate(net, loaders[1], ctx))
            if cfg.eval_every and ((epoch + 1) % cfg.eval_every == 0 or last_epoch(epoch, ctx)):
                stats.update(detection_metrics(model, loaders[1].dataset.ds, ctx))
            end_epoch(stats, epoch, whole, lr, model, optimizer, scheduler, ctx, ds)
    rt.say(f"done: {state.step} steps, {int(state.bad_total)} skipped as non-finite; outputs in {cfg.out}")


def end_epoch(stats: dict, epoch: int, whole: bool, lr: float, model, optimizer, scheduler, ctx: Context,
              ds: CacheDataset) -> None:
    """Log the epoch and write checkpoints (rank 0 only). A cut epoch (not whole) is saved as
    epoch_N_step_S.pt with N epochs done, beside epoch_N.pt rather than over it."""
    if ctx.rt.rank != 0:
        return
    cfg, done, step = ctx.cfg, epoch + whole, ctx.state.step
    ctx.log({"event": "epoch", "epoch": epoch, "step": step, "lr": lr, **stats,
             "bad_steps": int(ctx.state.bad_total)})
    val = f", val loss {stats['val_loss']:.4f}" if "val_loss" in stats else ""
    if "hmean" in stats:
        val += f", precision {stats['precision']:.4f}, recall {stats['recall']:.4f}, hmean {stats['hmean']:.4f}"
    ctx.rt.say(f"epoch {epoch}: loss {stats['loss']:.4f} (dice {stats['cls']:.4f}, iou {stats['iou']:.4f}, "
               f"angle {stats['angle']:.4f}){val}; {stats['samples_per_s']:.3g} samples/s, "
               f"{100 * stats['data_wait']:.0f}% of the time waiting for data")
    if not cfg.profile and ((whole and done % cfg.save_every == 0) or last_epoch(epoch, ctx)):
        name = f"epoch_{done}.pt" if whole else f"epoch_{done}_step_{step}.pt"
        save_checkpoint(checkpoint_state(model, optimizer, scheduler, ctx, done, ds), cfg.out / name)


def last_epoch(epoch: int, ctx: Context) -> bool:
    """Whether epoch (0-based) ends the run: the last of --epochs, or cut short by --max-steps / --time-limit."""
    return epoch + 1 >= ctx.cfg.epochs or ctx.state.stopped


def evaluate_checkpoint(cfg: TrainConfig, rt: Runtime, checkpoint) -> None:
    """--eval-only: detection metrics of the checkpoint on --val-cache, or --cache when there is none; printed
    and appended to OUT/eval.jsonl."""
    ck = load_checkpoint(checkpoint)
    cache = cfg.val_cache or cfg.cache
    ds = open_cache(cache, cfg.rebuild, rt)
    check_fits_cache(ck, checkpoint, ds)
    model = inference_model(ck, checkpoint, rt.device)
    metrics = detection_metrics(model, ds, new_context(cfg, rt))
    if rt.rank != 0:
        return
    cfg.out.mkdir(parents=True, exist_ok=True)
    log = cfg.out / "eval.jsonl"
    jsonl_writer(log)({"event": "eval", "checkpoint": str(checkpoint), "epoch": ck["epoch"], "cache": str(cache),
                       "images": len(ds), **metrics})
    print(f"{checkpoint} (epoch {ck['epoch']}) on {cache}, {len(ds)} images: "
          f"precision {metrics['precision']:.4f}, recall {metrics['recall']:.4f}, hmean {metrics['hmean']:.4f}; "
          f"appended to {log}", flush=True)
