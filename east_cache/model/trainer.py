"""The run itself, wired from its parts: caches -> model, optimiser, schedule -> epochs of the engine, each
logged and checkpointed, stopping cleanly on Ctrl-C; and --eval-only, the detection metrics of one checkpoint.
Epochs are numbered from 1 wherever a user sees them: printed lines, log.jsonl, file names."""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from east_cache.reader import CacheDataset
from east_cache.model.backbone import init_backbone
from east_cache.model.checkpoint import (
    check_fits_cache,
    checkpoint_name,
    checkpoint_state,
    inference_model,
    load_checkpoint,
    resume,
    rng_states,
    save_checkpoint,
)
from east_cache.model.config import TrainConfig
from east_cache.model.engine import Context, evaluate, new_context, train_one_epoch
from east_cache.model.metrics import detection_metrics
from east_cache.model.model import EAST
from east_cache.model.runinfo import (
    INTERRUPTED,
    nothing_left,
    resume_command,
    run_header,
    started_lines,
)
from east_cache.model.runtime import Runtime, jsonl_writer, profiler, stop_on_signals
from east_cache.model.validate import full_page_metrics, val_pages
from east_cache.config import BuildConfig
from east_cache.errors import UsageError
from east_cache.reader.loader import check_caches, make_loader, open_cache
from east_cache.store.remote.share import NodeShare


