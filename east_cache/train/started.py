"""The lines east-train prints first: the device and the batch, the cache and how its crops get their geometry
(the run's Augment) and transforms, the images it takes per source (--split, --repeat), the weights, the run's
length and what it writes."""
from __future__ import annotations

from east_cache.predict.weights import BEST, LATEST
from east_cache.train.config import RunState, TrainConfig
from east_cache.predict.device import Runtime
from east_cache.reader import CacheDataset
from east_cache.reader.loader import describe_reading, loader_workers
from east_cache.train.selection import selection_lines


def started_lines(cfg: TrainConfig, rt: Runtime, ds: CacheDataset, origin: str, state: RunState,
                  steps_per_epoch: int, disk: str) -> list[str]:
    c, procs = ds.config, f"{rt.world} processes" if rt.world > 1 else "1 process"
    procs += f", {cfg.threads} torch thread(s) each" if cfg.threads else ""
    val = f"validation cache {cfg.val_cache}" if cfg.val_cache else "no validation cache (--val-cache)"
    if cfg.val_data:
        val += f"; validation images {cfg.val_data} ({cfg.val_split} split, full pages)"
    if cfg.resume:
        where = (f"inside epoch {state.epoch + 1}, {state.epoch_micro // cfg.accum_steps} of its steps done"
                 if state.epoch_micro else f"after epoch {state.epoch}")
        origin = f"{origin}: step {state.step}, {where}"
    steps = f" and every {cfg.save_every_steps} steps" if cfg.save_every_steps else ""
    kept = f"the newest {cfg.keep_last}" if cfg.keep_last else "every one"
    best = f" and {BEST}" if cfg.eval_every or cfg.val_cache else ""   # what validation_score judges by
    saves = f"a checkpoint every {cfg.save_every} epoch(s){steps}, keeping {kept}, {LATEST}{best}; {disk}"
    images = f"{len(ds)} images" if ds.selection is None else f"{len(ds)} items an epoch of {len(ds.names)} images"
    return [(f"device {rt.device} ({procs}); batch {cfg.batch_size} per process, {cfg.accum_steps} per step; "
             f"input {ds.size} px, maps at x{c.map_scale}; amp {cfg.amp}"),
            (f"cache {cfg.cache}: {images}, {describe_geometry(ds, cfg.nvjpeg)}, "
             f"{describe_reading(loader_workers(ds, rt.device, rt.world, cfg.workers))}; {val}"
             + (f"; each training crop through --augment {ds.transform.recipe}" if ds.transform else "")),
            *selection_lines(ds),
            f"weights: {origin}",
            describe_length(cfg, state, steps_per_epoch),
            f"output: {cfg.out} (log.jsonl, {saves})"]


def describe_geometry(ds: CacheDataset, nvjpeg: bool) -> str:
    """How the cache's crops get their geometry, in words: the run's Augment (--geometry read), or the build's."""
    c = ds.config
    if not c.warps_at_read:
        return f"{c.variants} variant(s) warped at build time"
    unused = "; --nvjpeg unused: its crops are decoded and warped by the loader" if nvjpeg else ""
    return f"augmentation: each epoch {ds.aug.describe()}{unused}"


def describe_length(cfg: TrainConfig, state: RunState, steps_per_epoch: int) -> str:
    limits = ([f"profiling {cfg.profile} step(s) after a warm-up one"] if cfg.profile else
              [f"step {state.step_limit}"] if state.step_limit is not None else [])
    if cfg.time_limit:
        limits.append(f"{cfg.time_limit:g} s")
    text = f"length: {cfg.epochs} epoch(s) of {steps_per_epoch} step(s)"
    if state.epoch or state.step:
        text += f", going on from epoch {state.epoch + 1}"
    if limits:
        text += ", stopping at " + " or ".join(limits)
    if cfg.check_run:
        text += " (the check run without a GPU; --epochs, --max-steps or --time-limit set the length)"
    return text
