"""Detection metrics during training and --eval-only: a model's maps decoded into quads (east_cache.model.decode) and
scored against the words stored in a cache with DetEval (east_cache.model.deteval)."""
from __future__ import annotations

import time

import numpy as np
import torch

from east_cache.reader import CacheDataset, collate
from east_cache.reader.expand import batch_images
from east_cache.model.model import prepare_images
from east_cache.model.decode import decode_maps
from east_cache.model.deteval import dataset_metrics, evaluate_image, gt_quads
from east_cache.model.engine import Context
from east_cache.model.model import EAST
from east_cache.model.runtime import sum_over_ranks


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

