"""`east-train` (`python train.py`, under torchrun too): the command, and the run it starts, read top to bottom.

main -> run: flags checked and resolved (east_cache.train.config) -> train: caches opened (east_cache.reader.loader),
the model, optimiser and schedule made or resumed (east_cache.train.checkpoint) -> run_epochs: each epoch's steps
(east_cache.train.engine.train_one_epoch), its validation (east_cache.train.validate), its log record and
checkpoint -> finish: what was done and how to go on. Ctrl-C (or SIGTERM) stops at the next step and saves.
Epochs are numbered from 1 wherever a user sees them: printed lines, log.jsonl, file names.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from east_cache.reader import CacheDataset
from east_cache.train.checkpoint import (
    EVAL_LOG,
    RUN_WRITES,
    checkpoint_name,
    checkpoint_state,
    disk_use,
    export_onnx,
    improves,
    init_from,
    link_as,
    nothing_left,
    prune,
    resume,
    resume_command,
    rng_states,
    run_augment,
    save_checkpoint,
    validation_score,
    warning_line,
)
from east_cache.augment import given as augment_given
from east_cache.augment import Augment
from east_cache.train.config import (BACKBONES, CPU_BUDGET_SECONDS, CPU_BUDGET_STEPS, RunState, TrainConfig,
                                     check_flags, get_args_parser, resolve_config)
from east_cache.train.engine import Context, new_context, train_one_epoch, validation_loss
from east_cache.model.model import EAST, init_backbone
from east_cache.train.report import check_report_flags, connect_reporting, records_to, start_reporting
from east_cache.train.started import started_lines
from east_cache.train.runtime import failure_recorded, jsonl_writer, leave_group, now, profiler, run_header, stop_on_signals
from east_cache.predict.device import Runtime, setup_device, setup_threads
from east_cache.predict.weights import BEST
from east_cache.train.validate import detection_metrics, evaluate_checkpoint, full_page_metrics, val_pages
from east_cache.errors import EXIT_INTERRUPTED, UsageError, run_command
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.ingest.ufo import dataset_inputs, find_split
from east_cache.reader.loader import Loader, check_caches, open_cache
from east_cache.reader.recipe import load_recipe, recipe_inputs, run_recipe
from east_cache.reader.transform import TransformError
from east_cache.store.format import cache_inputs
from east_cache.store.selection import is_file as is_split_file
from east_cache.reader.share import NodeShare
from east_cache.train.selection import check_flags as check_selection_flags, choose_images, warn_leaks
from east_cache.train.selection import refuse_validating_on_training
from east_cache.train.selection import record as selection_record

INTERRUPTED = EXIT_INTERRUPTED   # a run stopped by SIGINT / SIGTERM (saved), or by a second Ctrl-C (unsaved)
UNSAVED = "error: interrupted; nothing saved since the last checkpoint"   # what the second Ctrl-C prints


def main(argv: list[str] | None = None) -> int:
    """The command's exit status: 0; 2 for the user's flags, caches, data or outputs (also from --rebuild) and a
    killed loader worker, as one line; 1 when training diverged; 130 when a signal stopped the run (after
    saving) or a second Ctrl-C did (unsaved)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(lambda: run(argv), argv, interrupted=UNSAVED)


def entry() -> None:
    """`east-train` and train.py: main()'s status as the process's. A rank of a torchrun job (WORLD_SIZE > 1)
    ends with os._exit once its output is flushed: its work is done (the group left, every checkpoint written
    and renamed into place), and the interpreter's and the C++ libraries' teardown, which os._exit skips, can
    abort a finished gloo job."""
    status = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status)
    sys.exit(status)


