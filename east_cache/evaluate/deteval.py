"""DetEval (Wolf & Jolion 2006) as the ICDAR 2013 evaluation runs it, for word quads.

Areas are polygon areas, not the quads' axis-aligned boxes: each quad is replaced by its convex
hull, intersections are clipped polygons (east_cache.sample.clip.convex_intersection). That is exact
for convex quads (every decoded quad, and nearly every annotated word); a non-convex or
self-intersecting quad counts as its hull.

For a gt G and a detection D: recall r = |G n D| / |G|, precision p = |G n D| / |D|.
1. A detection covered by one don't-care gt by more than DONT_CARE_OVERLAP of its own area is
   dropped (it neither helps nor hurts); don't-care gts are not counted in recall.
2. One-to-one: G and D match when r >= AREA_RECALL and p >= AREA_PRECISION, each is the other's
   only such candidate, each overlaps nothing else, and their centres are closer than
   CENTER_DIFF_THRESH times their mean box diagonal. Both get credit 1.
3. One-to-many (a split): G, overlapping at least two detections, matches the unmatched
   detections with p >= AREA_PRECISION whose recalls sum to >= AREA_RECALL. G's recall gets
   SPLIT_CREDIT, each detection's precision SPLIT_CREDIT (1 each if only one detection).
4. Many-to-one (a merge): D, overlapping at least two gts, matches the unmatched gts with
   r >= AREA_RECALL whose precisions sum to >= AREA_PRECISION. Each gt's recall gets
   MERGE_CREDIT, D's precision MERGE_CREDIT (1 each if only one gt).
Sums are rounded to 4 decimals before the comparisons, as in the ICDAR script.

Totals: recall = sum of recall credits / care gts, precision = sum of precision credits /
detections kept. An image with no care gt and no detection scores precision = recall = hmean = 1
on its own, but adds nothing to a data set's totals (set_ratios): a set with no care gt and no
detection at all scores 0, so that empty validation crops cannot report a perfect detector. With
only one side empty, both are 0.
"""
from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

from east_cache.sample.clip import convex_intersection
from east_cache.sample.geometry import polygon_area

AREA_RECALL = 0.8         # tr: share of a gt's area a match must cover
AREA_PRECISION = 0.4      # tp: share of a detection's area a match must cover
SPLIT_CREDIT = 0.8        # f_sc(k), one gt split over k >= 2 detections
MERGE_CREDIT = 0.8        # f_sc(k), k >= 2 gts merged into one detection (the ICDAR 2013 script uses 1.0)
DONT_CARE_OVERLAP = 0.5   # share of a detection's area inside a don't-care gt that drops it
CENTER_DIFF_THRESH = 1.0  # one-to-one: centre distance / mean box diagonal must stay below this


class ImageCounts(NamedTuple):
    gt_care: int              # gts counted in recall
    det_care: int             # detections counted in precision (not on a don't-care region)
    recall_accum: float       # sum of recall credits
    precision_accum: float    # sum of precision credits
    matches: tuple            # (kind "one-to-one" | "one-to-many" | "many-to-one", gt indices, det indices)

    @property
    def precision(self) -> float:
        return ratios(self.recall_accum, self.precision_accum, self.gt_care, self.det_care)[0]

    @property
    def recall(self) -> float:
        return ratios(self.recall_accum, self.precision_accum, self.gt_care, self.det_care)[1]

    @property
    def hmean(self) -> float:
        return ratios(self.recall_accum, self.precision_accum, self.gt_care, self.det_care)[2]


def ratios(recall_accum: float, precision_accum: float, n_gt: int, n_det: int,
           empty: float = 1.0) -> tuple[float, float, float]:
    """(precision, recall, hmean) with the empty-side convention of the module docstring; `empty` is all
    three when there is neither a care gt nor a detection."""
    if n_gt == 0 and n_det == 0:
        return empty, empty, empty
    recall = recall_accum / n_gt if n_gt else 0.0
    precision = precision_accum / n_det if n_det else 0.0
    hmean = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, hmean


def _as_quads(quads, what: str) -> np.ndarray:
    q = np.asarray(quads, np.float64)
    if q.size == 0:
        return q.reshape(0, 4, 2)
    if q.ndim != 3 or q.shape[1:] != (4, 2):
        raise ValueError(f"{what} must be quads of shape (N, 4, 2), got {q.shape}")
    return q


def hulls(quads: np.ndarray) -> np.ndarray:
    """(N, 4, 2) convex hulls of quads, a vertex repeated where the hull has fewer than four."""
    out = np.empty((len(quads), 4, 2))
    for k, q in enumerate(quads):
        h = cv2.convexHull(q.astype(np.float32)).reshape(-1, 2)
        out[k] = h[np.minimum(np.arange(4), len(h) - 1)]
    return out


