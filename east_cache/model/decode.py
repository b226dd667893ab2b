"""Decode EAST score and geometry maps back into word quads: the inverse of east_cache.targets.

At a positive map pixel with index (x, y), p = (x, y) / map_scale in crop px (the index, not the
pixel centre, as in targets). Channels 0-3 are the distances from p to the top, bottom, left and
right edges of the word's box in a frame rotated by theta = channel 4 about the word's first
vertex v0. Rotation is rigid, so v0 is not needed: the box corners relative to p in the rotated
frame are rotated back by R(theta)^T and added to p. Corners come out clockwise from the top-left
of the reading direction, the order the targets were made from.

Every positive pixel predicts a whole quad; locality-aware NMS (EAST, Zhou et al. 2017, sec. 3.5)
first merges runs of consecutive candidates in row-major order by score-weighted averaging, then
standard NMS keeps the best of the merged quads. Pure numpy, no I/O.
"""
from __future__ import annotations

import numpy as np

SCORE_THRESH = 0.8   # a map pixel is a candidate when its score is above this
NMS_THRESH = 0.2     # IoU above which two quads are one word (merged, then suppressed)
MIN_AREA = 1e-6      # px^2; quads at most this big overlap nothing (avoids dividing by zero)


def restore_quads(xs: np.ndarray, ys: np.ndarray, geo: np.ndarray, map_scale: float) -> np.ndarray:
    """(P, 4, 2) float64 quads in crop px from map indices xs, ys (P,) and their geometry (5, P)."""
    d_top, d_bottom, d_left, d_right, theta = np.asarray(geo, np.float64)
    px = np.asarray(xs, np.float64)[:, None] / map_scale
    py = np.asarray(ys, np.float64)[:, None] / map_scale
    # Corners relative to p' in the rotated frame: top-left, top-right, bottom-right, bottom-left.
    u = np.stack([-d_left, d_right, d_right, -d_left], axis=1)
    v = np.stack([-d_top, -d_top, d_bottom, d_bottom], axis=1)
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    # q - p = R(theta)^T (q' - p'), R(theta)^T = [[c, s], [-s, c]].
    return np.stack([c * u + s * v + px, -s * u + c * v + py], axis=-1)


def _next_index(k: int) -> np.ndarray:
    """Index of each vertex's successor in a k-gon. Indexing, not np.roll: the polygon helpers
    here run thousands of times on tiny arrays, where np.roll's overhead dominates."""
    return np.arange(1, k + 1) % k


def _signed_area(poly: np.ndarray) -> np.ndarray:
    """Shoelace area of polygons (..., K, 2) with its sign: positive when each edge has the
    interior on its left in x-right, y-up axes (the sign is what orients the clip polygons)."""
    nxt = poly[..., _next_index(poly.shape[-2]), :]
    return 0.5 * np.sum(poly[..., 0] * nxt[..., 1] - nxt[..., 0] * poly[..., 1], axis=-1)


