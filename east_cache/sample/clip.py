"""Sutherland-Hodgman clipping of polygons against convex polygons, vectorised over pairs: the one clipper of the
package. Its polygons (clip_polygons, clip_convex) are what a reader's epoch geometry keeps of a word under a tilted
crop (epoch_geometry.tilted_cuts, reader/warped.py); its areas (convex_intersection) are the overlap of quads that
the model's NMS, DetEval and the fusion of predictions measure (east_cache/evaluate/overlap.py). Pure numpy.

Not one of the sample modules whose code a cache's fingerprint hashes (build/fingerprint.py SAMPLE_MODULES): the
build never clips.
"""
from __future__ import annotations

import numpy as np

from east_cache.sample.geometry import signed_polygon_area


def next_index(k: int) -> np.ndarray:
    """Index of each vertex's successor in a k-gon. Indexing, not np.roll: the polygon helpers
    run thousands of times on tiny arrays, where np.roll's overhead dominates."""
    return np.arange(1, k + 1) % k


def _compact(points: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    return out, count


def _clip(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(polygons (P, W, 2) shifted by -origin, their vertex counts (P,), origin (P, 1, 2)): polygons a (P, K, 2)
    clipped to convex polygons b (P, L, 2), pair by pair, either orientation. A row's columns past its count repeat
    its last vertex; a row clipped away is all zeros, count 0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    origin = a[:, :1]              # small coordinates keep the cross products exact enough
    poly, clip = a - origin, b - origin
    flip = signed_polygon_area(clip) < 0
    clip[flip] = clip[flip, ::-1]  # interior on the left of every clip edge
    n, edges = len(poly), clip.shape[1]
    alive, count = np.ones(n, bool), np.full(n, poly.shape[1])
    for j in range(edges):
        c0 = clip[:, j, None]
        e = clip[:, (j + 1) % edges, None] - c0
        f = e[..., 0] * (poly[..., 1] - c0[..., 1]) - e[..., 1] * (poly[..., 0] - c0[..., 0])  # >= 0: inside
        k = poly.shape[1]
        nxt, f_next = poly[:, next_index(k)], f[:, next_index(k)]
        inside_next = f_next >= 0
        cross = (f >= 0) != inside_next
        t = f / np.where(cross, f - f_next, 1.0)
        # Edge v -> next emits the crossing point (if it crosses the line), then next (if inside).
        points, valid = np.empty((n, 2 * k, 2)), np.empty((n, 2 * k), bool)
        points[:, 0::2], points[:, 1::2] = poly + t[..., None] * (nxt - poly), nxt
        valid[:, 0::2], valid[:, 1::2] = cross, inside_next
        poly, count = _compact(points, valid)
        alive &= count > 0   # a polygon clipped away stays away (its collapsed vertex may lie inside a later edge)
    return poly, np.where(alive, count, 0), origin


def convex_intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P,) areas (px^2) of the intersections of polygons a (P, K, 2) with convex polygons b (P, L, 2),
    pair by pair, either orientation.

    Its area stays right for nearly equal polygons, where cv2.intersectConvexConvex can return half the area (seen
    with OpenCV 5.0): small coordinates (a's first vertex at the origin) keep the cross products exact enough.
    """
    poly, _, _ = _clip(a, b)
    return np.abs(signed_polygon_area(poly))


def clip_polygons(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(points float64 (P, W, 2), counts (P,)): polygons a (P, K, 2) clipped to convex polygons b (P, L, 2), pair
    by pair, either orientation; row k's polygon is its first counts[k] points (0 where a[k] and b[k] do not meet),
    in a's coordinates."""
    poly, count, origin = _clip(a, b)
    return poly + origin, count


def clip_convex(polygon: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """float64 (K', 2): polygon (K, 2) clipped to the convex polygon clip (M, 2), either orientation; (0, 2) where
    they do not meet."""
    points, count = clip_polygons(np.asarray(polygon, np.float64)[None], np.asarray(clip, np.float64)[None])
    return points[0, :count[0]]
