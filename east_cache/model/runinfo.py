"""What a run says about itself: the lines printed when it starts (the effective settings, nothing implied),
the header record that opens its part of log.jsonl, the command that continues it, and why a resumed run has
nothing left to do."""
from __future__ import annotations

import functools
import importlib.metadata
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

from east_cache.reader import CacheDataset
from east_cache.reader.loader import describe_reading, loader_workers
from east_cache.model.config import RunState, TrainConfig
from east_cache.model.runtime import Runtime
from east_cache.errors import UsageError
from east_cache.store.fingerprint import code_hash

INTERRUPTED = 130  # exit status of a run stopped by SIGINT / SIGTERM: 128 + SIGINT, as shells report Ctrl-C


def started_lines(cfg: TrainConfig, rt: Runtime, ds: CacheDataset, origin: str, state: RunState,
                  steps_per_epoch: int) -> list[str]:
    c, procs = ds.config, f"{rt.world} processes" if rt.world > 1 else "1 process"
    val = f"validation cache {cfg.val_cache}" if cfg.val_cache else "no validation cache (--val-cache)"
    if cfg.val_data:
        val += f"; validation images {cfg.val_data} ({cfg.val_split} split, full pages)"
    if cfg.resume:
        where = (f"inside epoch {state.epoch + 1}, {state.epoch_micro // cfg.accum_steps} of its steps done"
                 if state.epoch_micro else f"after epoch {state.epoch}")
        origin = f"{origin}: step {state.step}, {where}"
    steps = f" and every {cfg.save_every_steps} steps" if cfg.save_every_steps else ""
    saves = f"a checkpoint every {cfg.save_every} epoch(s){steps}"
    return [(f"device {rt.device} ({procs}); batch {cfg.batch_size} per process, {cfg.accum_steps} per step; "
             f"input {c.input_size} px, maps at x{c.map_scale}; amp {cfg.amp}"),
            (f"cache {cfg.cache}: {len(ds)} images, {c.variants} variant(s), "
             f"{describe_reading(loader_workers(ds, rt.device, rt.world, cfg.workers))}; {val}"),
            f"weights: {origin}",
            describe_length(cfg, state, steps_per_epoch),
            f"output: {cfg.out} (log.jsonl, {saves})"]


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


def nothing_left(cfg: TrainConfig, state: RunState) -> None:
    """A resumed run whose epochs or steps are all done already stops here, saying how to go on."""
    if state.epoch >= cfg.epochs:
        raise UsageError(f"{cfg.resume} has {state.epoch} epoch(s) done and --epochs is {cfg.epochs}: nothing left "
                         f"to train. To train on, pass a larger --epochs, e.g. --epochs {state.epoch + cfg.epochs}")
    if state.step_limit is not None and state.step >= state.step_limit:
        why = "the check run's limit without a GPU" if cfg.check_run else "--max-steps"
        raise UsageError(f"{cfg.resume} is at step {state.step} and {why} is {state.step_limit}: nothing left to "
                         f"train. To train on, pass a larger --max-steps, e.g. --max-steps {2 * state.step}"
                         + (", or --epochs N" if cfg.check_run else ""))


def resume_command(argv: list[str], checkpoint: Path, world: int, drop: tuple[str, ...] = ()) -> str:
    """The command that was run, with --resume CHECKPOINT in place of any --resume it had, and without the
    options in `drop` (each takes a value)."""
    drop, kept, skip = ("--resume", *drop), [], False
    for a in argv:
        if skip or a.startswith(tuple(f"{d}=" for d in drop)):
            skip = False
            continue
        skip = a in drop
        if not skip:
            kept.append(a)
    head = ["torchrun", f"--nproc_per_node={world}", sys.argv[0]] if world > 1 else invoked_as()
    return shlex.join([*head, *kept, "--resume", str(checkpoint)])


def invoked_as() -> list[str]:
    """How this process was started, as a user would type it: python train.py, python -m east_cache.model.cli, east-train."""
    prog = sys.argv[0]
    if Path(prog).name == "train.py":
        return ["python", prog]
    return ["python", "-m", "east_cache.model.cli"] if Path(prog).name == "cli.py" else ["east-train"]


def run_header(cfg: TrainConfig, rt: Runtime, argv: list[str], ds: CacheDataset, val: CacheDataset | None,
               origin: str) -> dict:
    """The record that starts a run's lines in log.jsonl: several runs (resumes) append to one file."""
    return {"event": "run", "time": datetime.now(UTC).isoformat(timespec="seconds"), "argv": argv,
            "config": cfg.to_dict(), "code_version": code_version(), "device": str(rt.device), "world": rt.world,
            "cache": str(cfg.cache), "cache_fingerprint": ds.fingerprint,
            "val_cache_fingerprint": val.fingerprint if val is not None else None, "weights": origin}


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """The installed package's version and a hash of the training code's syntax (east/*.py): two runs with the
    same hash ran the same code, whatever the version says."""
    try:
        version = importlib.metadata.version("east-cache")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    sources = [p.read_text() for p in sorted(Path(__file__).parent.glob("*.py"))]
    return {"package": version, "east": code_hash(sources)}
