"""A crop's maps rasterised from its page's words at read time, equal bit for bit to the page's stored maps.

A page's packed maps (page.pack_maps: owner in the low bits, don't-care in the top bit) are a function of its
words' polygons in page map px: the legible words' shrunk quads filled with 1 + their index in order (later words
win), the don't-care words' polygons filled into the don't-care bit. Those polygons are integers (vertices x s,
rounded once per page), so a window of the maps is the same fill of the polygons shifted by the window's origin:
fill_polygon fills as if the map had no border, so its pixels move with an integer shift. A reader that draws
each crop's window this way stores no maps at all (a compressed page keeps only its image), and a crop's cut words
need no patch: they are left out of the owner fill and added to the don't-care fill, which equals the reader's
patch of the stored maps (east_cache/reader/crop.py page_patch: a cut word's pixels drawn again from the uncut
words, its whole polygon don't-care). Beyond the page's canvas a crop is background: owner 0, ROI 1.
"""
from __future__ import annotations

import cv2
import numpy as np

from east_cache.sample.geometry import gather_quads, shrink_quads
from east_cache.store.page_record import DONT_CARE_BIT, MAPS_DTYPE
from east_cache.sample.targets import fill_polygon, map_polygon


def polygon_boxes(polygons) -> np.ndarray:
    """int64 (N, 4): x0, y0, x1, y1 (inclusive) of each integer polygon."""
    return np.array([[*p.min(axis=0), *p.max(axis=0)] for p in polygons], np.int64).reshape(-1, 4)


class PagePolygons:
    """A page's word polygons in page map px, derived once per page: legible shrunk quads (owner fill, in owner
    order), legible whole quads (a cut word's don't-care fill), don't-care polygons; and the maps' shape."""

    def __init__(self, points: np.ndarray, offsets: np.ndarray, care: np.ndarray, map_scale: float,
                 map_shape: tuple[int, int]):
        legible = gather_quads(points, offsets, care > 0)
        self.shrunk = map_polygon(shrink_quads(legible), map_scale)   # (L, 4, 2) int32
        self.whole = map_polygon(legible, map_scale)
        self.dont_care = [map_polygon(points[offsets[k]:offsets[k + 1]], map_scale) for k in np.flatnonzero(care == 0)
                          if offsets[k + 1] - offsets[k] >= 3]   # fewer points enclose nothing (roi_map's rule)
        self.shrunk_boxes, self.whole_boxes = polygon_boxes(self.shrunk), polygon_boxes(self.whole)
        self.dont_care_boxes = polygon_boxes(self.dont_care)
        self.shape = map_shape   # (h, w) of the page's maps

    def maps(self, x: int, y: int, m: int, cut: np.ndarray | None = None) -> np.ndarray:
        """uint16 (m, m): the page's packed maps in the window [x, x + m) x [y, y + m) page map px, with the legible
        words `cut` (L,) bool made don't-care."""
        h, w = self.shape
        if not h or not w:   # an empty page (an image --skip-bad could not decode): all don't-care
            return np.full((m, m), 1 << DONT_CARE_BIT, MAPS_DTYPE)
        cut = np.zeros(len(self.shrunk), bool) if cut is None else np.asarray(cut, bool)
        owner, dont_care = np.zeros((m, m), MAPS_DTYPE), np.zeros((m, m), np.uint8)
        at = np.array([x, y], np.int32)
        owners = meeting(self.shrunk_boxes, x, y, m)
        fill_all(owner, self.shrunk, self.shrunk_boxes, owners[~cut[owners]], at, m, owners=True)
        fill_all(dont_care, self.dont_care, self.dont_care_boxes, meeting(self.dont_care_boxes, x, y, m), at, m)
        fill_all(dont_care, self.whole, self.whole_boxes, np.flatnonzero(cut), at, m)
        if x < 0 or y < 0 or x + m > w or y + m > h:   # beyond the canvas: background
            off = np.ones((m, m), bool)
            off[max(0, -y):max(0, h - y), max(0, -x):max(0, w - x)] = False
            owner[off], dont_care[off] = 0, 0
        return owner | (dont_care.astype(MAPS_DTYPE) << DONT_CARE_BIT)


def meeting(boxes: np.ndarray, x: int, y: int, m: int) -> np.ndarray:
    """Indices of the boxes that meet the window [x, x + m) x [y, y + m)."""
    return np.flatnonzero((boxes[:, 2] >= x) & (boxes[:, 0] < x + m) & (boxes[:, 3] >= y) & (boxes[:, 1] < y + m))


def fill_all(dst: np.ndarray, polygons, boxes: np.ndarray, which: np.ndarray, at: np.ndarray, m: int,
             owners: bool = False) -> None:
    """Fill polygons[k] - at into dst for k in `which`, in order, with 1 + k (owners: owner values) or 1.
    cv2.fillPoly straight where a polygon lies inside the window (one test for all), else fill_polygon: the same
    pixels (fill_polygon's rule) without its per-call checks for most words."""
    inside = np.all((boxes[which, :2] >= at) & (boxes[which, 2:] < at + m), axis=1)
    for k, whole in zip(which.tolist(), inside.tolist()):
        value = k + 1 if owners else 1
        poly = polygons[k] - at
        if whole:
            cv2.fillPoly(dst, [poly], value)
        else:
            fill_polygon(dst, poly, value)
