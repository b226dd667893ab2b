"""bench_time_to_accuracy.py's pieces: the loaders of its three arms, and the one training loop they all run.

Every arm trains the same EAST from the same seed with the same optimiser (Adam), schedule (x0.1 at half the
epochs), jitter, batch size and number of samples, through train.py's epoch function
(east_cache.train.engine.train_one_epoch); only where each batch comes from differs:
  cache     train.py's loader over a cache built with the defaults (east_cache.train.train.read_by, run_loader): pages
            stored resized only (--geometry read), each epoch's height, rotation and crop of every page drawn and
            warped at read time by train.py's loader workers
  fly       east_cache.reader.onthefly.OnTheFlyDataset(fresh=True) in DataLoader workers: make_sample, this
            project's own decode -> one warp -> fast targets, a new draw per image per epoch from the same
            distributions (height, rotation, the word-balanced crop rule of east_cache/sample/crop_draw.py)
  baseline  the slow way a common baseline does it, in DataLoader workers: PIL decode, resize, height jitter,
            rotate, crop retry loop, per-word Python targets (benchmarks/bench_sample.py baseline_sample)
After every --eval-every epochs the model predicts the held-out pages whole and they are scored with the
competition's rect DetEval (east_cache.train.validate.full_page_metrics, as train.py --val-data does).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from bench_sample import baseline_sample
from torch.utils.data import DataLoader, Dataset, RandomSampler

from east_cache.augment import given as augment_given
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import load_splits
from east_cache.train.checkpoint import run_augment
from east_cache.train.config import TrainConfig
from east_cache.train.engine import forward_loss, new_context, optimizer_step, train_one_epoch
from east_cache.model.model import EAST
from east_cache.predict.device import Runtime
from east_cache.train.train import open_run_cache, read_by, run_loader
from east_cache.train.validate import full_page_metrics
from east_cache.reader.collate import collate
from east_cache.reader.images import prepare_images
from east_cache.reader.loader import Batch
from east_cache.reader.onthefly import OnTheFlyDataset


@dataclass(frozen=True)
class Schedule:
    epochs: int          # epochs of len(train set) samples; the lr drops x0.1 after half of them
    eval_every: int      # epochs between held-out evaluations (and after the last)
    batch_size: int
    lr: float
    seed: int
    amp: str             # fp16 on CUDA, off on a CPU (train.py refuses fp16 there)
    time_limit: float    # s of training per arm: no step that would pass it is taken, then an evaluation (0: none)


class BaselineDataset(Dataset):
    """bench_sample.baseline_sample per image and epoch, as the fields a crop cache's record has."""

    def __init__(self, root, config: BuildConfig, seed: int):
        self.records, _ = load_splits([root], "train", config)
        self.config, self.seed, self.epoch = config, seed, 0

    def __len__(self) -> int:
        return len(self.records)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, self.epoch, i])
        crop, (score, geo, roi) = baseline_sample(self.records[i], self.config, rng)
        return {"image": np.ascontiguousarray(crop), "score": score[None], "geo": geo, "roi": roi[None]}


class EpochLoader:
    """Batches of a map-style dataset made in DataLoader workers (started anew every epoch, so that they see its
    set_epoch), shuffled from (seed, epoch), the short last batch dropped as train.py's loader drops it; on the
    device as train.py's Loader hands them over: images normalised and jittered there."""

    def __init__(self, ds, batch_size: int, workers: int, device: torch.device, seed: int, jitter: float):
        self.ds, self.batch_size, self.workers, self.device = ds, batch_size, workers, device
        self.seed, self.jitter, self.generator = seed, jitter, torch.Generator()

    def __len__(self) -> int:
        return len(self.ds) // self.batch_size

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.ds.set_epoch(epoch)
        self.generator.manual_seed(self.seed * 100_003 + epoch)

    def __iter__(self):
        cuda = self.device.type == "cuda"
        loader = DataLoader(self.ds, self.batch_size, sampler=RandomSampler(self.ds, generator=self.generator),
                            num_workers=self.workers, collate_fn=collate, pin_memory=cuda, drop_last=True)
        for b in loader:
            image = prepare_images(b["image"].to(self.device, non_blocking=True), self.jitter)
            yield Batch(image, *(b[k].to(self.device, non_blocking=True).float() for k in ("score", "geo", "roi")))

    def close(self) -> None:
        pass


def make_loader(arm: str, data, cache, config: BuildConfig, s: Schedule, workers: int | None,
                device: torch.device):
    """The arm's training loader; workers None: as train.py picks them for the cache arm, every core for the
    others (whose workers make whole samples). The cache arm's is made by train.py's own calls: the run's Augment
    (no flags: the cache's height jitter, rotation and crop size, drawn at read time from pages stored resized only,
    the default) set by read_by, then run_loader."""
    jitter = TrainConfig().jitter
    if arm == "cache":
        cfg, rt = TrainConfig(cache=cache, batch_size=s.batch_size, workers=workers, seed=s.seed), Runtime(device)
        ds = open_run_cache(cfg, rt, cache)
        read_by(ds, None, run_augment(augment_given(cfg), ds))
        return run_loader(cfg, rt, ds, True)
    n = workers if workers is not None else max(1, torch.multiprocessing.cpu_count())
    ds = (OnTheFlyDataset([data], "train", replace(config, crop="build"), fresh=True)
          if arm == "fly" else BaselineDataset(data, config, s.seed))
    return EpochLoader(ds, s.batch_size, n, device, s.seed, jitter)


