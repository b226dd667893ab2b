"""The overlap of convex quads: the area of their intersection (Sutherland-Hodgman clipping, vectorised over pairs)
and their IoU, exact or bounded without clipping. Shared by the model's NMS (east_cache.model.decode), the polygon
DetEval (deteval.py) and the fusion of predictions (ensemble.py). Pure numpy.
"""
from __future__ import annotations

import numpy as np

from east_cache.sample.geometry import signed_polygon_area

MIN_AREA = 1e-6      # px^2; quads at most this big overlap nothing (avoids dividing by zero)


def _next_index(k: int) -> np.ndarray:
    """Index of each vertex's successor in a k-gon. Indexing, not np.roll: the polygon helpers
    here run thousands of times on tiny arrays, where np.roll's overhead dominates."""
    return np.arange(1, k + 1) % k


def _compact(points: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The valid vertices of each polygon first, in their order, in as many columns as the longest needs; a row's
    columns past its own count repeat its last valid vertex (a polygon with repeated vertices has the same shape
    and area). No valid vertex: all collapse to one point. Clipping a polygon then keeps about its own number of
    vertices, where doubling them at every clip edge made the arrays 16 times longer by the fourth."""
    count = valid.sum(axis=1)
    width = max(int(count.max(initial=0)), 1)
    order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    rows = np.arange(len(points))
    last = order[rows, np.maximum(count - 1, 0)]
    idx = np.where(np.arange(width)[None] < count[:, None], order, last[:, None])
    out = points[rows[:, None], idx]
    out[count == 0] = 0.0
    return out


def convex_intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P,) areas (px^2) of the intersections of polygons a (P, K, 2) with convex polygons b (P, L, 2),
    pair by pair, either orientation.

    Sutherland-Hodgman clipping, vectorised over the pairs: its area stays right for nearly equal
    polygons, where cv2.intersectConvexConvex can return half the area (seen with OpenCV 5.0).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    origin = a[:, :1]              # small coordinates keep the cross products exact enough
    poly, clip = a - origin, b - origin
    flip = signed_polygon_area(clip) < 0
    clip[flip] = clip[flip, ::-1]  # interior on the left of every clip edge
    n, edges = len(poly), clip.shape[1]
    for j in range(edges):
        c0 = clip[:, j, None]
        e = clip[:, (j + 1) % edges, None] - c0
        f = e[..., 0] * (poly[..., 1] - c0[..., 1]) - e[..., 1] * (poly[..., 0] - c0[..., 0])  # >= 0: inside
        k = poly.shape[1]
        nxt, f_next = poly[:, _next_index(k)], f[:, _next_index(k)]
        inside_next = f_next >= 0
        cross = (f >= 0) != inside_next
        t = f / np.where(cross, f - f_next, 1.0)
        # Edge v -> next emits the crossing point (if it crosses the line), then next (if inside).
        points, valid = np.empty((n, 2 * k, 2)), np.empty((n, 2 * k), bool)
        points[:, 0::2], points[:, 1::2] = poly + t[..., None] * (nxt - poly), nxt
        valid[:, 0::2], valid[:, 1::2] = cross, inside_next
        poly = _compact(points, valid)
    return np.abs(signed_polygon_area(poly))


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
    e = a - a[:, _next_index(4)]
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