def run(argv: list[str] | None = None) -> int:
    """The command for these arguments; returns its exit status (0, or INTERRUPTED after Ctrl-C / SIGTERM).
    Errors propagate: main() turns them into one line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = get_args_parser().parse_args(argv)
    check_flags(args)
    check_selection_flags(args)
    setup_threads(args.threads)
    check_report_flags(args)
    if args.export_onnx:
        check_output(args.export_onnx, "--export-onnx", folder=False)
        refuse_overwrite("--export-onnx", args.export_onnx, [Input("the checkpoint --checkpoint", args.checkpoint)])
        export_onnx(args.checkpoint, args.export_onnx)
        return 0
    rt = setup_device(args.device)
    try:
        cfg = resolve_config(args, rt.device)
        check_output(cfg.out, "--out", folder=True)   # before the caches and the model load
        refuse_overwrite("--out", cfg.out, run_inputs(cfg, args.checkpoint),
                         (EVAL_LOG,) if args.eval_only else RUN_WRITES)
        if cfg.val_data:
            find_split(cfg.val_data, cfg.val_split, "--val-data", "--val-split")
        status = 0
        if args.eval_only:
            evaluate_checkpoint(cfg, rt, args.checkpoint)
        else:
            status = train(cfg, rt, argv)
        if rt.world > 1:
            # Leave together: rank 0 may still be writing its checkpoint, and a rank that tears its end of the
            # group down while a peer is still connected can abort at exit.
            dist.barrier()
    finally:
        leave_group(rt)
    return status


def run_inputs(cfg: TrainConfig, checkpoint) -> list[Input]:
    """What a run reads that its --out must never be nor replace: the caches, the validation set, the --augment
    recipe, a --split FILE.json, the checkpoint it starts from (--init-from, --eval-only's), the backbone's weights
    file. Not --resume's: the run it continues writes into its own folder."""
    files = (("--init-from", cfg.init_from), ("--checkpoint", checkpoint), ("--backbone-weights", cfg.backbone_weights))
    split = [Input("the split file --split", Path(cfg.split))] if cfg.split and is_split_file(cfg.split) else []
    return [*cache_inputs(cfg.cache, "--cache"), *cache_inputs(cfg.val_cache, "--val-cache"),
            *dataset_inputs(cfg.val_data, "--val-data"), *recipe_inputs(cfg.augment), *split,
            *(Input(f"the checkpoint {flag}" if flag != "--backbone-weights" else f"the weights {flag}", path)
              for flag, path in files if path is not None and path not in BACKBONES)]


def train(cfg: TrainConfig, rt: Runtime, argv: list[str]) -> int:
    """A training run; returns the exit status: 0, or INTERRUPTED after a signal stopped it (and saved)."""
    torch.manual_seed(cfg.seed + rt.rank)  # DDP broadcasts rank 0's initial weights; the jitter differs per rank
    if cfg.augment and not cfg.resume:   # a recipe that does not load stops the run before the caches open
        load_recipe(cfg.augment)
    report = connect_reporting(cfg, rt)   # the trackers reached before the caches open, each within a bound
    ds = open_run_cache(cfg, rt, cfg.cache)
    refuse_validating_on_training(cfg, ds, cfg.split)   # before the model: --split X --val-split X
    val = open_run_cache(cfg, rt, cfg.val_cache) if cfg.val_cache else None
    share = NodeShare.from_env(cfg.nodes, cfg.node_rank) if cfg.node_share else None
    given = augment_given(cfg)   # the Augment flags this run was given
    if not cfg.resume:   # a resume takes the checkpoint's (below); its flags are checked against it there
        read_by(ds, val, run_augment(given, ds))
    model = EAST(ds.config.map_scale)
    if cfg.init_from:
        origin = init_from(cfg.init_from, model, ds)
    else:   # a resume overwrites the weights
        origin = "" if cfg.resume else init_backbone(model, cfg.backbone_weights, rt.say)
    model.to(rt.device, memory_format=torch.channels_last)
    ctx = new_context(cfg, rt)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=ctx.fused)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [max(1, cfg.epochs // 2)], gamma=0.1)
    recorded = ck = None
    if cfg.resume:
        ck = resume(cfg.resume, model, optimizer, scheduler, ctx, ds)
        read_by(ds, val, run_augment(given, ds, ck, cfg.resume))
        recorded = ck.get("transform")
        origin = f"resumed from {cfg.resume}"
    choose_images(cfg, ds, ck, cfg.resume)   # --split, --repeat; a resume's recorded ones
    recipe = run_recipe(cfg.augment, recorded, cfg.resume and str(cfg.resume), rt.say,
                        warning_line if rt.rank == 0 else rt.say)
    ds.set_transform(recipe, cfg.seed)
    # --profile N stops after its N steps and the warm-up step, counted from where this run starts
    ctx.state.step_limit = ctx.state.step + cfg.profile + 1 if cfg.profile else cfg.max_steps
    nothing_left(cfg, ctx.state)
    net = torch.nn.parallel.DistributedDataParallel(model) if rt.world > 1 else model
    net = torch.compile(net) if cfg.compile else net
    loaders = (run_loader(cfg, rt, ds, True, share), run_loader(cfg, rt, val, False) if val is not None else None)
    if len(loaders[0]) < cfg.accum_steps:
        raise UsageError(f"{cfg.cache}: {len(ds)} items an epoch make {len(loaders[0])} batches per process, fewer "
                         f"than --accum-steps {cfg.accum_steps}; lower --batch-size or --accum-steps")
    steps = len(loaders[0]) // cfg.accum_steps
    for line in started_lines(cfg, rt, ds, origin, ctx.state, steps, disk_use(cfg.out, model)):
        rt.say(line)
    if rt.rank == 0:   # a validation split that shares images with the run's training images
        warn_leaks(cfg, ds, rt.say)
    pages = val_pages(cfg.val_data, cfg.val_split, ds.config, cfg.batch_size) if cfg.val_data else None
    cfg.out.mkdir(parents=True, exist_ok=True)
    report = start_reporting(report, ctx)   # ctx.report too
    ctx.log = records_to(jsonl_writer(cfg.out / "log.jsonl"), report) if rt.rank == 0 else None
    if ctx.log:
        ctx.log({**run_header(cfg, rt, argv, ds, val, origin), "augment": ds.aug.to_dict(),
                 "transform": ds.transform and ds.transform.record, "selection": selection_record(ds)})
    if not cfg.profile:  # a profiling run saves nothing
        ctx.save = lambda: save(model, optimizer, scheduler, ctx, ds, complete=False)
    ctx.state.deadline = time.perf_counter() + cfg.time_limit if cfg.time_limit else None
    with failure_recorded(ctx.log, ctx.state, report), stop_on_signals(ctx.state, rt):
        run_saving(net, model, loaders, optimizer, scheduler, ctx, ds, pages)
    status = finish(ctx, argv)
    if report:
        report.finish(status)
    return status


def run_saving(net, model, loaders, optimizer, scheduler, ctx: Context, ds: CacheDataset, pages) -> None:
    """run_epochs; where the --augment recipe fails on a crop, the steps done so far are saved first."""
    try:
        run_epochs(net, model, loaders, optimizer, scheduler, ctx, ds, pages)
    except TransformError as e:
        if ctx.save is None or ctx.rt.world > 1:   # (under DDP a save is a collective the other ranks are not in)
            raise
        ctx.save()
        raise TransformError(f"{e}; saved {ctx.state.last_checkpoint}: fix the recipe, then --resume it with "
                             f"--augment RECIPE") from None


def read_by(ds: CacheDataset, val: CacheDataset | None, aug: Augment) -> None:
    """The training cache drawn by the run's Augment; the validation cache read at its crop size, drawing none of
    it (Loader(train=False)); both checked alike (check_caches)."""
    ds.augment = aug
    if val is not None:
        val.augment = Augment.of_cache(val.config, input_size=aug.input_size)
    check_caches(ds, val)


def open_run_cache(cfg: TrainConfig, rt: Runtime, path) -> CacheDataset:
    """A cache of the run (its training or validation cache) opened for this process, brought up to date with
    --rebuild; one at a URL downloaded into the run's local cache folder."""
    return open_cache(path, cfg.rebuild, rt.rank, rt.world, cfg.local_cache, cfg.local_cache_limit)


def run_loader(cfg: TrainConfig, rt: Runtime, ds: CacheDataset, train: bool, share: NodeShare | None = None) -> Loader:
    """The loader train.py reads ds by: the public reader; the augmentation (colour jitter, and each epoch's height
    and rotation of pages stored resized only) and the node share in training only."""
    return Loader(ds, cfg.batch_size, device=rt.device, workers=cfg.workers, seed=cfg.seed, train=train,
                  rank=rt.rank, world=rt.world, jitter=cfg.jitter if train else 0.0, share=share if train else None,
                  nvjpeg_decode=cfg.nvjpeg)


def training_loader(cache, batch_size: int, workers: int | None, device, augment: dict | None = None) -> Loader:
    """The training loader train.py --cache CACHE --batch-size B --workers W --device D reads by, its augmentation
    flags as augment says (Augment fields), its other flags at their defaults (`bench` sets it beside a loop of your
    own)."""
    cfg = TrainConfig(cache=cache, batch_size=batch_size, workers=workers, **(augment or {}))
    rt = Runtime(torch.device(device))
    ds = open_run_cache(cfg, rt, cfg.cache)
    read_by(ds, None, run_augment(augment_given(cfg), ds))
    return run_loader(cfg, rt, ds, train=True)


def run_epochs(net, model, loaders, optimizer, scheduler, ctx: Context, ds: CacheDataset, pages=None) -> None:
    """pages (east_cache.train.validate.ValPages): full validation images, scored instead of the validation crops."""
    cfg, rt, state = ctx.cfg, ctx.rt, ctx.state
    profiling = bool(cfg.profile) and rt.rank == 0
    prof = profiler(cfg.profile, cfg.out, rt.device, rt.say) if profiling else nullcontext()
    with prof:
        ctx.on_step = prof.step if profiling else None
        for epoch in range(state.epoch, cfg.epochs):
            if state.stopped or state.signal is not None or reached(state.step, state.step_limit):
                break
            state.epoch = epoch
            loaders[0].set_epoch(epoch, skip=state.epoch_micro * cfg.batch_size)
            stats, complete = train_one_epoch(net, loaders[0], optimizer, ctx)
            lr = optimizer.param_groups[0]["lr"]
            # An epoch cut short is not done: the lr schedule steps at its end, when a resumed run has finished it
            if complete:
                scheduler.step()
            if loaders[1] is not None and state.signal is None:  # a signal asks to stop now, not to evaluate
                stats.update(validation_loss(net, loaders[1], ctx))
            if cfg.eval_every and state.signal is None and (complete and (epoch + 1) % cfg.eval_every == 0
                                                            or last_epoch(epoch, ctx)):
                worst = ctx.report.worst_pages() if ctx.report and pages is not None else None
                stats.update(full_page_metrics(model, pages, rt, worst) if pages is not None
                             else detection_metrics(model, loaders[1].dataset, ctx))
                if worst is not None:
                    ctx.report.show_worst(worst, state.step)
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
                 "bad_steps": int(state.bad_total), "time": now()})
        val = f", val loss {stats['val_loss']:.4f}" if "val_loss" in stats else ""
        if "hmean" in stats:
            val += f", precision {stats['precision']:.4f}, recall {stats['recall']:.4f}, hmean {stats['hmean']:.4f}"
        cut = "" if complete else f" (stopped at step {state.step}, inside the epoch)"
        ctx.rt.say(f"epoch {number}/{cfg.epochs}{cut}: loss {stats['loss']:.4f} (dice {stats['cls']:.4f}, "
                   f"iou {stats['iou']:.4f}, angle {stats['angle']:.4f}){val}; {stats['samples_per_s']:.3g} "
                   f"samples/s, {100 * stats['data_wait']:.0f}% of the time waiting for data")
    # An epoch cut by a limit that ends the run (the check run on a CPU, --max-steps) was validated above: its
    # checkpoint can become best.pt, so a run that validates always leaves one (not after a signal: no validation)
    if not cfg.profile and ((complete and number % cfg.save_every == 0) or last_epoch(state.epoch, ctx)):
        save(model, optimizer, scheduler, ctx, ds, complete, validation_score(stats, cfg))


