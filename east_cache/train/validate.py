"""A model's detection metrics: its maps decoded into quads (east_cache.model.decode) and scored with DetEval,
during training every --eval-every epochs and for one checkpoint with --eval-only.

Two sources of ground truth: the words stored in a cache (its crops, polygon DetEval: east_cache.evaluate.deteval),
and with --val-data ROOT --val-split SPLIT the full validation images, predicted as east-predict does at the
training cache's image size and scored with the competition's rect DetEval, the number that tracks the
leaderboard (a text-free crop scores perfectly; a full page does not). The full pages' don't-care words follow the
training cache's word rules, so that scoring and training agree on which words count.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from east_cache.augment import Augment
from east_cache.reader import CacheDataset, collate
from east_cache.reader.expand import batch_images
from east_cache.train.checkpoint import check_fits_cache, trained_size
from east_cache.train.config import TrainConfig
from east_cache.model.decode import decode_maps
from east_cache.evaluate.deteval import dataset_metrics, evaluate_image, gt_quads
from east_cache.train.engine import Context, new_context
from east_cache.model.model import EAST
from east_cache.reader.images import prepare_images
from east_cache.predict.pages import Page
from east_cache.predict.predict import PredictConfig, predict
from east_cache.predict.weights import inference_model, load_checkpoint
from east_cache.train.runtime import jsonl_writer, sum_over_ranks
from east_cache.predict.device import Runtime
from east_cache.evaluate.scoring import Words, score_image
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import ImageRecord, find_split, load_splits
from east_cache.reader.loader import open_cache

FULL_PAGE_METRIC = "rect"   # the headline metric on full pages: the competition scorer


# ---------------------------------------------------------------- on a cache's crops

@torch.no_grad()
def detect(model: EAST, image: torch.Tensor, map_scale: float, ctx: Context) -> list[np.ndarray]:
    """Quads (K, 4, 2) in input px for each uint8 image of a batch (B, 3, H, W): one forward on the device,
    one copy of the maps to the host, decoding on the CPU."""
    x = prepare_images(image.to(ctx.rt.device, non_blocking=True), 0.0)
    with ctx.autocast():
        score, geo = model(x)
    score, geo = score.float().cpu().numpy(), geo.float().cpu().numpy()
    return [decode_maps(s, g, map_scale)[0] for s, g in zip(score, geo)]


def detection_metrics(model: EAST, ds: CacheDataset, ctx: Context) -> dict:
    """DetEval precision, recall and hmean of the decoded predictions against the words stored in ds, and the
    number of detections it counted (not on a don't-care word; 0 while no score passes decode's threshold).

    Reads epoch 0's variants, the samples of the validation loss, so that epochs compare. Takes the bare
    model, not DDP's wrapper: each rank runs its own share of the images (every world-th, no padding), so the
    ranks' forward counts differ; their DetEval counts are summed at the end.
    """
    model.eval()
    ds.set_epoch(0)
    mine = range(ctx.rt.rank, len(ds), ctx.rt.world)
    counts = np.zeros(4)  # care gts, kept detections, recall credits, precision credits
    t0 = time.perf_counter()
    for start in range(0, len(mine), ctx.cfg.batch_size):
        idx = list(mine[start:start + ctx.cfg.batch_size])
        dets = detect(model, batch_images(collate(ds.__getitems__(idx))), ds.config.map_scale, ctx)
        for i, det in zip(idx, dets):
            counts += evaluate_image(*gt_quads(*ds.quads(i)), det)[:4]
    return {**dataset_metrics(sum_over_ranks(counts, ctx.rt)), "eval_seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- on full pages

@dataclass(frozen=True)
class ValPages:
    records: list[ImageRecord]   # the validation images with their words, under the training cache's word rules
    predict: PredictConfig       # how they are predicted: the training cache's image size and map scale


def val_pages(root: Path, split: str, cache_cfg: BuildConfig, batch_size: int) -> ValPages:
    """ROOT/ufo/{split}.json's images, ready to validate a model trained on a cache built with cache_cfg."""
    find_split(root, split, "--val-data", "--val-split")   # a missing split is named with those there
    records, _ = load_splits([root], split, cache_cfg)
    return ValPages(records, PredictConfig(image_size=cache_cfg.image_size, map_scale=cache_cfg.map_scale,
                                           batch_size=batch_size))