def train(cfg: TrainConfig, rt: Runtime, argv: list[str]) -> int:
    """A training run; returns the exit status: 0, or INTERRUPTED after a signal stopped it (and saved)."""
    torch.manual_seed(cfg.seed + rt.rank)  # DDP broadcasts rank 0's initial weights; the jitter differs per rank
    local = (cfg.local_cache, cfg.local_cache_limit)   # where caches at URLs are downloaded
    ds = open_cache(cfg.cache, cfg.rebuild, rt.rank, rt.world, *local)
    val = open_cache(cfg.val_cache, cfg.rebuild, rt.rank, rt.world, *local) if cfg.val_cache else None
    share = NodeShare.from_env(cfg.nodes, cfg.node_rank) if cfg.node_share else None
    check_caches(ds, val)
    model = EAST(ds.config.map_scale)
    origin = "" if cfg.resume else init_backbone(model, cfg.backbone_weights, rt.say)  # a resume overwrites it
    model.to(rt.device, memory_format=torch.channels_last)
    ctx = new_context(cfg, rt)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=ctx.fused)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [max(1, cfg.epochs // 2)], gamma=0.1)
    if cfg.resume:
        resume(cfg.resume, model, optimizer, scheduler, ctx, ds)
        origin = f"resumed from {cfg.resume}"
    # --profile N stops after its N steps and the warm-up step, counted from where this run starts
    ctx.state.step_limit = ctx.state.step + cfg.profile + 1 if cfg.profile else cfg.max_steps
    nothing_left(cfg, ctx.state)
    net = torch.nn.parallel.DistributedDataParallel(model) if rt.world > 1 else model
    net = torch.compile(net) if cfg.compile else net
    def loader(d, train: bool):
        return make_loader(d, cfg.batch_size, train, cfg.seed, rt.rank, rt.world, rt.device, cfg.workers,
                           share if train else None)
    loaders = (loader(ds, True), loader(val, False) if val is not None else None)
    if len(loaders[0]) < cfg.accum_steps:
        raise UsageError(f"{cfg.cache}: {len(ds)} images make {len(loaders[0])} batches per process, fewer than "
                         f"--accum-steps {cfg.accum_steps}; lower --batch-size or --accum-steps")
    for line in started_lines(cfg, rt, ds, origin, ctx.state, len(loaders[0]) // cfg.accum_steps):
        rt.say(line)
    cfg.out.mkdir(parents=True, exist_ok=True)
    ctx.log = jsonl_writer(cfg.out / "log.jsonl") if rt.rank == 0 else None
    if ctx.log:
        ctx.log(run_header(cfg, rt, argv, ds, val, origin))
    if not cfg.profile:  # a profiling run saves nothing
        ctx.save = lambda: save(model, optimizer, scheduler, ctx, ds, complete=False)
    ctx.state.deadline = time.perf_counter() + cfg.time_limit if cfg.time_limit else None
    pages = val_pages(cfg.val_data, cfg.val_split, ds.config, cfg.batch_size) if cfg.val_data else None
    with stop_on_signals(ctx.state, rt):
        run_epochs(net, model, loaders, optimizer, scheduler, ctx, ds, pages)
    return finish(ctx, argv)


def run_epochs(net, model, loaders, optimizer, scheduler, ctx: Context, ds: CacheDataset, pages=None) -> None:
    """pages (east_cache.model.validate.ValPages): full validation images, scored instead of the validation crops."""
    cfg, rt, state = ctx.cfg, ctx.rt, ctx.state
    profiling = bool(cfg.profile) and rt.rank == 0
    prof = profiler(cfg.profile, cfg.out, rt.device, rt.say) if profiling else nullcontext()
    with prof:
        ctx.on_step = prof.step if profiling else None
        for epoch in range(state.epoch, cfg.epochs):
            if state.stopped or state.signal is not None or reached(state.step, state.step_limit):
                break
            state.epoch = epoch
            loaders[0].sampler.set_epoch(epoch, skip=state.epoch_micro * cfg.batch_size)
            stats, complete = train_one_epoch(net, loaders[0], optimizer, ctx)
            lr = optimizer.param_groups[0]["lr"]
            # An epoch cut short is not done: the lr schedule steps at its end, when a resumed run has finished it
            if complete:
                scheduler.step()
            if loaders[1] is not None and state.signal is None:  # a signal asks to stop now, not to evaluate
                stats.update(evaluate(net, loaders[1], ctx))
            if cfg.eval_every and state.signal is None and (complete and (epoch + 1) % cfg.eval_every == 0
                                                            or last_epoch(epoch, ctx)):
                stats.update(full_page_metrics(model, pages, rt) if pages is not None
                             else detection_metrics(model, loaders[1].dataset.ds, ctx))
            end_epoch(stats, complete, lr, model, optimizer, scheduler, ctx, ds)
            if complete:
                state.epoch, state.epoch_micro, state.epoch_sums = epoch + 1, 0, None


def reached(step: int, limit: int | None) -> bool:
    return limit is not None and step >= limit


def end_epoch(stats: dict, complete: bool, lr: float, model, optimizer, scheduler, ctx: Context,
              ds: CacheDataset) -> None:
    """Log the epoch (rank 0) and write its checkpoint when one is due: every --save-every epochs, and when the
    run ends. A cut epoch is saved as epoch_N_step_S.pt, from where --resume finishes it."""
    cfg, state, number = ctx.cfg, ctx.state, ctx.state.epoch + 1
    if ctx.rt.rank == 0:
        ctx.log({"event": "epoch", "epoch": number, "complete": complete, "step": state.step, "lr": lr, **stats,
                 "bad_steps": int(state.bad_total)})
        val = f", val loss {stats['val_loss']:.4f}" if "val_loss" in stats else ""
        if "hmean" in stats:
            val += f", precision {stats['precision']:.4f}, recall {stats['recall']:.4f}, hmean {stats['hmean']:.4f}"
        cut = "" if complete else f" (stopped at step {state.step}, inside the epoch)"
        ctx.rt.say(f"epoch {number}/{cfg.epochs}{cut}: loss {stats['loss']:.4f} (dice {stats['cls']:.4f}, "
                   f"iou {stats['iou']:.4f}, angle {stats['angle']:.4f}){val}; {stats['samples_per_s']:.3g} "
                   f"samples/s, {100 * stats['data_wait']:.0f}% of the time waiting for data")
    if not cfg.profile and ((complete and number % cfg.save_every == 0) or last_epoch(state.epoch, ctx)):
        save(model, optimizer, scheduler, ctx, ds, complete)


def save(model, optimizer, scheduler, ctx: Context, ds: CacheDataset, complete: bool) -> None:
    """A checkpoint of where the run is now (all ranks gather their random states; rank 0 writes). The run's
    previous mid-epoch checkpoint, now superseded, is removed: --save-every-steps keeps one, not one per save."""
    rng = rng_states(ctx.rt)
    state = ctx.state
    if ctx.rt.rank != 0:
        return
    path = ctx.cfg.out / checkpoint_name(state.epoch + 1, state.step, complete)
    save_checkpoint(checkpoint_state(model, optimizer, scheduler, ctx, ds, rng, complete), path)
    if state.last_checkpoint is not None and not state.last_complete and state.last_checkpoint != path:
        state.last_checkpoint.unlink(missing_ok=True)
    state.last_checkpoint, state.last_complete = path, complete


def last_epoch(epoch: int, ctx: Context) -> bool:
    """Whether epoch (0-based) ends the run: the last of --epochs, or cut short by a limit or a signal."""
    return epoch + 1 >= ctx.cfg.epochs or ctx.state.stopped or ctx.state.signal is not None


def finish(ctx: Context, argv: list[str]) -> int:
    """The run's last lines: what was done, and how to go on when it was stopped early."""
    cfg, rt, state = ctx.cfg, ctx.rt, ctx.state
    saved = state.last_checkpoint
    again = f"; to continue: {resume_command(argv, saved, rt.world)}" if saved else ""
    if state.signal is not None:
        inside = state.epoch_micro > 0  # else between epochs: state.epoch already counts the last one done
        epoch = state.epoch + 1 if inside else state.epoch
        if ctx.log:
            ctx.log({"event": "interrupted", "signal": state.signal, "epoch": epoch, "step": state.step,
                     "checkpoint": str(saved) if saved else None})
        where = f"inside epoch {epoch}" if inside else f"after epoch {epoch}"
        rt.say(f"stopped by a signal at step {state.step}, {where}; saved {saved}{again}")
        return INTERRUPTED
    note = ""
    if state.stopped and saved and not cfg.check_run and not cfg.profile:
        if reached(state.step, state.step_limit):
            go_on = resume_command(argv, saved, rt.world, drop=("--max-steps",))
            note = f"; stopped at --max-steps {cfg.max_steps}; to go on: {go_on} --max-steps N (N > {state.step})"
        else:
            note = f"; stopped at --time-limit{again}"
    rt.say(f"done: {state.step} steps, {int(state.bad_total)} skipped as non-finite; outputs in {cfg.out}{note}")
    return 0


def evaluate_checkpoint(cfg: TrainConfig, rt: Runtime, checkpoint) -> None:
    """--eval-only: detection metrics of the checkpoint on --val-data's full images (rect DetEval, as training
    logs them), else on --val-cache, or --cache when there is none; printed and appended to OUT/eval.jsonl (OUT:
    the checkpoint's folder unless --out is given)."""
    ck = load_checkpoint(checkpoint)
    model = inference_model(ck, checkpoint, rt.device)
    if cfg.val_data:
        pages = val_pages(cfg.val_data, cfg.val_split, BuildConfig.from_dict(ck["config"]), cfg.batch_size)
        metrics = full_page_metrics(model, pages, rt)
        source, n, on = {"data": str(cfg.val_data), "split": cfg.val_split}, len(pages.records), \
            f"{cfg.val_data} ({cfg.val_split}, full images, rect DetEval)"
    else:
        cache = cfg.val_cache or cfg.cache
        ds = open_cache(cache, cfg.rebuild, rt.rank, rt.world, cfg.local_cache, cfg.local_cache_limit)
        check_fits_cache(ck, checkpoint, ds)
        metrics = detection_metrics(model, ds, new_context(cfg, rt))
        source, n, on = {"cache": str(cache)}, len(ds), str(cache)
    if rt.rank != 0:
        return
    cfg.out.mkdir(parents=True, exist_ok=True)
    log = cfg.out / "eval.jsonl"
    where = f"epoch {ck['epoch']}" + ("" if ck.get("complete", True) else f", step {ck['step']}, inside it")
    jsonl_writer(log)({"event": "eval", "checkpoint": str(checkpoint), "epoch": ck["epoch"], "step": ck["step"],
                       **source, "images": n, **metrics})
    print(f"{checkpoint} ({where}) on {on}, {n} images: precision {metrics['precision']:.4f}, "
          f"recall {metrics['recall']:.4f}, hmean {metrics['hmean']:.4f}; appended to {log}", flush=True)
