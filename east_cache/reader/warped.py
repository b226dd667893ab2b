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

import warnings
from typing import NamedTuple

import cv2
import numpy as np

from east_cache.errors import cache_command
from east_cache.sample.clip import clip_convex
from east_cache.sample.epoch_geometry import (
    EpochGeometry,
    crop_preimage,
    cross2,
    far_words,
    from_shifted,
    is_affine,
    level_matrix,
    map_points,
    mapped_words,
    read_level,
    source_rect,
)
from east_cache.sample.geometry import gather_quads
from east_cache.sample.make import words_in_crop
from east_cache.sample.targets import TABLE_COLUMNS, make_targets, owner_map, roi_map, word_table
from east_cache.store.jpeg_tiles import block_of, clear_outside, decode_stream, tile_stream
from east_cache.store.page_jpeg import JpegImage
from east_cache.store.page_record import CROP_MAPS, MAPS_DTYPE, WARPED_IMAGE, WORD_TABLE, Page, pack_maps


IDENTITY = np.eye(3)
_told = [False]   # whether this process said that a build with --levels reads shrunk crops faster (level_hint)


class NoLevelsWarning(UserWarning):
    """A crop that shrinks its page by 1.41 or more read the page itself at a reduced size: the cache was built
    without --levels, whose stored half level it would read faster."""


def level_hint() -> None:
    """Once per process (a loader worker forked after it said so stays quiet): a crop drawn at scale < 0.71 averages
    the page's own px (raw) or decodes every tile under it at 1/2 (jpeg), where a cache built with --levels holds the
    page's half level to read instead, a quarter of the px and of the tiles. One line, from wherever it happens."""
    if _told[0]:
        return
    _told[0] = True
    warnings.warn_explicit(f"crops drawn at scale < 0.71 read this cache's pages at 1/2 px (each tile decoded at 1/2, "
                           f"or raw px averaged); a cache built with --levels stores each page's half level and reads "
                           f"them faster: `{cache_command('build')} --out CACHE --levels`", NoLevelsWarning,
                           "east_cache.reader", 0)


class WarpedImage(NamedTuple):
    """A crop's image not warped yet: `into` warps it into a buffer (S, S, 3) uint8, channels last (a batch slot's
    row: the device sees it channels first, a view), np.asarray into a new one."""
    page: object           # the page image (page_rows.PageRows, page_jpeg.JpegImage): hwc(x, y, w, h)
    matrix: np.ndarray     # page px -> crop px
    size: int
    levels: bool = True    # read a crop that shrinks the page by 1.41 or more at a reduced level (False: full px)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.size, self.size, 3

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    def into(self, out: np.ndarray) -> None:
        # the pixels under the crop: a view of raw rows, or the JPEG tiles decoded; beyond them the border is 0. A crop
        # that shrinks the page by 1.41 or more reads it at a reduced level (read_level): fewer px, no aliasing; from
        # the page's stored half level where it has one (1/4, 1/8: that level read at 1/2, 1/4)
        f = read_level(self.matrix, self.size) if self.levels else 1
        page, matrix = self.page, self.matrix
        half = page.half_image() if f > 1 else None
        if half is not None:   # the stored half level, read as a page of its own: its px -> crop px, and f / 2 of it
            page, matrix, f = half, matrix @ level_matrix(2), f // 2
        elif f > 1:   # no stored level (a build without --levels): the page itself read at 1/f, the same px
            level_hint()
        rect = source_rect(matrix, self.size)
        if isinstance(page, JpegImage):   # only the tiles under the crop's inverse image, not its whole box
            region, x, y = decode_level(page, *rect, f, touched(matrix, self.size, page.tiles.tile, f))
        else:
            region, x, y = page.hwc(*rect) if f == 1 else level_region(page, rect, f)
        if not region.size:   # the crop lies off the page
            out[...] = 0
            return
        to_crop = from_shifted(matrix, (x, y))   # the region's px -> crop px
        if f > 1:
            to_crop = to_crop @ level_matrix(f)
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