def save(model, optimizer, scheduler, ctx: Context, ds: CacheDataset, complete: bool, score=None) -> None:
    """A checkpoint of where the run is now (all ranks gather their random states; rank 0 writes). The run's
    previous mid-epoch checkpoint, now superseded, is removed: --save-every-steps keeps one, not one per save.
    A complete epoch whose validation score (metric, value) beats the best so far becomes best.pt; then only
    the newest --keep-last epoch files stay."""
    rng = rng_states(ctx.rt)
    state, out = ctx.state, ctx.cfg.out
    if ctx.rt.rank != 0:
        return
    path = out / checkpoint_name(state.epoch + 1, state.step, complete)
    new_best = score is not None and improves(score, state.best)
    if new_best:
        state.best = {"metric": score[0], "value": score[1], "epoch": state.epoch + 1}
    save_checkpoint(checkpoint_state(model, optimizer, scheduler, ctx, ds, rng, complete), path)
    if new_best:
        link_as(path, BEST)
    if state.last_checkpoint is not None and not state.last_complete and state.last_checkpoint != path:
        state.last_checkpoint.unlink(missing_ok=True)
    state.last_checkpoint, state.last_complete = path, complete
    if complete:
        prune(out, ctx.cfg.keep_last)


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
                     "checkpoint": str(saved) if saved else None, "time": now()})
        where = f"inside epoch {epoch}" if inside else f"after epoch {epoch}"
        rt.say(f"stopped by a signal at step {state.step}, {where}; saved {saved}{again}{no_best(cfg, state)}")
        return INTERRUPTED
    note = ""
    cut = state.stopped and state.epoch < cfg.epochs   # a limit met on the last step of the last epoch cut nothing
    if cut and saved and cfg.check_run:
        note = (f"; the check run without a GPU stopped at its limit ({CPU_BUDGET_STEPS} steps, or before a step that "
                f"would pass {CPU_BUDGET_SECONDS:g} s of training): --epochs, --max-steps or --time-limit set a run's "
                f"length")
    elif cut and saved and not cfg.profile:
        if reached(state.step, state.step_limit):
            go_on = resume_command(argv, saved, rt.world, drop=("--max-steps",))
            note = f"; stopped at --max-steps {cfg.max_steps}; to go on: {go_on} --max-steps N (N > {state.step})"
        else:
            note = f"; stopped at --time-limit{again}"
    if ctx.log:
        reason = "finished" if not cut else "max-steps" if reached(state.step, state.step_limit) else "time-limit"
        ctx.log({"event": "end", "reason": reason, "epoch": state.epoch, "step": state.step, "time": now()})
    rt.say(f"done: {state.step} steps, {int(state.bad_total)} skipped as non-finite; outputs in {cfg.out}{note}"
           f"{no_best(cfg, state)}")
    return 0


def no_best(cfg: TrainConfig, state: RunState) -> str:
    """Where the first lines promised best.pt and no epoch was validated (a signal stopped the first one): what to
    predict with instead."""
    if not (cfg.eval_every or cfg.val_cache) or state.best is not None or state.last_checkpoint is None:
        return ""
    return (f"; no {BEST} (no epoch was validated before the stop): predict with {state.last_checkpoint}, or "
            f"resume to finish an epoch")


if __name__ == "__main__":
    entry()
