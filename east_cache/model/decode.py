"""Decode EAST score and geometry maps back into word quads: the inverse of east_cache/sample/targets.py.

At a positive map pixel with index (x, y), p = (x, y) / map_scale in crop px (the index, not the
pixel centre, as in targets). Channels 0-3 are the distances from p to the top, bottom, left and
right edges of the word's box in a frame rotated by theta = channel 4 about the word's first
vertex v0. Rotation is rigid, so v0 is not needed: the box corners relative to p in the rotated
frame are rotated back by R(theta)^T and added to p. Corners come out clockwise from the top-left
of the reading direction, the order the targets were made from.

Every positive pixel predicts a whole quad; locality-aware NMS (EAST, Zhou et al. 2017, sec. 3.5)
first merges runs of consecutive candidates in row-major order by score-weighted averaging, then
standard NMS keeps the best of the merged quads (the quads' IoU: east_cache.evaluate.overlap, which scoring
and ensembles share). Pure numpy, no I/O.
"""
from __future__ import annotations

import numpy as np

from east_cache.evaluate.overlap import iou_above, iou_bounds, pairwise_iou

SCORE_THRESH = 0.8   # a map pixel is a candidate when its score is above this
NMS_THRESH = 0.2     # IoU above which two quads are one word (merged, then suppressed)
RUN_BLOCK = 64       # candidates a merge run tests in its first round (then twice as many each round)
MAX_PAIRS = 1 << 18  # quad pairs tested in one array operation: bounds the memory of merging and NMS


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


def _run_ends(quads: np.ndarray, scores: np.ndarray, starts: np.ndarray, widths: np.ndarray,
              thresh: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs begun at each of `starts` (int64), all at once: (end, score-weighted coordinate sum (R, 4, 2), score
    sum (R,)), a run's end being its first candidate that does not join (or n). A run first tests the next
    widths[r] candidates, then twice as many while all of them join: the merged quad before each candidate is a
    prefix sum of the run's, so a round is a few array operations over many runs (those of similar widths
    together), not a loop over them."""
    n = len(quads)
    merged, total = scores[starts, None, None] * quads[starts], scores[starts].copy()
    end, widths = starts + 1, np.maximum(np.asarray(widths, np.int64), 1)
    going = np.flatnonzero(end < n)
    while going.size:
        still = []
        bucket = np.ceil(np.log2(widths[going])).astype(np.int64)
        for b in np.unique(bucket):
            group = going[bucket == b]
            size = 1 << int(b)
            for part in np.array_split(group, -(-group.size * size // MAX_PAIRS)):   # bounded memory per round
                still.append(_run_round(quads, scores, part, size, merged, total, end, thresh))
        going = np.concatenate(still)
        widths[going] *= 2
    return end, merged, total


def _run_round(quads, scores, part, size, merged, total, end, thresh) -> np.ndarray:
    """One round of _run_ends for the runs `part`: their next `size` candidates tested, their sums and ends
    updated in place; returns those of them whose every candidate joined (they go on)."""
    n, e = len(quads), end[part]
    idx = e[:, None] + np.arange(min(size, int((n - e).max())))
    valid = idx < n
    idx = np.minimum(idx, n - 1)
    q, s = quads[idx], np.where(valid, scores[idx], 0.0)
    sums = merged[part, None] + np.cumsum(s[..., None, None] * q, axis=1)
    totals = total[part, None] + np.cumsum(s, axis=1)
    before = np.concatenate([(merged[part] / total[part, None, None])[:, None],
                             sums[:, :-1] / totals[:, :-1, None, None]], axis=1)
    lo, hi = (v.reshape(idx.shape) for v in iou_bounds(before.reshape(-1, 4, 2), q.reshape(-1, 4, 2)))
    out = (hi <= thresh) | ~valid                    # certainly not joining
    stop = np.where(out.any(axis=1), np.argmax(out, axis=1), idx.shape[1])
    joins = lo > thresh
    unsure = ~joins & (np.arange(idx.shape[1]) < stop[:, None])   # only those before the first certain refusal
    joins[unsure] = pairwise_iou(before[unsure], q[unsure]) > thresh
    joins &= np.arange(idx.shape[1]) < stop[:, None]
    whole = joins.all(axis=1)
    k = np.where(whole, idx.shape[1], np.argmin(joins, axis=1))   # joined before the first that does not
    rows = np.flatnonzero(k > 0)
    merged[part[rows]], total[part[rows]] = sums[rows, k[rows] - 1], totals[rows, k[rows] - 1]
    end[part] = e + k
    return part[whole & (end[part] < n)]


def stretch_starts(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Indices of the candidates (map pixels in row-major order) that do not follow their left neighbour: where a
    locality-aware run is likely to begin (and end)."""
    follows = (ys[1:] == ys[:-1]) & (xs[1:] == xs[:-1] + 1)
    return np.flatnonzero(np.concatenate([[False], ~follows])).astype(np.int64) if len(xs) else np.zeros(0, np.int64)


