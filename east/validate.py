"""Full-page validation: a model's predictions on the full validation images scored with the competition's rect
DetEval, the number that tracks the leaderboard (unlike crops, where a text-free crop scores perfectly).

Used every --eval-every epochs by training with --val-data ROOT --val-split SPLIT, and by --eval-only. The
ground truth's don't-care words follow the training cache's word rules, so that scoring and training agree.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from east.deteval_rect import ratios
from east.predict import Page, PredictConfig, predict
from east.scoring import Words, score_image
from preprocess.config import BuildConfig
from preprocess.ingest.ufo import ImageRecord, load_splits

METRIC = "rect"   # the headline metric: the competition scorer


def load_val_images(roots: list[Path], split: str, cfg: BuildConfig) -> list[ImageRecord]:
    """The validation images and their words under the training cache's word rules (ignore tags, areas)."""
    records, _ = load_splits(roots, split, cfg)
    return records


def full_page_metrics(model, records: list[ImageRecord], cfg: PredictConfig, device: torch.device,
                      rank: int = 0, world: int = 1) -> dict:
    """{"precision", "recall", "hmean", "detections", "eval_seconds"} of rect DetEval over records. The model
    is the bare one in eval mode; under torchrun each rank predicts every world-th image and the counts are
    summed over the ranks, so every rank returns the same figures."""
    t0 = time.perf_counter()
    mine = records[rank::world]
    pages = [Page(r.name, r.path, r.width, r.height) for r in mine]
    results, _ = predict(model, pages, cfg, device, progress=rank == 0, desc="validate")
    counts = np.zeros(4)   # cared-for gts, kept detections, recall credits, precision credits
    for rec in mine:
        counts += score_image(Words.from_record(rec), Words.from_quads(results[rec.name][0]), METRIC)[:4]
    if world > 1:
        total = torch.tensor(counts, device=device)
        dist.all_reduce(total)
        counts = total.cpu().numpy()
    n_gt, n_det, r_acc, p_acc = counts.tolist()
    precision, recall, hmean = ratios(r_acc, p_acc, round(n_gt), round(n_det))
    return {"precision": precision, "recall": recall, "hmean": hmean, "detections": round(n_det),
            "eval_seconds": time.perf_counter() - t0}
