"""DetEval as the UFO / ICDAR 2013 competition scorer runs it: on axis-aligned rectangles.

Every word and detection, whatever its shape, is replaced by its enclosing axis-aligned rectangle
(xmin, ymin, xmax, ymax). Widths, heights and overlaps count inclusively, max - min + 1 in x and in
y, on the float coordinates (the scorer's pixel-count convention, kept for the leaderboard's sake).
For a cared-for gt G and a kept detection D: recall r = |G n D| / |G|, precision p = |G n D| / |D|.

0. A detection whose area lies more than DONT_CARE_PRECISION inside one don't-care rectangle is
   dropped: it earns no credit and is not counted.
1. One-to-one: r >= AREA_RECALL and p >= AREA_PRECISION, each is the other's only such candidate
   (among all boxes, don't-care ones included, as the competition script counts), each overlaps
   nothing else (among cared-for gts and kept detections), and
   2 x centre distance / (diag G + diag D) < CENTER_DIFF_THRESH. Credit 1 to recall and precision.
2. One-to-many (a split), for a still-unmatched G overlapping at least two detections: the unmatched
   detections with p >= AREA_PRECISION match G when their recalls sum (rounded to ROUND_DECIMALS)
   to >= AREA_RECALL. Recall credit SPLIT_CREDIT, precision credit SPLIT_CREDIT per detection
   (1 and 1 when only one detection qualifies).
3. Many-to-one (a merge), for a still-unmatched D overlapping at least two gts: the unmatched gts
   with r >= AREA_RECALL match D when their precisions sum (rounded) to >= AREA_PRECISION. Recall
   credit MERGE_CREDIT per gt, precision credit MERGE_CREDIT (1 and 1 when only one gt qualifies).
Totals over a data set: recall = recall credits / cared-for gts, precision = precision credits /
kept detections, each 0 where its denominator is 0 (nothing scores perfectly out of nothing).
Pure numpy; east_cache.evaluate.deteval is the polygon-area variant.
"""
from __future__ import annotations

import numpy as np

# The thresholds and the split credit are DetEval's, the polygon module's; what the competition's script does
# differently on rectangles is defined here.
from east_cache.evaluate.deteval import (
    AREA_PRECISION,
    AREA_RECALL,
    CENTER_DIFF_THRESH,
    SPLIT_CREDIT,
    ImageCounts,
    set_ratios,
)

DONT_CARE_PRECISION = 0.4   # a detection more than this share inside one don't-care rectangle is dropped
MERGE_CREDIT = 1.0          # k >= 2 gts merged into one detection: each gt's recall, the detection's precision
ROUND_DECIMALS = 4          # split and merge sums are rounded to this many decimals before the comparison
PIXEL = 1.0                 # the inclusive extent's +1: a rectangle from x to x spans one pixel


def enclosing_rects(points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(N, 4) float64 (xmin, ymin, xmax, ymax) of polygons: polygon k is points[offsets[k]:offsets[k + 1]]."""
    points, offsets = np.asarray(points, np.float64).reshape(-1, 2), np.asarray(offsets, np.int64)
    if len(offsets) < 2:
        return np.zeros((0, 4))
    if np.any(np.diff(offsets) < 1):
        raise ValueError("every polygon needs at least one point")
    lo = np.minimum.reduceat(points, offsets[:-1], axis=0)
    hi = np.maximum.reduceat(points, offsets[:-1], axis=0)
    return np.concatenate([lo, hi], axis=1)


def quad_rects(quads) -> np.ndarray:
    """(N, 4) enclosing rectangles of polygons of equal point count (N, K, 2), e.g. quads."""
    q = np.asarray(quads, np.float64)
    if q.size == 0:
        return np.zeros((0, 4))
    if q.ndim != 3 or q.shape[2] != 2:
        raise ValueError(f"expected polygons of shape (N, K, 2), got {q.shape}")
    return np.concatenate([q.min(axis=1), q.max(axis=1)], axis=1)


def _as_rects(rects, what: str) -> np.ndarray:
    r = np.asarray(rects, np.float64)
    if r.size == 0:
        return r.reshape(0, 4)
    if r.ndim != 2 or r.shape[1] != 4 or np.any(r[:, 2:] < r[:, :2]):
        raise ValueError(f"{what} must be rectangles (N, 4) as xmin, ymin, xmax, ymax with max >= min")
    return r


def areas(r: np.ndarray) -> np.ndarray:
    """(N,) inclusive areas: (xmax - xmin + 1) (ymax - ymin + 1)."""
    return (r[:, 2] - r[:, 0] + PIXEL) * (r[:, 3] - r[:, 1] + PIXEL)


def overlaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, K) inclusive intersection areas of rectangles a (N, 4) and b (K, 4); 0 where they do not meet."""
    w = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]) + PIXEL
    h = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]) + PIXEL
    return np.clip(w, 0, None) * np.clip(h, 0, None)


def _diagonal(r: np.ndarray) -> float:
    return float(np.hypot(r[2] - r[0] + PIXEL, r[3] - r[1] + PIXEL))


def _close_centres(g: np.ndarray, d: np.ndarray) -> bool:
    dist = float(np.hypot((g[0] + g[2] - d[0] - d[2]) / 2, (g[1] + g[3] - d[1] - d[3]) / 2))
    return 2 * dist / (_diagonal(g) + _diagonal(d)) < CENTER_DIFF_THRESH