def level_region(image, rect: tuple[int, int, int, int], f: int) -> tuple[np.ndarray, int, int]:
    """(px (h', w', 3) of a raw page's level 1/f, x0, y0): the level's px that cover the page px rect (x, y, w, h),
    the first one covering page px [x0, x0 + f) x [y0, y0 + f) (level_matrix maps them): the raw rows averaged over
    f x f (cv2.INTER_AREA). A JPEG page's level is decoded by libjpeg's own scaling (decode_level)."""
    x, y, w, h = rect
    x0, y0 = max(x, 0) // f * f, max(y, 0) // f * f
    nw, nh = (min(x + w, image.width) - x0) // f, (min(y + h, image.height) - y0) // f
    if nw <= 0 or nh <= 0:
        return np.zeros((0, 0, 3), np.uint8), x0, y0
    region = image.pixels[y0:y0 + nh * f, x0:x0 + nw * f]
    return cv2.resize(region, (nw, nh), interpolation=cv2.INTER_AREA), x0, y0


def touched(matrix: np.ndarray, size: int, tile: int, f: int):
    """keep(tx, ty, nx, ny) -> bool (ny, nx): which tiles of a block (page px tiles of side `tile`) the crop of side
    `size` under matrix (page px -> crop px) reads: those meeting its inverse image (a convex quadrilateral, one crop
    px around it) grown by f + 2 page px (the bilinear neighbours of a level px and the px it averages). A tile
    wholly beyond one of the quadrilateral's edges is never read (a rotated or tilted crop's box holds many)."""
    quad = crop_preimage(matrix, size, 1)
    edges = np.roll(quad, -1, axis=0) - quad
    normal = np.sign(cross2(edges[0], edges[1])) * np.column_stack([-edges[:, 1], edges[:, 0]])   # points inside
    offset = (normal * quad).sum(axis=1)
    pad = f + 2

    def keep(tx: int, ty: int, nx: int, ny: int) -> np.ndarray:
        sides = [np.stack([(t0 + np.arange(n)) * tile - pad, (t0 + np.arange(n) + 1) * tile + pad])
                 for t0, n in ((tx, nx), (ty, ny))]   # (2, n): the grown tiles' low and high px, x then y
        x = normal[:, 0, None, None] * sides[0]   # (4 edges, 2, nx)
        y = normal[:, 1, None, None] * sides[1] - offset[:, None, None]
        far = (y[:, :, :, None, None] + x[:, None, None] < 0).all(axis=(1, 3))   # (4, ny, nx): all 4 corners out
        return ~far.any(axis=0)
    return keep


