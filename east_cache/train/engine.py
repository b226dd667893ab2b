"""The training engine: one optimiser step (AMP, gradient accumulation, skipping non-finite steps without a host
sync), an epoch of them, and the validation loss. The only host syncs are at --log-every intervals."""
from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from east_cache.reader.loader import Batch
from east_cache.train.config import RunState, TrainConfig
from east_cache.model.loss import LOSS_KEYS, east_loss
from east_cache.predict.device import Runtime
from east_cache.errors import UserError
from east_cache.progress import Progress


@dataclass
class Context:
    """What the step functions share in one run: the frozen settings, where it runs, and the state that moves."""
    cfg: TrainConfig
    rt: Runtime
    scaler: torch.amp.GradScaler       # enabled for fp16 only
    fused: bool                        # fused Adam skips a step on the device when found_inf is set: no host sync
    state: RunState
    log: Callable[[dict], None] | None = None   # JSONL writer on rank 0, None elsewhere
    on_step: Callable[[], None] | None = None   # profiler hook
    save: Callable[[], None] | None = None      # writes a mid-epoch checkpoint (--save-every-steps)
    first_batch: Callable[[Batch], None] | None = None   # shown this run's first batch once (--report-to), then unset
    report: object | None = None                # east_cache.train.report.Reporting on rank 0 with --report-to

    def autocast(self):
        return torch.autocast(self.rt.device.type, dtype=self.cfg.amp_dtype, enabled=self.cfg.amp_dtype is not None)


def new_context(cfg: TrainConfig, rt: Runtime, fused: bool | None = None) -> Context:
    """A fresh run's context; fused defaults to what the device supports (CUDA and CPU)."""
    fused = rt.device.type in ("cuda", "cpu") if fused is None else fused
    scaler = torch.amp.GradScaler(rt.device.type, enabled=cfg.amp == "fp16")
    return Context(cfg, rt, scaler, fused, RunState().to(rt.device))


class NonFiniteLoss(UserError, RuntimeError):
    """Too many non-finite steps in a row: training has diverged. The message says which settings to change."""
    exit_status = 1   # not 2: the flags and data were fine, the optimisation was not


def forward_loss(model, batch: Batch, ctx: Context) -> dict[str, torch.Tensor]:
    """The loss of a batch of a Loader (images normalised, and jittered in training, on the device)."""
    with ctx.autocast():
        score, geo = model(batch.image)
    return east_loss(score, geo, batch.score, batch.geo, batch.roi)  # outside autocast: float32