def _rounded_sum(values: np.ndarray) -> float:
    """Summed in index order, as the competition script adds them, then rounded."""
    return round(sum(float(v) for v in values), ROUND_DECIMALS)


def counted(precision_all: np.ndarray, care: np.ndarray) -> np.ndarray:
    """(K,) bool: the detections that count (rule 0: not more than DONT_CARE_PRECISION inside one don't-care
    rectangle), from their precisions (N, K) against every gt rectangle and the gts' care flags (N,)."""
    return ~np.any(precision_all[~care] > DONT_CARE_PRECISION, axis=0)


def counted_detections(gt_rects, care, det_rects) -> np.ndarray:
    """(K,) bool: which detection rectangles (K, 4) evaluate_image counts; the others lie on a don't-care word."""
    gt, det = _as_rects(gt_rects, "gt rectangles"), _as_rects(det_rects, "detection rectangles")
    return counted(overlaps(gt, det) / areas(det)[None], np.asarray(care, bool).reshape(-1))


def evaluate_image(gt_rects, care, det_rects) -> ImageCounts:
    """Counts of one image: gt rectangles (N, 4) with care flags (N,), detection rectangles (K, 4).
    ImageCounts.matches names the gt and detection indices (into the inputs) of every match."""
    gt, det = _as_rects(gt_rects, "gt rectangles"), _as_rects(det_rects, "detection rectangles")
    care = np.asarray(care, bool).reshape(-1)
    if len(care) != len(gt):
        raise ValueError(f"care has {len(care)} flags for {len(gt)} gt rectangles")
    inter_all = overlaps(gt, det)
    recall_all, precision_all = inter_all / areas(gt)[:, None], inter_all / areas(det)[None]
    gi = np.flatnonzero(care)
    di = np.flatnonzero(counted(precision_all, care))
    g, d = gt[gi], det[di]
    cared = np.ix_(gi, di)
    recall, precision, touches = recall_all[cared], precision_all[cared], inter_all[cared] > 0
    gt_done, det_done = np.zeros(len(g), bool), np.zeros(len(d), bool)
    r_acc = p_acc = 0.0
    matches = []

    # "Only candidate" counts every box, don't-care ones included, as the competition script does;
    # "overlaps nothing else" counts cared-for gts and kept detections only.
    good = (recall_all >= AREA_RECALL) & (precision_all >= AREA_PRECISION)
    unique = good[cared] & (good.sum(axis=1) == 1)[gi][:, None] & (good.sum(axis=0) == 1)[di][None]
    single = (touches.sum(axis=1) == 1)[:, None] & (touches.sum(axis=0) == 1)[None]
    for i, j in zip(*np.nonzero(unique & single)):
        if _close_centres(g[i], d[j]):   # unique mutual candidates are disjoint pairs: order does not matter
            gt_done[i] = det_done[j] = True
            r_acc, p_acc = r_acc + 1, p_acc + 1
            matches.append(("one-to-one", (int(gi[i]),), (int(di[j]),)))

    for i in np.flatnonzero(~gt_done & (touches.sum(axis=1) >= 2)):
        js = np.flatnonzero(~det_done & (precision[i] >= AREA_PRECISION))
        if len(js) and _rounded_sum(recall[i, js]) >= AREA_RECALL:
            gt_done[i], det_done[js] = True, True
            credit = 1.0 if len(js) == 1 else SPLIT_CREDIT
            r_acc, p_acc = r_acc + credit, p_acc + credit * len(js)
            matches.append(("one-to-one" if len(js) == 1 else "one-to-many", (int(gi[i]),), tuple(di[js].tolist())))

    for j in np.flatnonzero(~det_done & (touches.sum(axis=0) >= 2)):
        iis = np.flatnonzero(~gt_done & (recall[:, j] >= AREA_RECALL))
        if len(iis) and _rounded_sum(precision[iis, j]) >= AREA_PRECISION:
            gt_done[iis], det_done[j] = True, True
            credit = 1.0 if len(iis) == 1 else MERGE_CREDIT
            r_acc, p_acc = r_acc + credit * len(iis), p_acc + credit
            matches.append(("one-to-one" if len(iis) == 1 else "many-to-one", tuple(gi[iis].tolist()), (int(di[j]),)))

    return ImageCounts(len(g), len(d), r_acc, p_acc, tuple(matches))


def totals(per_image) -> dict:
    """precision, recall, hmean and the summed counts of ImageCounts (one image's or a data set's), with a
    ratio 0 where its denominator is 0: an image with no gt and no detection adds nothing."""
    gt_care, det_care = sum(c.gt_care for c in per_image), sum(c.det_care for c in per_image)
    r_acc, p_acc = sum(c.recall_accum for c in per_image), sum(c.precision_accum for c in per_image)
    precision, recall, hmean = set_ratios(gt_care, det_care, r_acc, p_acc)
    return {"precision": precision, "recall": recall, "hmean": hmean, "gt_care": gt_care, "det_care": det_care,
            "recall_accum": r_acc, "precision_accum": p_acc}


def evaluate(gt_list, det_list) -> dict:
    """Rect DetEval over a data set: gt_list holds (rectangles (N, 4), care (N,)) per image, det_list the
    detection rectangles (K, 4) per image. Returns totals() of all images and per_image (ImageCounts)."""
    if len(gt_list) != len(det_list):
        raise ValueError(f"{len(gt_list)} images of gt but {len(det_list)} of detections")
    per_image = [evaluate_image(r, c, d) for (r, c), d in zip(gt_list, det_list)]
    return {**totals(per_image), "per_image": per_image}
