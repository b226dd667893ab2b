"""EAST training targets (score, geometry, ROI maps) for one crop's words.

Definition (docs/architecture.md, "Targets", draws it with the conventions); map scale s, map side
m = round(input_size * s):
- score = 1 inside each legible quad shrunk by shrink_quads, vertices x s rounded to integers and
  filled like cv2.fillPoly;
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

from preprocess.sample.geometry import gather_quads, min_rect_angles, rotated_boxes, shrink_quads


def map_polygon(points: np.ndarray, scale: float) -> np.ndarray:
    """Crop px -> integer map vertices (K, 2) int32 for cv2.fillPoly."""
    return np.around(np.asarray(points, np.float64) * scale).astype(np.int32)


def _owner_map(quads: np.ndarray, scale: float, m: int) -> np.ndarray:
    """(m, m) int32: 1 + index of the last quad whose shrunk polygon covers the pixel, 0 elsewhere."""
    owner = np.zeros((m, m), np.int32)
    polys = map_polygon(shrink_quads(quads), scale)
    visible = np.all((polys.max(axis=1) >= 0) & (polys.min(axis=1) < m), axis=1)
    for k in np.flatnonzero(visible):
        cv2.fillPoly(owner, [polys[k]], int(k) + 1)
    return owner


def _fill_geometry(geo: np.ndarray, owner: np.ndarray, quads: np.ndarray, scale: float) -> None:
    """Writes the 5 channels at every positive pixel of owner into geo (5, m, m), from its owner word.
    Per-pixel maths in float32 (the cache stores float16): errors ~1e-4 px."""
    positive = owner.ravel() > 0
    flat = np.flatnonzero(positive)
    theta = min_rect_angles(quads)
    per_word = np.column_stack([np.cos(theta), np.sin(theta), quads[:, 0], rotated_boxes(quads, theta), theta])
    cos, sin, ax, ay, x0, x1, y0, y1, angle = np.take(per_word.T.astype(np.float32), owner.ravel()[flat] - 1, axis=1)
    y, x = np.divmod(flat, owner.shape[1])
    dx = x.astype(np.float32) / np.float32(scale) - ax
    dy = y.astype(np.float32) / np.float32(scale) - ay
    rx = cos * dx - sin * dy + ax
    ry = sin * dx + cos * dy + ay
    out = geo.reshape(5, -1)
    for channel, d in enumerate((ry - y0, y1 - ry, rx - x0, x1 - rx, angle)):
        out[channel][positive] = np.maximum(d, 0) if channel < 4 else d


def _roi(points: np.ndarray, offsets: np.ndarray, care: np.ndarray, scale: float, m: int) -> np.ndarray:
    roi = np.ones((m, m), np.uint8)
    for w in np.flatnonzero(care == 0):
        if offsets[w + 1] - offsets[w] >= 3:  # fewer points enclose nothing
            cv2.fillPoly(roi, [map_polygon(points[offsets[w]:offsets[w + 1]], scale)], 0)
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
        owner = _owner_map(quads, map_scale, m)
        score[owner > 0] = 1
        _fill_geometry(geo, owner, quads, map_scale)
    return score, geo, _roi(np.asarray(points), offsets, care, map_scale, m)
