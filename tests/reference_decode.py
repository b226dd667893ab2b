"""The map decoding this project used before its merge and NMS were vectorised over runs and pairs
(east_cache/model/decode.py): locality-aware merging walked one run at a time (a run's next candidates tested
together, by prefix sums), then standard NMS compared each kept quad with the rest. Kept as the reference the
vectorised decode must equal, and as the "before" of benchmarks/bench_gpu.py's prediction arm.
"""
from __future__ import annotations

import numpy as np

from east_cache.evaluate.overlap import MIN_AREA, pairwise_iou
from east_cache.model.decode import NMS_THRESH, SCORE_THRESH, restore_quads


def signed_area(poly):
    nxt = poly[..., [1, 2, 3, 0], :]
    return 0.5 * np.sum(poly[..., 0] * nxt[..., 1] - nxt[..., 0] * poly[..., 1], axis=-1)


def iou_bounds(a, b):
    """(lower, upper) bounds of IoU(a[k], b[k]), with numpy's reductions over the corners."""
    area_a, area_b = np.abs(signed_area(a)), np.abs(signed_area(b))
    box = np.clip(np.minimum(a.max(axis=1), b.max(axis=1)) - np.maximum(a.min(axis=1), b.min(axis=1)), 0, None)
    delta = np.sqrt(((a - b) ** 2).sum(axis=-1).max(axis=-1))
    perimeter = np.sqrt(((a - a[:, [1, 2, 3, 0]]) ** 2).sum(axis=-1)).sum(axis=-1)
    ok = (area_a > MIN_AREA) & (area_b > MIN_AREA)
    union = np.where(ok, area_a + area_b, 1.0)
    lo = np.clip(area_a - perimeter * delta, 0, None)
    hi = np.minimum(np.minimum(box[:, 0] * box[:, 1], area_a), area_b)
    return np.where(ok, lo / (union - lo), 0.0), np.where(ok, hi / (union - hi), 0.0)


def iou_above(a, b, thresh):
    lo, hi = iou_bounds(a, b)
    yes = lo > thresh
    unsure = np.flatnonzero(~yes & (hi > thresh))
    yes[unsure] = pairwise_iou(a[unsure], b[unsure]) > thresh
    return yes


def run_length(merged_sum, score_sum, quads, scores, thresh) -> int:
    """How many of quads (in order) join a run whose score-weighted coordinate sum so far is merged_sum."""
    sums = merged_sum + np.cumsum(scores[:, None, None] * quads, axis=0)
    totals = score_sum + np.cumsum(scores)
    before = np.concatenate([(merged_sum / score_sum)[None], sums[:-1] / totals[:-1, None, None]])
    lo, hi = iou_bounds(before, quads)
    rejected = np.flatnonzero(hi <= thresh)
    stop = int(rejected[0]) if rejected.size else len(quads)
    joins = lo[:stop] > thresh
    unsure = np.flatnonzero(~joins)
    joins[unsure] = pairwise_iou(before[unsure], quads[unsure]) > thresh
    fails = np.flatnonzero(~joins)
    return int(fails[0]) if fails.size else stop


def merge_runs(quads, scores, thresh, block: int = 64):
    """Locality-aware merge, one run after the other."""
    out_q, out_s, out_n = [], [], []
    start, n = 0, len(quads)
    while start < n:
        merged, total, end, size = scores[start] * quads[start], scores[start], start + 1, block
        while end < n:
            stop = min(n, end + size)
            k = run_length(merged, total, quads[end:stop], scores[end:stop], thresh)
            merged = merged + np.sum(scores[end:end + k, None, None] * quads[end:end + k], axis=0)
            total = total + np.sum(scores[end:end + k])
            end, size = end + k, 2 * size
            if end < stop:
                break
        out_q.append(merged / total)
        out_s.append(total)
        out_n.append(end - start)
        start = end
    return np.array(out_q).reshape(-1, 4, 2), np.array(out_s, np.float64), np.array(out_n, np.int64)


def nms(quads, scores, thresh) -> np.ndarray:
    """Standard NMS, one kept quad against the rest at a time."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        order = rest[~iou_above(np.broadcast_to(quads[i], (len(rest), 4, 2)), quads[rest], thresh)]
    return np.array(keep, dtype=np.int64)


def decode_maps(score, geo, map_scale, score_thresh=SCORE_THRESH, nms_thresh=NMS_THRESH):
    """east_cache.model.decode.decode_maps as it was, walking run by run: (quads (K, 4, 2) float32, each word's mean
    score (K,) float32)."""
    score = np.asarray(score)
    if score.ndim == 3 and score.shape[0] == 1:
        score = score[0]
    geo = np.asarray(geo)
    ys, xs = np.nonzero(score > score_thresh)
    quads = restore_quads(xs, ys, geo[:, ys, xs], map_scale)
    quads, sums, counts = merge_runs(quads, score[ys, xs].astype(np.float64), nms_thresh)
    keep = nms(quads, sums, nms_thresh)
    return quads[keep].astype(np.float32).reshape(-1, 4, 2), (sums[keep] / counts[keep]).astype(np.float32)