WARM_UP_STEPS = 3   # training steps of a throwaway model before the first arm


def warm_up(map_scale: float, s: Schedule, input_size: int, device: torch.device) -> None:
    """A few training steps of a throwaway model on a random batch of the arms' shape, before any arm: the CUDA
    context, cuBLAS's handles and cuDNN's kernel choice (benchmark mode, as train.py sets it) are then paid once,
    not in the training seconds of whichever arm runs first."""
    model = EAST(map_scale).to(device, memory_format=torch.channels_last)
    ctx = new_context(TrainConfig(batch_size=s.batch_size, amp=s.amp, epochs=1, lr=s.lr), Runtime(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, fused=ctx.fused)
    m, b = round(input_size * map_scale), s.batch_size
    batch = Batch(torch.randn(b, 3, input_size, input_size, device=device), torch.ones(b, 1, m, m, device=device),
                  torch.ones(b, 5, m, m, device=device), torch.ones(b, 1, m, m, device=device))
    model.train()
    for _ in range(WARM_UP_STEPS):
        parts = forward_loss(model, batch, ctx)
        ctx.scaler.scale(parts["loss"]).backward()
        optimizer_step(model, optimizer, ctx, parts["loss"])
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_arm(loader, map_scale: float, s: Schedule, pages, device: torch.device, say=print,
              points: list | None = None) -> list[dict]:
    """Train as train.py does (seed, model, Adam, MultiStepLR, train_one_epoch) and evaluate; one point per
    evaluation: {"samples", "seconds" (training wall time so far, evaluations excluded), "hmean", ...}, appended to
    `points` as they come (so that an arm cut short by a KeyboardInterrupt keeps those it made)."""
    points = [] if points is None else points
    torch.manual_seed(s.seed)
    model = EAST(map_scale).to(device, memory_format=torch.channels_last)
    rt = Runtime(device)
    ctx = new_context(TrainConfig(batch_size=s.batch_size, amp=s.amp, epochs=s.epochs, lr=s.lr, seed=s.seed), rt)
    ctx.log = lambda record: None
    optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, fused=ctx.fused)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [max(1, s.epochs // 2)], gamma=0.1)
    seconds, samples = 0.0, 0
    for epoch in range(s.epochs):
        loader.set_epoch(epoch)
        if s.time_limit:   # train.py's --time-limit: no step that would pass it is taken; the epoch ends, the arm
            ctx.state.deadline = time.perf_counter() + s.time_limit - seconds
        stats, _ = train_one_epoch(model, loader, optimizer, ctx)
        scheduler.step()
        seconds += stats["seconds"]
        samples += stats["steps"] * s.batch_size
        over = ctx.state.stopped or (s.time_limit and seconds >= s.time_limit)
        if (epoch + 1) % s.eval_every == 0 or epoch + 1 == s.epochs or over:
            m = full_page_metrics(model, pages, rt)
            points.append({"epoch": epoch + 1, "samples": samples, "seconds": seconds, "loss": stats["loss"],
                           **{k: m[k] for k in ("precision", "recall", "hmean")}})
            say(f"  {samples} samples, {seconds:.0f} s: loss {stats['loss']:.3f}, hmean {m['hmean']:.3f}")
        if over:
            break
    return points


def curve_rows(curves: dict[str, list[dict]]) -> list[list[str]]:
    return [[arm, str(p["samples"]), f"{p['hmean']:.3f}", f"{p['precision']:.3f}", f"{p['recall']:.3f}",
             f"{p['loss']:.3f}", f"{p['seconds']:.1f}"] for arm, points in curves.items() for p in points]


def ratio_rows(curves: dict[str, list[dict]], reference: str = "cache") -> list[list[str]]:
    """At each sample count the reference arm was evaluated at: each arm's hmean, and its training wall time over
    the reference's ("-" where an arm was not evaluated at that count: stopped earlier by its time limit)."""
    at = {arm: {p["samples"]: p for p in points} for arm, points in curves.items()}
    counts = sorted(at.get(reference, {}) or set.union(*(set(v) for v in at.values())))
    rows = []
    for n in counts:
        ref = at.get(reference, {}).get(n, {}).get("seconds", math.nan)
        hmeans = [f"{at[arm][n]['hmean']:.3f}" if n in at[arm] else "-" for arm in curves]
        times = [f"{at[arm][n]['seconds']:.1f}" + (f" ({at[arm][n]['seconds'] / ref:.2f}x)" if ref > 0 else "")
                 if n in at[arm] else "-" for arm in curves]
        rows.append([str(n), *hmeans, *times])
    return rows


def same_hmean_rows(curves: dict[str, list[dict]], reference: str = "cache") -> tuple[float | None, list[list[str]]]:
    """(the target, rows): the highest hmean every arm reached (the lowest of the arms' best), and for each arm the
    first evaluation that reached it: samples seen, training seconds, and those seconds over the reference arm's
    (the wall-time ratio to the same hmean). (None, []) when an arm has no point or none is above 0."""
    if not curves or not all(curves.values()):
        return None, []
    target = min(max(p["hmean"] for p in points) for points in curves.values())
    if target <= 0:
        return None, []
    first = {arm: next(p for p in points if p["hmean"] >= target) for arm, points in curves.items()}
    ref = first.get(reference, {}).get("seconds")
    return target, [[arm, f"{p['hmean']:.3f}", str(p["samples"]), f"{p['seconds']:.1f}",
                     f"{p['seconds'] / ref:.2f}x" if ref else "-"] for arm, p in first.items()]