def full_page_metrics(model, pages: ValPages, rt: Runtime, seen=None) -> dict:
    """{"precision", "recall", "hmean", "detections", "eval_seconds"} of rect DetEval over the pages. Takes the
    bare model, not DDP's wrapper: under torchrun each rank predicts every world-th image and the counts are
    summed over the ranks, so every rank returns the same figures. seen(record, found Words, scores, ImageCounts),
    when given, is called for each of this rank's images (the reported worst pages)."""
    t0 = time.perf_counter()
    if isinstance(model, torch.nn.Module):
        model.eval()
    mine = pages.records[rt.rank::rt.world]
    results, _ = predict(model, [Page(r.name, r.path, r.width, r.height) for r in mine], pages.predict, rt.device,
                         progress=rt.rank == 0, desc="validate")
    counts = np.zeros(4)   # cared-for gts, kept detections, recall credits, precision credits
    for rec in mine:
        found = Words.from_quads(results[rec.name][0])
        image_counts = score_image(Words.from_record(rec), found, FULL_PAGE_METRIC)
        counts += image_counts[:4]
        if seen is not None:
            seen(rec, found, results[rec.name][1], image_counts)
    return {**dataset_metrics(sum_over_ranks(counts, rt)), "eval_seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- --eval-only

def evaluate_checkpoint(cfg: TrainConfig, rt: Runtime, checkpoint) -> None:
    """--eval-only: detection metrics of the checkpoint on --val-data's full images (rect DetEval, as training
    logs them), else on --val-cache, or --cache when there is none; printed and appended to OUT/eval.jsonl (OUT:
    the checkpoint's folder unless --out is given)."""
    ck = load_checkpoint(checkpoint)
    model = inference_model(ck, checkpoint, rt.device)
    if cfg.val_data:
        pages = val_pages(cfg.val_data, cfg.val_split, BuildConfig.from_dict(ck["config"]), cfg.batch_size)
        metrics = full_page_metrics(model, pages, rt)
        source, n, on = {"data": str(cfg.val_data), "split": cfg.val_split}, len(pages.records), \
            f"{cfg.val_data} ({cfg.val_split}, full images, rect DetEval)"
    else:
        cache = cfg.val_cache or cfg.cache
        ds = open_cache(cache, cfg.rebuild, rt.rank, rt.world, cfg.local_cache, cfg.local_cache_limit)
        if ds.pages and ds.config.warps_at_read:   # read at the crop side the checkpoint was trained on
            ds.augment = Augment.of_cache(ds.config, input_size=trained_size(ck))
        ds.augment = False   # a validation read draws no geometry: the same crops as training's validation loss
        check_fits_cache(ck, checkpoint, ds)
        metrics = detection_metrics(model, ds, new_context(cfg, rt))
        source, n, on = {"cache": str(cache)}, len(ds), str(cache)
    if rt.rank != 0:
        return
    cfg.out.mkdir(parents=True, exist_ok=True)
    log = cfg.out / "eval.jsonl"
    where = f"epoch {ck['epoch']}" + ("" if ck.get("complete", True) else f", step {ck['step']}, inside it")
    jsonl_writer(log)({"event": "eval", "checkpoint": str(checkpoint), "epoch": ck["epoch"], "step": ck["step"],
                       **source, "images": n, **metrics})
    print(f"{checkpoint} ({where}) on {on}, {n} images: precision {metrics['precision']:.4f}, "
          f"recall {metrics['recall']:.4f}, hmean {metrics['hmean']:.4f}; appended to {log}", flush=True)
