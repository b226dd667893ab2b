"""A crop of a page stored resized only (--geometry read): the epoch's warp applied once, its targets made under it.

The epoch's draw (east_cache/sample/epoch_geometry.py) gives one matrix, page px -> crop px, a homography (affine
without a perspective). The crop's image is the page's pixels under the crop's inverse image (a quadrilateral: its
box of the raw rows read in place, or the JPEG tiles that box touches decoded) warped once by that matrix, bilinear
(cv2.warpAffine where the matrix is affine, warpPerspective where not), zeros beyond the page; its targets are
make_targets of the page's words mapped by the same matrix (make.words_in_crop: the words whose box overlaps the
crop, the legible ones it cuts made don't-care), so they equal, bit for bit, what make_sample's path gives for
that draw. A compact item (train.py's) carries the crop's packed maps (owner | don't-care bit, as a page's) and
its word table instead of score and geometry: east_cache/reader/expand.py rebuilds those on the device, with the
float32 operations of targets.fill_geometry.
"""
from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

from east_cache.sample.epoch_geometry import EpochGeometry, from_shifted, is_affine, map_points, source_rect
from east_cache.sample.geometry import gather_quads
from east_cache.sample.make import words_in_crop
from east_cache.sample.targets import TABLE_COLUMNS, make_targets, owner_map, roi_map, word_table
from east_cache.store.page_record import CROP_MAPS, MAPS_DTYPE, WARPED_IMAGE, WORD_TABLE, Page, pack_maps


IDENTITY = np.eye(3)


class WarpedImage(NamedTuple):
    """A crop's image not warped yet: `into` warps it into a buffer (S, S, 3) uint8, channels last (a batch slot's
    row: the device sees it channels first, a view), np.asarray into a new one."""
    page: object           # the page image (page_record.PageRows, page_jpeg.JpegImage): hwc(x, y, w, h)
    matrix: np.ndarray     # page px -> crop px
    size: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.size, self.size, 3

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    def into(self, out: np.ndarray) -> None:
        # the pixels under the crop: a view of raw rows, or the JPEG tiles decoded; beyond them the border is 0
        region, x, y = self.page.hwc(*source_rect(self.matrix, self.size))
        if not region.size:   # the crop lies off the page
            out[...] = 0
            return
        to_crop = from_shifted(self.matrix, (x, y))   # the region's px -> crop px
        if is_affine(to_crop):   # no perspective: the cheaper warp, the same pixels
            cv2.warpAffine(region, to_crop[:2], (self.size, self.size), dst=out, flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        else:
            cv2.warpPerspective(region, to_crop, (self.size, self.size), dst=out, flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_CONSTANT, borderValue=0)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.empty(self.shape, np.uint8)
        self.into(out)
        return out if dtype is None else out.astype(dtype)


def warped_words(page: Page, geometry: EpochGeometry, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 (P, 2) crop px, offsets (N + 1,) int64, care uint8 (N,)) of the words the crop shows: the
    page's points mapped by the draw's matrix (an affine one by its 2 x 3 rows, a homography divided by w)."""
    matrix, points = geometry.matrix, page.points
    if not is_affine(matrix):   # mapped here, then taken as they are
        matrix, points = IDENTITY, map_points(matrix, page.points)
    points, offsets, care, _ = words_in_crop(points, page.offsets, page.care > 0, geometry.cut, matrix[:2], size)
    return points, offsets, care


def warped_crop(page: Page, geometry: EpochGeometry, size: int, map_scale: float,
                compact: bool) -> dict[str, np.ndarray]:
    """The item of the crop: image uint8 (3, S, S), score uint8 (1, m, m), geo float16 (5, m, m), roi uint8
    (1, m, m); compact: image_hwc (S, S, 3), warped where it is written, crop_maps MAPS_DTYPE (m, m), table float32
    (L, 9)."""
    points, offsets, care = warped_words(page, geometry, size)
    image = WarpedImage(page.image, geometry.matrix, size)
    m = round(size * map_scale)
    if not page.size[0] * page.size[1]:   # an empty page (an image --skip-bad could not decode): all don't-care
        points, offsets, care = np.zeros((4, 2), np.float32), np.array([0, 4], np.int64), np.zeros(1, np.uint8)
        points[1:3, 0], points[2:, 1] = size, size
    if not compact:
        score, geo, roi = make_targets(points, offsets, care, size, map_scale)
        return {"image": np.ascontiguousarray(np.asarray(image).transpose(2, 0, 1)), "score": score[None],
                "geo": geo.astype(np.float16), "roi": roi[None]}
    quads = gather_quads(points, offsets, care > 0)
    owner = owner_map(quads, map_scale, (m, m), MAPS_DTYPE)
    maps = pack_maps(owner, roi_map(points, offsets, care, map_scale, (m, m)))
    table = word_table(quads) if len(quads) else np.zeros((0, len(TABLE_COLUMNS)), np.float32)
    return {WARPED_IMAGE: image, CROP_MAPS: maps, WORD_TABLE: table}
