"""The build's worker pool: joblib (loky processes, or a dask cluster), started so that Ctrl-C ends it cleanly.

Ctrl-C reaches every process of the terminal's group. Workers ignore it (worker.init_worker, and SIGINT is
ignored while loky starts them, which a process keeps from its first instruction); the build stops them
itself by closing joblib's generator, which cancels queued tasks, before anyone removes the files they write.
"""
from __future__ import annotations

import os
import signal
import threading
import warnings
from contextlib import contextmanager, nullcontext

from joblib import Parallel, delayed, parallel_config

from east_cache.config import BuildConfig
from east_cache.store.formats import get_format
from east_cache.build.plan import Plan
from east_cache.build.worker import init_worker, write_rows

TASKS_PER_CALL = 4   # rows per joblib call: amortises dispatch without starving workers on small builds


@contextmanager
def running(cfg: BuildConfig, plan: Plan, jobs, skip_bad: bool, backend):
    """joblib's generator of finished batches. Leaving, on an error or Ctrl-C too, closes it: queued tasks are
    cancelled and the workers stopped before anyone removes the files they write."""
    local = backend in (None, "loky")
    workers = {"initializer": init_worker, "initargs": (os.getpid(),)} if local else {}
    with parallel_config(backend=backend) if backend else nullcontext():
        with _sigint_ignored() if local and jobs != 1 else nullcontext():
            results = Parallel(n_jobs=jobs, return_as="generator_unordered", **workers)(
                _calls(cfg, plan, skip_bad, shared=not local))
        with warnings.catch_warnings():
            # joblib warns that it cancelled the queued tasks: on an error that is the point.
            warnings.filterwarnings("ignore", message=".*still being processed by the workers have been cancelled")
            try:
                yield results
            finally:
                results.close()


@contextmanager
def _sigint_ignored():
    """While loky starts the workers: a process started with SIGINT ignored keeps it ignored from its first
    instruction (init_worker covers workers started later, from the moment it runs). A Ctrl-C in this
    fraction of a second is lost; the next one works."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _calls(cfg: BuildConfig, plan: Plan, skip_bad: bool, shared: bool = True) -> list:
    """joblib calls: a few rows each where a format fills files in place; one whole file each where it writes a
    file in one piece (zarr shards), so that no two workers ever write the same file. shared: the workers may run on
    other machines (worker.write_rows)."""
    if get_format(plan.file_format).whole_file:
        by_file: dict[int, list] = {}
        for t in plan.tasks:
            by_file.setdefault(t.file, []).append(t)
        groups = list(by_file.values())
    else:
        groups = [plan.tasks[k:k + TASKS_PER_CALL] for k in range(0, len(plan.tasks), TASKS_PER_CALL)]
    return [delayed(write_rows)(cfg, tasks, skip_bad, plan.file_format, shared) for tasks in groups]