def decode_level(image: JpegImage, x: int, y: int, w: int, h: int, f: int, keep=None) -> tuple[np.ndarray, int, int]:
    """A JPEG page's level 1/f, as level_region gives a raw page's: the block of tiles under [x, x + w) x [y, y + h), each decoded at 1/f (f = 1:
    the page's px, the window alone, from x, y). keep: touched's answer, the tiles not kept left 0 and undecoded."""
    tiles = image.tiles
    t = tiles.tile
    r = t // f
    tx, ty, nx, ny = block_of(tiles, x, y, w, h)
    wanted = np.ones((ny, nx), bool) if keep is None else keep(tx, ty, nx, ny)
    cols, rows = tiles.grid
    block = np.empty((ny, nx, r, r, 3), np.uint8)
    for j, i in np.ndindex(ny, nx):
        if wanted[j, i] and 0 <= tx + i < cols and 0 <= ty + j < rows:   # tiles off the grid: clear_outside
            stream = tile_stream(tiles, (ty + j) * cols + tx + i, image.where)
            decode_stream(stream, block[j, i], image.where, f)
        else:
            block[j, i] = 0
    clear_outside(block, tx, ty, -(-tiles.width // f), -(-tiles.height // f))
    pixels = block.transpose(0, 2, 1, 3, 4).reshape(ny * r, nx * r, 3)
    if f > 1:
        return pixels, tx * t, ty * t
    return pixels[y - ty * t:y - ty * t + h, x - tx * t:x - tx * t + w], x, y


def warped_words(page: Page, geometry: EpochGeometry, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 (P, 2) crop px, offsets (N + 1,) int64, care uint8 (N,)) of the words the crop shows: the
    page's points mapped by the draw's matrix (an affine one by its 2 x 3 rows, a homography divided by w)."""
    matrix, points, offsets = geometry.matrix, page.points, page.offsets
    if not is_affine(matrix):   # mapped here (words far from the crop clipped to it first), then taken as they are
        mapped, far = mapped_words(matrix, points, offsets, size)
        if far.any():
            points, offsets = near_words(matrix, points, offsets, size, far)
            mapped = map_points(matrix, points)
        matrix, points = IDENTITY, mapped
    points, offsets, care, _ = words_in_crop(points, offsets, page.care > 0, geometry.cut, matrix[:2], size)
    return points, offsets, care


def near_words(matrix: np.ndarray, points: np.ndarray, offsets: np.ndarray, size: int,
               far: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(points, offsets) page px: the words a homography maps partly far from the crop or past its horizon
    (epoch_geometry.far_words) and meeting the crop clipped to its preimage and CLIP_MARGIN px around it (only
    what lies in the crop is drawn; a legible one is cut, hence don't-care); one that misses it is sent off the
    crop. far: far_words' answer, where the caller has it."""
    far = far_words(matrix, points, offsets, size) if far is None else far
    if not far.any():
        return points, offsets
    crop, region = crop_preimage(matrix, size, 0), crop_preimage(matrix, size)
    away = map_points(np.linalg.inv(matrix), np.array([[-4.0 * size, -4.0 * size]]))[0]
    words = []
    for k in range(len(offsets) - 1):
        word = np.asarray(points[offsets[k]:offsets[k + 1]], np.float64)
        if far[k]:   # meets the crop (as tilted_cuts asks: a legible one is then cut), or is sent off it
            word = clip_convex(word, region) if len(clip_convex(word, crop)) else np.repeat(away[None], 3, axis=0)
        words.append(word)
    return np.concatenate(words), np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)


def warped_crop(page: Page, geometry: EpochGeometry, size: int, map_scale: float,
                compact: bool, transform=None) -> dict[str, np.ndarray]:
    """The item of the crop: image uint8 (3, S, S), score uint8 (1, m, m), geo float16 (5, m, m), roi uint8
    (1, m, m); compact: image_hwc (S, S, 3), warped where it is written, crop_maps MAPS_DTYPE (m, m), table float32
    (L, 9). transform: a user's transform of the warped crop and its words (reader/transform.py), applied before
    the targets are made from the words it gives back."""
    points, offsets, care = warped_words(page, geometry, size)
    image = WarpedImage(page.image, geometry.matrix, size)
    m = round(size * map_scale)
    if not page.size[0] * page.size[1]:   # an empty page (an image --skip-bad could not decode): all don't-care
        points, offsets, care = np.zeros((4, 2), np.float32), np.array([0, 4], np.int64), np.zeros(1, np.uint8)
        points[1:3, 0], points[2:, 1] = size, size
    if transform is not None:   # (S, S, 3) uint8 and the words, moved with the pixels where it moves them
        image, (points, offsets, care) = transform(np.asarray(image), (points, offsets, care))
    if not compact:
        score, geo, roi = make_targets(points, offsets, care, size, map_scale)
        return {"image": np.ascontiguousarray(np.asarray(image).transpose(2, 0, 1)), "score": score[None],
                "geo": geo.astype(np.float16), "roi": roi[None]}
    quads = gather_quads(points, offsets, care > 0)
    owner = owner_map(quads, map_scale, (m, m), MAPS_DTYPE)
    maps = pack_maps(owner, roi_map(points, offsets, care, map_scale, (m, m)))
    table = word_table(quads) if len(quads) else np.zeros((0, len(TABLE_COLUMNS)), np.float32)
    return {WARPED_IMAGE: image, CROP_MAPS: maps, WORD_TABLE: table}
