"""Full-page validation: a model's predictions on the full validation images scored with the competition's rect
DetEval, the number that tracks the leaderboard (unlike crops, where a text-free crop scores perfectly).

Used every --eval-every epochs by training with --val-data ROOT --val-split SPLIT, and by --eval-only. Images
are predicted as predict.py does, at the training cache's image size; the ground truth's don't-care words follow
the training cache's word rules, so that scoring and training agree on which words count.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from east_cache.model.deteval import dataset_metrics
from east_cache.model.predict import Page, PredictConfig, predict
from east_cache.model.runtime import Runtime, sum_over_ranks
from east_cache.model.scoring import Words, score_image
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import ImageRecord, load_splits

METRIC = "rect"   # the headline metric: the competition scorer


@dataclass(frozen=True)
class ValPages:
    records: list[ImageRecord]   # the validation images with their words, under the training cache's word rules
    predict: PredictConfig       # how they are predicted: the training cache's image size and map scale


def val_pages(root: Path, split: str, cache_cfg: BuildConfig, batch_size: int) -> ValPages:
    """ROOT/ufo/{split}.json's images, ready to validate a model trained on a cache built with cache_cfg."""
    records, _ = load_splits([root], split, cache_cfg)
    return ValPages(records, PredictConfig(image_size=cache_cfg.image_size, map_scale=cache_cfg.map_scale,
                                           batch_size=batch_size))


def full_page_metrics(model, pages: ValPages, rt: Runtime) -> dict:
    """{"precision", "recall", "hmean", "detections", "eval_seconds"} of rect DetEval over the pages. Takes the
    bare model, not DDP's wrapper: under torchrun each rank predicts every world-th image and the counts are
    summed over the ranks, so every rank returns the same figures."""
    t0 = time.perf_counter()
    if isinstance(model, torch.nn.Module):
        model.eval()
    mine = pages.records[rt.rank::rt.world]
    results, _ = predict(model, [Page(r.name, r.path, r.width, r.height) for r in mine], pages.predict, rt.device,
                         progress=rt.rank == 0, desc="validate")
    counts = np.zeros(4)   # cared-for gts, kept detections, recall credits, precision credits
    for rec in mine:
        counts += score_image(Words.from_record(rec), Words.from_quads(results[rec.name][0]), METRIC)[:4]
    return {**dataset_metrics(sum_over_ranks(counts, rt)), "eval_seconds": time.perf_counter() - t0}
