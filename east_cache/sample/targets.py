"""EAST training targets (score, geometry, ROI maps) for one crop's words.

Definition (docs/architecture.md, "Targets", draws it with the conventions); map scale s, map side
m = round(input_size * s):
- score = 1 inside each legible quad shrunk by shrink_quads, vertices x s rounded to integers and
  filled like cv2.fillPoly on a map without border, then clipped to the crop (fill_polygon);
- at a score pixel with map index (x, y), p = (x, y) / s in crop px (the index, not the pixel
  centre, as EAST decoders assume) is rotated by theta = min_rect_angles(Q) about Q's first
  vertex; channels 0-3 are its distances (>= 0, crop px) to the top, bottom, left and right
  edges of Q's box rotated the same way, channel 4 is theta (rad);
- where shrunk quads overlap, the word that comes later wins all five channels (never a sum);
- roi = 1 except 0 inside every don't-care polygon (whole, not shrunk), at map scale.

Speed: each word is filled once into an owner map (word index + 1, later words overwrite), and
the distances are computed once per positive pixel for all words together, instead of over the
whole map per word.
"""
from __future__ import annotations

import cv2
import numpy as np

from east_cache.sample.geometry import gather_quads, min_rect_angles, rotated_boxes, shrink_quads

MAX_BUFFER_SHARE = 64   # fill_polygon draws a polygon reaching past the map in a buffer up to this many maps large
# word_table's columns: cos and sin of theta, the first vertex (ax, ay), the box x0, x1, y0, y1 of the quad rotated
# by theta about that vertex, theta (rad); px are those of the quads
TABLE_COLUMNS = ("cos", "sin", "ax", "ay", "x0", "x1", "y0", "y1", "theta")


def map_polygon(points: np.ndarray, scale: float) -> np.ndarray:
    """Crop px -> integer map vertices (K, 2) int32 for cv2.fillPoly."""
    return np.around(np.asarray(points, np.float64) * scale).astype(np.int32)


def fill_polygon(dst: np.ndarray, poly: np.ndarray, value: int) -> None:
    """cv2.fillPoly of integer vertices (K, 2) into dst as if dst extended without limit, then clipped to it.

    cv2 clips a polygon's outline to the image before drawing it, which moves the outline pixels of an
    edge that crosses the border: the same word would come out differently in a crop and in a page
    cut through elsewhere. A polygon that reaches past dst is therefore drawn in a buffer of its own box
    (integer shifts do not change cv2's rasterisation) and pasted. A box over MAX_BUFFER_SHARE times
    dst's area (an absurd annotation) is drawn clipped instead, to bound the memory."""
    h, w = dst.shape
    (x0, y0), (x1, y1) = poly.min(axis=0), poly.max(axis=0) + 1
    if x0 >= 0 and y0 >= 0 and x1 <= w and y1 <= h:
        cv2.fillPoly(dst, [poly], value)
        return
    cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if cx1 <= cx0 or cy1 <= cy0:
        return
    if (x1 - x0) * (y1 - y0) > MAX_BUFFER_SHARE * max(h * w, 1):
        cv2.fillPoly(dst, [poly], value)
        return
    buf = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(buf, [poly - (x0, y0)], 1)
    dst[cy0:cy1, cx0:cx1][buf[cy0 - y0:cy1 - y0, cx0 - x0:cx1 - x0] > 0] = value


def owner_map(quads: np.ndarray, scale: float, shape: tuple[int, int], dtype=np.int32) -> np.ndarray:
    """(h, w) map: 1 + index of the last quad whose shrunk polygon covers the pixel, 0 elsewhere.
    Vertices are rounded at map scale before filling, so shifting the quads by a whole even number of map
    pixels shifts the map by as much (np.around rounds half to even; cv2.fillPoly on integer vertices)."""
    h, w = shape
    owner = np.zeros((h, w), dtype)
    polys = map_polygon(shrink_quads(quads), scale)
    lo, hi = polys.min(axis=1), polys.max(axis=1)
    visible = np.all((hi >= 0) & (lo < (w, h)), axis=1)
    inside = np.all((lo >= 0) & (hi < (w, h)), axis=1)   # fill_polygon's own test, for all words at once
    for k in np.flatnonzero(visible):
        if inside[k]:   # most words: cv2 draws them as they are, without fill_polygon's per-call checks
            cv2.fillPoly(owner, [polys[k]], int(k) + 1)
        else:
            fill_polygon(owner, polys[k], int(k) + 1)
    return owner