def _fill_gaps(points: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Each invalid vertex becomes a copy of the valid one before it (cyclically): a polygon with
    repeated vertices has the same shape and area. No valid vertex: all collapse to one point."""
    idx = np.maximum.accumulate(np.where(valid, np.arange(valid.shape[1]), -1), axis=1)
    idx = np.where(idx < 0, idx[:, -1:], idx).clip(0)
    return points[np.arange(len(points))[:, None], idx]


def convex_intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P,) areas (px^2) of the intersections of polygons a (P, K, 2) with convex polygons b (P, L, 2),
    pair by pair, either orientation.

    Sutherland-Hodgman clipping, vectorised over the pairs: its area stays right for nearly equal
    polygons, where cv2.intersectConvexConvex can return half the area (seen with OpenCV 5.0).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    origin = a[:, :1]              # small coordinates keep the cross products exact enough
    poly, clip = a - origin, b - origin
    flip = _signed_area(clip) < 0
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
        poly = _fill_gaps(points, valid)
    return np.abs(_signed_area(poly))


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P,) IoU of convex quads a[k] and b[k] (P, 4, 2); 0 where either is degenerate."""
    area_a, area_b = np.abs(_signed_area(a)), np.abs(_signed_area(b))
    inter = convex_intersection(a, b)
    ok = (area_a > MIN_AREA) & (area_b > MIN_AREA)
    return np.where(ok, inter / np.where(ok, area_a + area_b - inter, 1.0), 0.0)


def quad_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two convex quads (4, 2)."""
    return float(pairwise_iou(np.asarray(a)[None], np.asarray(b)[None])[0])


def iou_bounds(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) bounds (P,) of IoU(a[k], b[k]) for convex quads (P, 4, 2), without clipping.

    IoU = I / (A + B - I) grows with the intersection I. Upper: I <= the boxes' intersection.
    Lower: b's vertices lie within delta of a's, so b holds a eroded by delta, whose area is at
    least A - perimeter(a) * delta. Degenerate pairs get (0, 0).
    """
    area_a, area_b = np.abs(_signed_area(a)), np.abs(_signed_area(b))
    box = np.clip(np.minimum(a.max(axis=1), b.max(axis=1)) - np.maximum(a.min(axis=1), b.min(axis=1)), 0, None)
    delta = np.sqrt(((a - b) ** 2).sum(axis=-1).max(axis=-1))
    perimeter = np.sqrt(((a - a[:, _next_index(4)]) ** 2).sum(axis=-1)).sum(axis=-1)
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


def _run_length(merged_sum: np.ndarray, score_sum: float, quads: np.ndarray, scores: np.ndarray,
                thresh: float) -> int:
    """How many of quads (in order) join a run whose score-weighted coordinate sum so far is
    merged_sum: candidate k joins when its IoU with the run merged up to k - 1 is above thresh.
    Nothing after the first candidate the bounds already reject is clipped."""
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


def merge_runs(quads: np.ndarray, scores: np.ndarray, thresh: float,
               block: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Locality-aware merge: walking the candidates in order (row-major), each one whose IoU with
    the current merged quad is above thresh joins it (coordinates averaged with the scores as
    weights, scores added); any other starts a new merged quad. Returns the merged quads, their
    summed scores and how many candidates each merged.

    Same result as the one-candidate-at-a-time walk, but a run's next candidates are tested
    together (block of them, doubling while the run goes on), since the merged quad before each
    one is a prefix sum.
    """
    out_q, out_s, out_n = [], [], []
    start, n = 0, len(quads)
    while start < n:
        merged, total, end, size = scores[start] * quads[start], scores[start], start + 1, block
        while end < n:
            stop = min(n, end + size)
            k = _run_length(merged, total, quads[end:stop], scores[end:stop], thresh)
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


def nms(quads: np.ndarray, scores: np.ndarray, thresh: float) -> np.ndarray:
    """Indices kept by standard NMS: best score first, a quad with IoU > thresh with a kept one goes."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        order = rest[~iou_above(np.broadcast_to(quads[i], (len(rest), 4, 2)), quads[rest], thresh)]
    return np.array(keep, dtype=np.int64)


def decode_maps(score: np.ndarray, geo: np.ndarray, map_scale: float, score_thresh: float = SCORE_THRESH,
                nms_thresh: float = NMS_THRESH) -> tuple[np.ndarray, np.ndarray]:
    """(quads (K, 4, 2) float32 in crop px, scores (K,) float32) from score (m, m) and geo (5, m, m).

    A cached record's score (1, m, m) and float16 geo are accepted as they are. A returned score is
    the word's confidence: the mean score of the map pixels merged into its quad, in (score_thresh, 1]
    for a model's sigmoid scores. NMS ranks the quads by the sum of those scores, as EAST does, which
    favours the larger of two overlapping candidates.
    """
    score = np.asarray(score)
    if score.ndim == 3 and score.shape[0] == 1:
        score = score[0]
    geo = np.asarray(geo)
    if score.ndim != 2 or geo.shape != (5,) + score.shape:
        raise ValueError(f"expected score (m, m) and geo (5, m, m), got {score.shape} and {geo.shape}")
    ys, xs = np.nonzero(score > score_thresh)  # row-major, the order locality-aware NMS walks
    quads = restore_quads(xs, ys, geo[:, ys, xs], map_scale)
    quads, sums, counts = merge_runs(quads, score[ys, xs].astype(np.float64), nms_thresh)
    keep = nms(quads, sums, nms_thresh)
    return quads[keep].astype(np.float32).reshape(-1, 4, 2), (sums[keep] / counts[keep]).astype(np.float32)
