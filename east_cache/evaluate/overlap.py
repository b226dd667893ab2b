"""The overlap of convex quads: their IoU, exact (the intersection's area clipped by east_cache/sample/clip.py, the
package's one clipper) or bounded without clipping. Shared by the model's NMS (east_cache.model.decode), the polygon
DetEval (deteval.py) and the fusion of predictions (ensemble.py). Pure numpy.
"""
from __future__ import annotations

import numpy as np

from east_cache.sample.clip import convex_intersection, next_index
from east_cache.sample.geometry import signed_polygon_area

MIN_AREA = 1e-6      # px^2; quads at most this big overlap nothing (avoids dividing by zero)


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P,) IoU of convex quads a[k] and b[k] (P, 4, 2); 0 where either is degenerate."""
    area_a, area_b = np.abs(signed_polygon_area(a)), np.abs(signed_polygon_area(b))
    inter = convex_intersection(a, b)
    ok = (area_a > MIN_AREA) & (area_b > MIN_AREA)
    return np.where(ok, inter / np.where(ok, area_a + area_b - inter, 1.0), 0.0)


def quad_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two convex quads (4, 2)."""
    return float(pairwise_iou(np.asarray(a)[None], np.asarray(b)[None])[0])


def _corners(op, x: np.ndarray) -> np.ndarray:
    """op (np.maximum, np.minimum, np.add) folded over axis 1 of x (P, 4, ...)."""
    return op(op(x[:, 0], x[:, 1]), op(x[:, 2], x[:, 3]))


def iou_bounds(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) bounds (P,) of IoU(a[k], b[k]) for convex quads (P, 4, 2), without clipping.

    IoU = I / (A + B - I) grows with the intersection I. Upper: I <= the boxes' intersection.
    Lower: b's vertices lie within delta of a's, so b holds a eroded by delta, whose area is at
    least A - perimeter(a) * delta. Degenerate pairs get (0, 0).
    """
    area_a, area_b = np.abs(signed_polygon_area(a)), np.abs(signed_polygon_area(b))
    # reductions over the 4 corners written out: numpy's reduce over so short an axis costs more than the sums
    box = np.clip(np.minimum(_corners(np.maximum, a), _corners(np.maximum, b))
                  - np.maximum(_corners(np.minimum, a), _corners(np.minimum, b)), 0, None)
    d = a - b
    delta = np.sqrt(_corners(np.maximum, d[..., 0] ** 2 + d[..., 1] ** 2))
    e = a - a[:, next_index(4)]
    perimeter = _corners(np.add, np.sqrt(e[..., 0] ** 2 + e[..., 1] ** 2))
    ok = (area_a > MIN_AREA) & (area_b > MIN_AREA)
    union = np.where(ok, area_a + area_b, 1.0)
    lo = np.clip(area_a - perimeter * delta, 0, None)
    hi = np.minimum(np.minimum(box[:, 0] * box[:, 1], area_a), area_b)
    return np.where(ok, lo / (union - lo), 0.0), np.where(ok, hi / (union - hi), 0.0)


def iou_above(a: np.ndarray, b: np.ndarray, thresh: float) -> np.ndarray:
    """(P,) bool: IoU(a[k], b[k]) > thresh, exactly; the bounds settle most pairs, clipping the rest."""
    lo, hi = iou_bounds(a, b)
    yes = lo > thresh
    unsure = np.flatnonzero(~yes & (hi > thresh))
    yes[unsure] = pairwise_iou(a[unsure], b[unsure]) > thresh
    return yes