def overlap_areas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, K) intersection areas of convex quads a (N, 4, 2) and b (K, 4, 2). Only pairs whose
    axis-aligned boxes overlap are clipped."""
    out = np.zeros((len(a), len(b)))
    if len(a) and len(b):
        lo_a, hi_a, lo_b, hi_b = a.min(axis=1), a.max(axis=1), b.min(axis=1), b.max(axis=1)
        i, j = np.nonzero(np.all((lo_a[:, None] < hi_b[None]) & (lo_b[None] < hi_a[:, None]), axis=-1))
        out[i, j] = convex_intersection(a[i], b[j])
    return out


def _share(inter: np.ndarray, area: np.ndarray) -> np.ndarray:
    """inter / area, 0 where the area is 0."""
    return np.divide(inter, area, out=np.zeros_like(inter), where=area > 0)


def _close_centres(g: np.ndarray, d: np.ndarray) -> bool:
    diag = lambda q: float(np.linalg.norm(q.max(axis=0) - q.min(axis=0)))  # noqa: E731
    dist = float(np.linalg.norm(g.mean(axis=0) - d.mean(axis=0)))
    return 2 * dist < CENTER_DIFF_THRESH * (diag(g) + diag(d))


def evaluate_image(gt_quads, care, det_quads) -> ImageCounts:
    """DetEval counts for one image: gt quads (N, 4, 2) with care (N,), detections (K, 4, 2)."""
    gt, det = _as_quads(gt_quads, "gt quads"), _as_quads(det_quads, "detections")
    care = np.asarray(care, bool).reshape(-1)
    if len(care) != len(gt):
        raise ValueError(f"care has {len(care)} flags for {len(gt)} gt quads")
    gt, det = hulls(gt), hulls(det)
    det_area = polygon_area(det)
    on_dont_care = np.any(_share(overlap_areas(det, gt[~care]), det_area[:, None]) > DONT_CARE_OVERLAP, axis=1)
    gi, di = np.flatnonzero(care), np.flatnonzero(~on_dont_care)
    g, d = gt[gi], det[di]
    inter = overlap_areas(g, d)
    recall = _share(inter, polygon_area(g)[:, None])
    precision = _share(inter, det_area[di][None])
    good = (recall >= AREA_RECALL) & (precision >= AREA_PRECISION)
    overlaps = inter > 0
    gt_done, det_done = np.zeros(len(g), bool), np.zeros(len(d), bool)
    r_acc = p_acc = 0.0
    matches = []

    # Unique mutual candidates are disjoint pairs, so their order does not matter.
    single = ((good.sum(axis=1) == 1) & (overlaps.sum(axis=1) == 1))[:, None] \
        & ((good.sum(axis=0) == 1) & (overlaps.sum(axis=0) == 1))[None]
    for i, j in zip(*np.nonzero(good & single)):
        if _close_centres(g[i], d[j]):
            gt_done[i] = det_done[j] = True
            r_acc, p_acc = r_acc + 1, p_acc + 1
            matches.append(("one-to-one", (int(gi[i]),), (int(di[j]),)))

    for i in range(len(g)):
        if gt_done[i] or overlaps[i].sum() < 2:
            continue
        js = np.flatnonzero(~det_done & (precision[i] >= AREA_PRECISION))
        if round(float(recall[i, js].sum()), 4) >= AREA_RECALL:
            gt_done[i], det_done[js] = True, True
            credit = 1.0 if len(js) == 1 else SPLIT_CREDIT
            r_acc, p_acc = r_acc + credit, p_acc + credit * len(js)
            matches.append(("one-to-one" if len(js) == 1 else "one-to-many", (int(gi[i]),), tuple(di[js].tolist())))

    for j in range(len(d)):
        if det_done[j] or overlaps[:, j].sum() < 2:
            continue
        iis = np.flatnonzero(~gt_done & (recall[:, j] >= AREA_RECALL))
        if round(float(precision[iis, j].sum()), 4) >= AREA_PRECISION:
            gt_done[iis], det_done[j] = True, True
            credit = 1.0 if len(iis) == 1 else MERGE_CREDIT
            r_acc, p_acc = r_acc + credit * len(iis), p_acc + credit
            matches.append(("one-to-one" if len(iis) == 1 else "many-to-one", tuple(gi[iis].tolist()), (int(di[j]),)))

    return ImageCounts(len(g), len(d), r_acc, p_acc, tuple(matches))


def evaluate(gt_list, det_list) -> dict:
    """DetEval over a data set: gt_list holds (quads (N, 4, 2), care (N,)) per image, det_list the
    detected quads (K, 4, 2) per image. Returns precision, recall, hmean over all images and
    per_image, the ImageCounts of each image."""
    if len(gt_list) != len(det_list):
        raise ValueError(f"{len(gt_list)} images of gt but {len(det_list)} of detections")
    per_image = [evaluate_image(q, c, d) for (q, c), d in zip(gt_list, det_list)]
    totals = [sum(c[k] for c in per_image) for k in range(4)]
    precision, recall, hmean = set_ratios(*totals)
    return dict(precision=precision, recall=recall, hmean=hmean, per_image=per_image)


def set_ratios(n_gt: int, n_det: int, recall_accum: float, precision_accum: float) -> tuple[float, float, float]:
    """(precision, recall, hmean) of a data set's summed counts: 0 when it has no care gt and no detection."""
    return ratios(recall_accum, precision_accum, n_gt, n_det, empty=0.0)


def dataset_metrics(counts) -> dict:
    """precision, recall, hmean and detections of a data set from its summed per-image counts (cared-for gts,
    kept detections, recall credits, precision credits): what cached-crop and full-page validation log."""
    n_gt, n_det, recall_sum, precision_sum = (float(v) for v in counts)
    precision, recall, hmean = set_ratios(round(n_gt), round(n_det), recall_sum, precision_sum)
    return {"precision": precision, "recall": recall, "hmean": hmean, "detections": round(n_det)}


def gt_quads(points: np.ndarray, offsets: np.ndarray, care: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A cached sample's words (CacheDataset.quads) as DetEval takes them: quads (N, 4, 2) and care (N,) bool.
    Legible words are quads already; a don't-care polygon of another point count becomes its minimum-area
    rectangle, which covers it, so detections on it are still forgiven."""
    words = [points[a:b] if b - a == 4 else cv2.boxPoints(cv2.minAreaRect(points[a:b]))
             for a, b in zip(offsets[:-1], offsets[1:])]
    return np.array(words, np.float64).reshape(-1, 4, 2), np.asarray(care, bool)