def word_table(quads: np.ndarray, theta: np.ndarray | None = None, dtype=np.float32) -> np.ndarray:
    """(N, len(TABLE_COLUMNS)) per word, the columns TABLE_COLUMNS names. theta, when given, is
    min_rect_angles(quads) (shifts do not change it). float32, as the geometry maths uses it; float64 for a table
    that is shifted before use (east_cache/reader/crop.py)."""
    theta = min_rect_angles(quads) if theta is None else theta
    return np.column_stack([np.cos(theta), np.sin(theta), quads[:, 0], rotated_boxes(quads, theta), theta]
                           ).astype(dtype).reshape(-1, len(TABLE_COLUMNS))


def fill_geometry(geo: np.ndarray, owner: np.ndarray, quads: np.ndarray, scale: float,
                  theta: np.ndarray | None = None) -> None:
    """Writes the 5 channels at every positive pixel of owner into geo (5, h, w), from its owner word
    (owner value k + 1 is quads[k]). Per-pixel maths in float32 (the cache stores float16): errors ~1e-4 px.
    east_cache/reader/expand.py runs the same float32 operations in the same order, on a device."""
    flat = np.flatnonzero(owner.ravel() > 0)   # nonzero is fast on bool, slow on uint16
    words = owner.ravel()[flat].astype(np.intp) - 1
    cos, sin, ax, ay, x0, x1, y0, y1, angle = np.take(word_table(quads, theta).T, words, axis=1)
    y, x = np.divmod(flat, owner.shape[1])
    dx = x.astype(np.float32) / np.float32(scale) - ax
    dy = y.astype(np.float32) / np.float32(scale) - ay
    rx = cos * dx - sin * dy + ax
    ry = sin * dx + cos * dy + ay
    out = geo.reshape(5, -1)
    for channel, d in enumerate((ry - y0, y1 - ry, rx - x0, x1 - rx, angle)):
        out[channel, flat] = np.maximum(d, 0) if channel < 4 else d


def roi_map(points: np.ndarray, offsets: np.ndarray, care: np.ndarray, scale: float, shape: tuple[int, int],
            roi: np.ndarray | None = None) -> np.ndarray:
    """uint8 (h, w): 1, except 0 inside every don't-care polygon (whole, not shrunk); drawn into roi if given."""
    roi = np.ones(shape, np.uint8) if roi is None else roi
    offsets = np.asarray(offsets, np.int64)
    words = np.flatnonzero((np.asarray(care) == 0) & (np.diff(offsets) >= 3))   # fewer points enclose nothing
    if not len(words):
        return roi
    h, w = shape
    first, last = words[0], words[-1] + 1   # the words from the first to the last drawn, their points mapped once
    base = offsets[first]
    polys = map_polygon(points[base:offsets[last]], scale)
    # each word's box in one go: a word without points between gives reduceat a garbage row of its own, never read,
    # and leaves its neighbours' rows whole (every start lies before the last word's, which has points)
    starts = offsets[first:last] - base
    lo, hi = np.minimum.reduceat(polys, starts)[words - first], np.maximum.reduceat(polys, starts)[words - first]
    inside = np.all((lo >= 0) & (hi < (w, h)), axis=1)   # fill_polygon's own test, for all words at once
    meets = np.all((hi >= 0) & (lo < (w, h)), axis=1)
    for j, k in enumerate(words):
        poly = polys[offsets[k] - base:offsets[k + 1] - base]
        if inside[j]:   # most words: drawn as they are
            cv2.fillPoly(roi, [poly], 0)
        elif meets[j]:   # reaches past the map: fill_polygon draws it as if the map went on, then clips it
            fill_polygon(roi, poly, 0)
    return roi


def make_targets(points: np.ndarray, offsets: np.ndarray, care: np.ndarray, input_size: int,
                 map_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """score uint8 (m, m), geo float32 (5, m, m), roi uint8 (m, m) for words in crop px.

    points (P, 2) and offsets (N + 1,) hold the words (word k is points[offsets[k]:offsets[k+1]]),
    care (N,) is 1 for a legible quad, 0 for a don't-care polygon. Words may reach outside the
    crop; the maps are clipped to it. Later words win where shrunk quads overlap.
    """
    m = int(round(input_size * map_scale))
    offsets = np.asarray(offsets, np.int64)
    care = np.asarray(care)
    quads = gather_quads(points, offsets, care > 0)
    score = np.zeros((m, m), np.uint8)
    geo = np.zeros((5, m, m), np.float32)
    if len(quads):
        owner = owner_map(quads, map_scale, (m, m))
        score[owner > 0] = 1
        fill_geometry(geo, owner, quads, map_scale)
    return score, geo, roi_map(np.asarray(points), offsets, care, map_scale, (m, m))