def optimizer_step(model, optimizer, ctx: Context, loss: torch.Tensor) -> torch.Tensor:
    """Step unless the loss or a gradient is not finite; returns the skip flag (device bool), no host sync."""
    bad = ~torch.isfinite(loss)
    if ctx.rt.world > 1:  # every rank must skip together
        flag = bad.float()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        bad = flag > 0
    params = [p for p in model.parameters() if p.grad is not None]
    if ctx.scaler.is_enabled():
        params[0].grad.add_(torch.where(bad, math.nan, 0.0))  # a NaN grad makes the scaler skip this step
        if ctx.cfg.clip_grad:
            ctx.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, ctx.cfg.clip_grad)
        ctx.scaler.step(optimizer)
        ctx.scaler.update()
    else:
        norm = (nn.utils.clip_grad_norm_(params, ctx.cfg.clip_grad) if ctx.cfg.clip_grad
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


def train_one_epoch(model, loader, optimizer, ctx: Context) -> tuple[dict, bool]:
    """The steps of epoch ctx.state.epoch not done yet: all of them, or in a run resumed inside the epoch those
    after the checkpoint's (the loader's sampler skips the others). Returns the epoch's mean losses and timings,
    and whether the epoch is complete."""
    model.train()
    cfg, state, accum = ctx.cfg, ctx.state, ctx.cfg.accum_steps
    first = state.epoch_micro
    n_micro = (len(loader) + first) // accum * accum  # the whole epoch's; no partial accumulation at its end
    if state.epoch_sums is None:  # loss sums over good steps, and their count; a resumed epoch's go on
        state.epoch_sums = torch.zeros(len(LOSS_KEYS) + 1, device=ctx.rt.device)
    window = torch.zeros_like(state.epoch_sums)
    acc = torch.zeros(len(LOSS_KEYS), device=ctx.rt.device)
    wait, steps, t0 = 0.0, 0, time.perf_counter()
    pace = Pace(t0, accum * cfg.batch_size * ctx.rt.world)
    optimizer.zero_grad(set_to_none=True)
    progress = Progress(n_micro // accum, "steps", quiet=ctx.rt.rank != 0, initial=first // accum,
                        desc=f"epoch {state.epoch + 1}/{cfg.epochs}")
    it, last_step = iter(loader), t0
    for i in range(first, n_micro):
        t = time.perf_counter()
        batch = next(it)
        wait += time.perf_counter() - t
        if ctx.first_batch is not None:
            ctx.first_batch(batch)
            ctx.first_batch = None
        last = (i + 1) % accum == 0
        sync = nullcontext() if last or ctx.rt.world == 1 else model.no_sync()
        with sync:
            parts = forward_loss(model, batch, ctx)
            ctx.scaler.scale(parts["loss"] / accum).backward()
        acc += torch.stack([parts[k].detach() for k in LOSS_KEYS]) / accum
        if not last:
            continue
        bad = optimizer_step(model, optimizer, ctx, acc[0])
        count_step(ctx, bad, acc, (state.epoch_sums, window))
        state.epoch_micro, steps = i + 1, steps + 1
        state.step_s, last_step = time.perf_counter() - last_step, time.perf_counter()
        progress.update(1)
        if ctx.on_step:
            ctx.on_step()
        if state.step % cfg.log_every == 0:
            log_window(window, ctx, optimizer, progress, lambda: pace.since(wait, steps))
        if should_stop(ctx):
            state.stopped = True
            break
        if cfg.save_every_steps and state.step % cfg.save_every_steps == 0 and i + 1 < n_micro and ctx.save:
            ctx.save()
    progress.close()
    if hasattr(it, "close"):
        it.close()  # a prefetch thread left mid-epoch stops now, not when the generator is collected
    if ctx.rt.device.type == "cuda":
        torch.cuda.synchronize(ctx.rt.device)  # the epoch's time must include the queued GPU work
    seconds = time.perf_counter() - t0
    check_bad_steps(ctx)
    stats = mean_losses(state.epoch_sums.clone(), ctx)
    n_samples = steps * accum * cfg.batch_size * ctx.rt.world
    return ({**stats, "steps": steps, "samples_per_s": n_samples / seconds, "data_wait": wait / seconds,
             "seconds": seconds}, state.epoch_micro == n_micro)


def count_step(ctx: Context, bad: torch.Tensor, acc: torch.Tensor, sums: tuple) -> None:
    """Add a step's losses to the running sums unless it was skipped; all on the device."""
    good = torch.cat((torch.where(bad, 0.0, acc), (~bad).float()[None]))
    for s in sums:
        s += good
    ctx.state.bad_run = (ctx.state.bad_run + 1) * bad
    ctx.state.bad_total += bad
    acc.zero_()
    ctx.state.step += 1


def should_stop(ctx: Context) -> bool:
    """--max-steps (or --profile's end), --time-limit or SIGINT / SIGTERM. --time-limit stops before a step that
    would end past it, the last step's time taken as the next one's, so that training stays within it (a step
    slower than the one before may still pass it by the difference). Under DDP the clock and the signal flag are
    read at log intervals only, the next check --log-every steps away, and agreed on by all ranks, so that no rank
    leaves while the others wait in a collective, and all of them save the same step."""
    state = ctx.state
    if state.step_limit is not None and state.step >= state.step_limit:
        return True
    ahead = state.step_s * (1 if ctx.rt.world == 1 else ctx.cfg.log_every)   # until the next check
    late = state.deadline is not None and time.perf_counter() + ahead >= state.deadline
    if ctx.rt.world == 1:
        return late or state.signal is not None
    if state.step % ctx.cfg.log_every:
        return False
    flag = torch.tensor(2.0 if state.signal is not None else float(late), device=ctx.rt.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() == 2.0 and state.signal is None:  # another rank was signalled: stop as it does
        state.signal = signal.SIGTERM
    return bool(flag)


def mean_losses(sums: torch.Tensor, ctx: Context) -> dict:
    """(loss sums..., count) on the device -> means, reduced over ranks; one host sync."""
    if ctx.rt.world > 1:
        dist.all_reduce(sums)
    return means(sums.tolist())


def means(v: list[float]) -> dict:
    """[loss sums..., count] -> {key: mean}; NaN when every step was skipped."""
    return {k: (v[j] / v[-1] if v[-1] else math.nan) for j, k in enumerate(LOSS_KEYS)}


class Pace:
    """Samples/s and the share of the time spent waiting for data since the previous log, read after the log's
    host sync (so the GPU work queued until then counts)."""

    def __init__(self, t0: float, samples_per_step: int):
        self.t, self.wait, self.steps, self.per_step = t0, 0.0, 0, samples_per_step

    def since(self, wait: float, steps: int) -> dict:
        now = time.perf_counter()
        dt = max(now - self.t, 1e-9)
        pace = {"samples_per_s": (steps - self.steps) * self.per_step / dt, "data_wait": (wait - self.wait) / dt}
        self.t, self.wait, self.steps = now, wait, steps
        return pace


def log_window(window: torch.Tensor, ctx: Context, optimizer, progress: Progress, pace=None) -> None:
    """The only per-interval host sync: mean losses of the last --log-every steps, and the bad-step check; pace()
    gives the interval's samples/s and data wait."""
    m = means(window.tolist())
    m.update(pace() if pace is not None else {})
    window.zero_()
    check_bad_steps(ctx)
    if ctx.rt.rank != 0:
        return
    progress.set_note(loss=f"{m['loss']:.4f}", skipped=int(ctx.state.bad_total))
    ctx.log({"event": "step", "epoch": ctx.state.epoch + 1, "step": ctx.state.step,
             "lr": optimizer.param_groups[0]["lr"], **m, "bad_steps": int(ctx.state.bad_total)})


def check_bad_steps(ctx: Context) -> None:
    run = int(ctx.state.bad_run)
    if run >= ctx.cfg.max_bad_steps:
        raise NonFiniteLoss(f"the loss or the gradients were not finite for {run} optimiser steps in a row "
                            f"(step {ctx.state.step}); try a lower --lr, --clip-grad 10, or --amp bf16 / off")


@torch.no_grad()
def validation_loss(model, loader, ctx: Context) -> dict:
    """{"val_loss", "val_cls", ...}: the loss's parts over the validation loader, each sample counted once,
    without jitter, on the same crops every time (epoch 0), so that epochs compare; reduced over the ranks."""
    model.eval()
    sums = torch.zeros(len(LOSS_KEYS) + 1, device=ctx.rt.device)
    loader.set_epoch(0)
    for batch in loader:
        parts = forward_loss(model, batch, ctx)
        n = parts["loss"].new_full((1,), len(batch.image))
        sums += torch.cat((torch.stack([parts[k] for k in LOSS_KEYS]) * n, n))
    return {f"val_{k}": v for k, v in mean_losses(sums, ctx).items()}