def merge_runs(quads: np.ndarray, scores: np.ndarray, thresh: float,
               hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Locality-aware merge: walking the candidates in order (row-major), each one whose IoU with
    the current merged quad is above thresh joins it (coordinates averaged with the scores as
    weights, scores added); any other starts a new merged quad. Returns the merged quads, their
    summed scores and how many candidates each merged.

    The walk's result without walking run by run: runs are begun speculatively at once wherever one may start
    (hints, e.g. stretch_starts; then the ends of the runs tried, until every end reached has been tried), and
    the walk follows start -> end through them. A run tried and not reached by the walk is wasted work, in bulk.
    """
    n = len(quads)
    if n == 0:
        return np.zeros((0, 4, 2)), np.zeros(0), np.zeros(0, np.int64)
    quads, scores = np.asarray(quads, np.float64), np.asarray(scores, np.float64)
    row_of = np.full(n + 1, -1)   # a start's row in the arrays below; n: past the last candidate
    ends, sums, totals = [], [], []
    todo, tried = np.unique(np.concatenate([[0], [] if hints is None else hints])).astype(np.int64), 0
    while todo.size:
        # a first window reaching the next hint (where the run likely ends), or RUN_BLOCK past the last hint
        nxt = np.searchsorted(todo, todo, side="right")
        widths = np.where(nxt < len(todo), todo[np.minimum(nxt, len(todo) - 1)] - todo, RUN_BLOCK)
        end, merged, total = _run_ends(quads, scores, todo, widths, thresh)
        row_of[todo] = np.arange(tried, tried + len(todo))
        ends.append(end), sums.append(merged), totals.append(total)
        tried += len(todo)
        all_ends = np.concatenate(ends)
        todo = np.unique(all_ends[(all_ends < n) & (row_of[np.minimum(all_ends, n)] < 0)])
    end, merged, total = np.concatenate(ends), np.concatenate(sums), np.concatenate(totals)
    rows, starts, at = [], [], 0
    while at < n:
        rows.append(row_of[at])
        starts.append(at)
        at = int(end[row_of[at]])
    return merged[rows] / total[rows, None, None], total[rows], end[rows] - np.array(starts, np.int64)


def nms(quads: np.ndarray, scores: np.ndarray, thresh: float) -> np.ndarray:
    """Indices kept by standard NMS: best score first, a quad with IoU > thresh with a kept one goes.
    Every pair whose bounding boxes overlap is tested at once (iou_above), in blocks of rows; the greedy pass
    then only reads which later quads each kept one suppresses."""
    order = np.argsort(-scores, kind="stable")
    q = np.asarray(quads, np.float64)[order]
    m = len(q)
    lo, hi = q.min(axis=1), q.max(axis=1)
    firsts, seconds = [], []
    rows_per_block = max(1, MAX_PAIRS // max(m, 1))
    for r0 in range(0, m, rows_per_block):
        r = slice(r0, min(m, r0 + rows_per_block))
        overlap = ((lo[None, :, 0] < hi[r, None, 0]) & (hi[None, :, 0] > lo[r, None, 0])   # boxes share area
                   & (lo[None, :, 1] < hi[r, None, 1]) & (hi[None, :, 1] > lo[r, None, 1])
                   & (np.arange(r.start, r.stop)[:, None] < np.arange(m)[None]))   # a later quad than the row's
        a, b = np.nonzero(overlap)
        a += r0
        above = iou_above(q[a], q[b], thresh)
        firsts.append(a[above]), seconds.append(b[above])
    a, b = (np.concatenate(v) if v else np.zeros(0, np.int64) for v in (firsts, seconds))
    bounds = np.searchsorted(a, np.arange(m + 1))   # a is sorted: the pairs of row i are bounds[i]:bounds[i + 1]
    gone, keep = np.zeros(m, bool), []
    for i in range(m):
        if not gone[i]:
            keep.append(i)
            gone[b[bounds[i]:bounds[i + 1]]] = True
    return order[np.array(keep, dtype=np.int64)]


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
    quads, sums, counts = merge_runs(quads, score[ys, xs].astype(np.float64), nms_thresh, stretch_starts(xs, ys))
    keep = nms(quads, sums, nms_thresh)
    return quads[keep].astype(np.float32).reshape(-1, 4, 2), (sums[keep] / counts[keep]).astype(np.float32)
