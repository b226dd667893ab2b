"""bench_gpu.py's steady-state training arm (and bench_gpu_augment.py's arms): train.py's epoch function
(east_cache.train.engine.train_one_epoch) on train.py's loader (run_training_loader: train.py's own calls, workers as
train.py picks them, its augmentation flags and --augment recipe where an arm gives them), several epochs of many
crops, the share of step time waiting for data per epoch and the CPU cores busy meanwhile; then where that wait goes:
the training step alone on one resident batch, the loader alone, and torch.profiler's busiest host ops over steps of
the last epoch.
"""
from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from common import process_tree_cpu_seconds
from torch.profiler import ProfilerActivity, profile, schedule

from east_cache.augment import given as augment_given
from east_cache.train.checkpoint import run_augment
from east_cache.train.config import TrainConfig
from east_cache.train.engine import forward_loss, new_context, optimizer_step, train_one_epoch
from east_cache.model.model import EAST
from east_cache.predict.device import Runtime
from east_cache.train.train import open_run_cache, read_by, run_loader
from east_cache.reader.loader import Batch, Loader
from east_cache.reader.recipe import run_recipe

PROFILE_ROWS = 8      # host ops listed from the profile
STEP_REPEATS = 10     # timed training steps on one resident batch, by default


@dataclass(frozen=True)
class Steady:
    epochs: int            # epochs in all (the first is start-up: workers, page maps, cuDNN's choice)
    batch_size: int        # crops per step
    amp: str               # train.py's --amp: fp16 (GradScaler) on CUDA, off on a CPU
    profile_steps: int     # steps of the last epoch profiled (0: none)
    step_repeats: int = STEP_REPEATS   # timed training steps on one resident batch
    workers: int | None = None         # train.py's --workers (None: as train.py picks them)
    augment: tuple = ()                # train.py's augmentation flags, (Augment field, value) pairs; (): the cache's
    recipe: str | None = None          # train.py's --augment RECIPE (a file albumentations saved); None: none


def run_training_loader(cache, cfg: Steady, device: torch.device) -> Loader:
    """The loader of `east-train --cache CACHE --batch-size B [--workers W] [--scale ... --augment RECIPE]`, made by
    train.py's own calls in train.train's order (the cache opened, the run's Augment, the recipe set on the dataset
    with the run's seed, run_loader), so that an arm reads exactly what a training run reads; with no flags this is
    east_cache.train.train.training_loader's loader."""
    run = TrainConfig(cache=cache, batch_size=cfg.batch_size, workers=cfg.workers, augment=cfg.recipe,
                      **dict(cfg.augment))
    rt = Runtime(device)
    ds = open_run_cache(run, rt, run.cache)
    read_by(ds, None, run_augment(augment_given(run), ds))
    say = lambda line: print(line, file=sys.stderr)   # noqa: E731 - the tables own stdout
    ds.set_transform(run_recipe(run.augment, None, None, say, say), run.seed)
    return run_loader(run, rt, ds, True)


def new_run(loader, cfg: Steady, device: torch.device):
    """(model, optimizer, ctx) as train.py makes them for this loader's cache, random backbone, seed 0."""
    torch.manual_seed(0)
    model = EAST(loader.dataset.config.map_scale).to(device, memory_format=torch.channels_last)
    ctx = new_context(TrainConfig(batch_size=cfg.batch_size, amp=cfg.amp, epochs=cfg.epochs), Runtime(device))
    ctx.log = lambda record: None   # log_window's records: the epoch's stats are what this arm reads
    optimizer = torch.optim.Adam(model.parameters(), lr=ctx.cfg.lr, fused=ctx.fused)
    return model, optimizer, ctx


def profiler_for(cfg: Steady, steps_in_epoch: int, device: torch.device, top: list):
    """torch.profiler over the last `profile_steps` steps of an epoch of steps_in_epoch, their busiest host ops
    put into `top` when they are done (None: no profile)."""
    n = min(cfg.profile_steps, steps_in_epoch - 1)
    if n < 1:
        return None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(activities=activities, schedule=schedule(wait=steps_in_epoch - n - 1, warmup=1, active=n, repeat=1),
                   on_trace_ready=lambda p: top.extend(busiest(p, n)))


