"""`east-cache bench`'s second table: train.py's reading beside a training loop of your own, in the same run.

Both read through the public east_cache.Loader; what differs is how each is made. train.py's is made by its own
code (`training_loader`, handed in by the command: inspect/ does not import the model side), as
`train.py --cache CACHE --batch-size B --workers W --device D` makes it. Yours is made the way a script beside
your own dataset.py would: `Loader(CACHE, batch_size=B, workers=W, device=D, jitter=J)` from the path, with
train.py's colour jitter J, so that both do the same work per batch (without it yours skips the jitter, which
on a CPU device costs more than the reading). A pass reads epochs in turn until it has its batches; a batch
counts once it is on the device as a step takes it (crops cut, maps rebuilt, images jittered and normalised).
The two are timed in turns, A B B A, after a first epoch of each (worker start-up), so that a drift of the
machine falls on both alike; each figure is the crops of its two passes over their seconds.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from east_cache.inspect.bench import table
from east_cache.reader.loader import Loader

TURNS = "ABBA"      # A: train.py's loader, B: your own loop's
SECONDS = 2.0       # length of a timed pass when no batch count is given, and
MIN_BATCHES = 8     # its fewest batches (a CPU device's colour jitter makes a batch slow: too few to compare)


def loop_pass(loader: Loader, batches: int | None, device: torch.device) -> tuple[int, float]:
    """(batches read, seconds) over epochs of loader: `batches` of them, or as many as fit in about SECONDS (at
    least MIN_BATCHES)."""
    n, t0 = 0, time.perf_counter()
    while True:
        epoch = iter(loader)
        for _ in epoch:
            n += 1
            if n == batches or (not batches and n >= MIN_BATCHES and time.perf_counter() - t0 >= SECONDS):
                epoch.close()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                return n, time.perf_counter() - t0


def compare(cache, workers: int, batch: int, batches: int | None, device: torch.device,
            training_loader: Callable[..., Loader]) -> tuple[float, float]:
    """(train.py's crops/s, your own loop's crops/s) of one setting."""
    ours = training_loader(cache, batch, workers, device)
    loaders = {"A": ours, "B": Loader(cache, batch_size=batch, workers=workers, device=device, jitter=ours.jitter,
                                      augment=ours.dataset.aug)}
    try:
        for loader in loaders.values():   # start the workers, fault the files in
            for _ in loader:
                pass
        read = {k: [0, 0.0] for k in loaders}
        for k in TURNS:
            n, secs = loop_pass(loaders[k], batches, device)
            read[k][0] += n
            read[k][1] += secs
    finally:
        for loader in loaders.values():
            loader.close()
    return tuple(n * batch / secs for n, secs in (read["A"], read["B"]))


def loops_report(cache, workers: list[int], batch_sizes: list[int], batches: int | None, device: str | None,
                 training_loader: Callable[..., Loader]) -> str:
    """The side-by-side table, with what each row reads; device None: CUDA where there is one, as train.py."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for b in batch_sizes:
        for w in workers:
            ours, yours = compare(cache, w, b, batches, device, training_loader)
            rows.append([w, b, f"{ours:.1f}", f"{yours:.1f}", f"{yours / ours:.2f}"])
    return "\n".join([
        f"train.py's reading beside your own loop, device {device}: train.py's loader as `train.py --cache CACHE "
        f"--batch-size B --workers W --device {device}` builds it; your own loop's as `east_cache.Loader(CACHE, "
        f"batch_size=B, workers=W, device=\"{device}\", jitter=J)`, J train.py's colour jitter. A batch counts once "
        f"it is as a step takes it (maps rebuilt, images jittered and normalised, on the device). Timed in turns "
        f"{' '.join(TURNS)} (A train.py, B yours), {f'{batches} batches' if batches else f'about {SECONDS:.0f} s'} "
        f"a pass.", "",
        table(["workers", "batch", "train.py crops/s", "own loop crops/s", "own / train.py"], rows)])
