"""What a training run does around its steps and records: the process group's sums and leaving it, signals, the
profiler, and log.jsonl (a writer, and the header record each run appends first). The device and the process group
a run joins are east_cache/predict/device.py's (Runtime, setup_device)."""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import signal
import socket
import threading
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from east_cache.atomic import Appender, replacing
from east_cache.reader import CacheDataset
from east_cache.train.config import RunState, TrainConfig
from east_cache.predict.device import Runtime
from east_cache.build.fingerprint import code_hash

def sum_over_ranks(values: np.ndarray, rt: Runtime) -> np.ndarray:
    """values summed over the ranks of a multi-process run (every rank gets the sums); as they are in one."""
    if rt.world == 1:
        return values
    total = torch.tensor(values, device=rt.device)
    dist.all_reduce(total)
    return total.cpu().numpy()


def leave_group(rt: Runtime) -> None:
    if rt.world > 1:
        dist.destroy_process_group()


@contextmanager
def stop_on_signals(state: RunState, rt: Runtime):
    """While training: SIGINT (Ctrl-C) or SIGTERM asks the run to stop at the next step boundary and save
    (state.signal); a second Ctrl-C stops at once, unsaved (KeyboardInterrupt). Outside the main thread, where
    Python cannot take signals, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ask_to_stop(signum, frame) -> None:
        if state.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        state.signal = signum
        if rt.rank == 0:  # os.write: print() could be interrupted inside a print of the main thread
            os.write(2, f"\n{signal.Signals(signum).name}: stopping after this step and saving a checkpoint "
                        f"(Ctrl-C again stops at once, unsaved)\n".encode())
    previous = {s: signal.signal(s, ask_to_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def failure_recorded(log, state: RunState, report=None):
    """An error inside ends the run's records with an `end` record (reason failed, the error's type) and its
    trackers' runs (report: east_cache.train.report.Reporting) as failed; the error itself goes up."""
    try:
        yield
    except BaseException as e:
        if log:
            log({"event": "end", "reason": "failed", "error": type(e).__name__, "step": state.step, "time": now()})
        if report:
            report.finish(status=1)
        raise


def jsonl_writer(path: Path):
    """A writer of records appended to a log of the run's own (log.jsonl, eval.jsonl), one line each, through the
    door's Appender: a link at path is replaced by a copy of its own before the first record, never written through."""
    append = Appender(path, "--out")

    def write(record: dict) -> None:
        append(json.dumps(record) + "\n")
    return write


def run_header(cfg: TrainConfig, rt: Runtime, argv: list[str], ds: CacheDataset, val: CacheDataset | None,
               origin: str) -> dict:
    """The record that starts a run's lines in log.jsonl: several runs (resumes) append to one file. It holds the
    run's whole recipe (east_cache.tools.run_recipe reads it: `east-cache runs`, --report-to), and the host and
    process id, by which `runs` tells a run still going from one that died without its `end` record."""
    return {"event": "run", "time": now(), "argv": argv,
            "config": cfg.to_dict(), "code_version": code_version(), "device": str(rt.device), "world": rt.world,
            "cache": str(cfg.cache), "cache_fingerprint": ds.fingerprint, "cache_config": ds.config.to_dict(),
            "val_cache_fingerprint": val.fingerprint if val is not None else None, "weights": origin,
            "host": socket.gethostname(), "pid": os.getpid()}


def now() -> str:
    """The wall-clock time of a log record, UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """The installed package's version and a hash of the training code's syntax (the model, predict and train rooms'
    *.py: EAST, what predicts with it during validation, the loop): two runs with the same hash ran the same code,
    whatever the version says."""
    try:
        version = importlib.metadata.version("east-cache")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    root = Path(__file__).parents[1]
    sources = [p.read_text() for room in ("model", "predict", "train") for p in sorted((root / room).glob("*.py"))]
    return {"package": version, "east": code_hash(sources)}


def profiler(steps: int, out: Path, device: torch.device, say):
    """--profile N: record N steps after one warm-up step, write a Chrome trace and print the top ops.
    CUDA activity only when the run is on CUDA: a --device cpu run on a GPU machine has no kernels to trace."""
    cuda = device.type == "cuda"
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"

    def ready(p) -> None:
        with replacing(out / "profile_trace.json", flag="--out") as tmp:
            p.export_chrome_trace(str(tmp))
        say(p.key_averages().table(sort_by=sort, row_limit=15))
        say(f"trace: {out / 'profile_trace.json'}")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                   on_trace_ready=ready)