def steady_epochs(cache, cfg: Steady, device: torch.device) -> dict:
    """Per epoch {samples_per_s, data_wait, seconds}; the CPU cores busy over the epochs after the first (this
    process and its loader workers; None without /proc); the step alone and the loader alone (samples/s); the
    profile's busiest host ops [(name, self ms per step, calls per step)]."""
    loader = run_training_loader(cache, cfg, device)
    with loader:
        model, optimizer, ctx = new_run(loader, cfg, device)
        epochs, top, cpu = [], [], [None, None]
        for epoch in range(cfg.epochs):
            last = epoch == cfg.epochs - 1
            prof = profiler_for(cfg, len(loader), device, top) if last else None
            ctx.on_step = prof.step if prof is not None else None
            ctx.state.epoch = epoch   # the progress line's epoch, as train.py's run_epochs sets it
            loader.set_epoch(epoch)
            if epoch == min(1, cfg.epochs - 1):   # the epochs after the start-up one (the only one if it is alone)
                cpu[0] = process_tree_cpu_seconds()
            with prof if prof is not None else nullcontext():
                stats, _ = train_one_epoch(model, loader, optimizer, ctx)
            epochs.append({k: stats[k] for k in ("samples_per_s", "data_wait", "seconds", "loss")})
        cpu[1] = process_tree_cpu_seconds()
        later = epochs[1:] or epochs
        cores = (cpu[1] - cpu[0]) / sum(e["seconds"] for e in later) if None not in cpu else None
        alone, batch = loader_alone(loader, device)
        step = step_alone(model, optimizer, ctx, batch, cfg.step_repeats)
    return {"epochs": epochs, "loader_alone": alone, "step_alone": step, "workers": describe(loader), "top": top,
            "cores": cores}


def describe(loader) -> str:
    n = getattr(loader.source, "num_workers", None)
    return f"{n} worker(s)" if n is not None else type(loader.source).__name__


def busiest(prof, steps: int) -> list[tuple[str, float, float]]:
    """The profile's host ops with the most self CPU time: (name, ms per step, calls per step)."""
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:PROFILE_ROWS]
    return [(e.key, e.self_cpu_time_total / 1e3 / steps, e.count / steps) for e in rows]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loader_alone(loader, device: torch.device) -> tuple[float, Batch]:
    """(samples/s, a copy of its first batch) of one more epoch of the loader read to the device with nothing else
    running (normalised and jittered there, as training takes it)."""
    n, first, t0 = 0, None, time.perf_counter()
    for batch in loader:
        n += len(batch.image)
        first = first or Batch(*(t.clone() for t in batch))   # a worker's slot is reused: keep a copy
    sync(device)
    return n / (time.perf_counter() - t0), first


def step_alone(model, optimizer, ctx, batch: Batch, repeats: int) -> float:
    """Samples/s of the training step (forward, loss, backward, optimiser) on one batch kept on the device."""
    model.train()

    def step() -> None:
        parts = forward_loss(model, batch, ctx)
        ctx.scaler.scale(parts["loss"]).backward()
        optimizer_step(model, optimizer, ctx, parts["loss"])
    step()
    sync(ctx.rt.device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    sync(ctx.rt.device)
    return repeats * len(batch.image) / (time.perf_counter() - t0)


def steady_tables(results: dict[str, dict]) -> tuple[list, list, list]:
    """(per-epoch rows, where-the-wait-goes rows, profile rows) of steady_epochs' results by codec."""
    per_epoch, where, ops = [], [], []
    for codec, r in results.items():
        for k, e in enumerate(r["epochs"]):
            per_epoch.append([codec, str(k + 1) + (" (start-up)" if k == 0 else ""), f"{e['samples_per_s']:.1f}",
                              f"{100 * e['data_wait']:.1f}%", f"{e['seconds']:.1f}", f"{e['loss']:.3f}"])
        train_rate, wait = after_start_up(r["epochs"])
        where.append([codec, r["workers"], f"{train_rate:.1f}", f"{100 * wait:.1f}%", f"{r['step_alone']:.1f}",
                      f"{r['loader_alone']:.1f}", f"{r['loader_alone'] / r['step_alone']:.2f}"])
        ops += [[codec, name, f"{ms:.2f}", f"{calls:.1f}"] for name, ms, calls in r["top"]]
    return per_epoch, where, ops


def after_start_up(epochs: list[dict]) -> tuple[float, float]:
    """(samples/s, share of the time waiting for data) over the epochs after the first (the first alone when it is
    the only one): samples over seconds, and the wait weighted by each epoch's seconds."""
    later = epochs[1:] or epochs
    seconds = sum(e["seconds"] for e in later)
    samples = sum(e["samples_per_s"] * e["seconds"] for e in later)
    return samples / seconds, sum(e["data_wait"] * e["seconds"] for e in later) / seconds
