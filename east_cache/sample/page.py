"""A page: one image's augmentation minus the crop, cached at build time; crops are cut from it at read time.

Variant v of a page draws the same resize, height jitter and rotation as make_sample's variant v
(sample_rng, sample_params) and warps the image once into a canvas that holds the whole rotated
image, corners included: page px = rotation_matrix px - (x0, y0). Its targets are kept at map
scale s in a form that a window of the page can be cut from exactly (east_cache/reader/crop.py):
- owner: 1 + index of the legible word whose shrunk quad covers the map pixel (later words win,
  as in make_targets), 0 elsewhere. The score is owner > 0; the 5 geometry channels are a function
  of the owner word's quad and the pixel's position, so they are rebuilt for the crop's window only
  (targets.fill_geometry), never stored;
- roi: 0 inside every don't-care word (whole polygon), as make_targets draws it;
- every word's points in page px, its care flag, each legible quad's angle (min_rect_angles) and
  its draw weight (window.word_weights).
The canvas sides are multiples of window.grid_step(s) px, so map side = page side x s is an integer.
The canvas also holds words that stick out of the image, up to WORD_REACH_PX beyond it; beyond the
canvas a crop is background: zero pixels, score 0, ROI 1.

The image is kept in square tiles of TILE_PX (Tiled): a crop's pixels are then a block of whole
tiles whose rows of tiles lie contiguous in memory, copied at memcpy speed, whereas the crop's rows
of a plain (3, H, W) page are 3 x S short runs, each at another place, which a core copies at about
half that speed. The maps are kept in tiles of the same page px (map_tile(s) map px; a crop's map
rows, 2 x S x s bytes each, copied at 0.6x the speed of the same bytes in tiles, measured). A
block holds a few more pixels than the crop (its side is whole tiles); the device cuts the crop out
of it (east_cache/reader/expand.py), the CPU paths through Tiled.window.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.ufo import CARE, ImageRecord
from east_cache.sample.geometry import (
    AugParams,
    compose,
    gather_quads,
    min_rect_angles,
    rotation_matrix,
    sample_params,
    transform_points,
)
from east_cache.sample.make import decode_for, sample_rng, warp
from east_cache.sample.targets import owner_map, roi_map
from east_cache.sample.window import grid_step, word_boxes, word_weights

MAPS_DTYPE = np.uint16       # a page's map pixel: owner in the low bits, don't-care in the top bit
DONT_CARE_BIT = 15
OWNER_MASK = (1 << DONT_CARE_BIT) - 1
MAX_LEGIBLE = OWNER_MASK     # legible words a page can hold
MAX_BLEED_PX = 4.0           # page px of interpolation fringe kept around the rotated image (more: only far upscales)
WORD_REACH_PX = 32.0         # page px past the image that the canvas grows to hold words annotated beyond its edge
TILE_PX = 32                 # side of the square tiles a page image is stored in


def tile_grid(size: tuple[int, int], tile: int = TILE_PX) -> tuple[int, int]:
    """(columns, rows) of tiles of side `tile` that cover an array of size (W, H)."""
    return -(-size[0] // tile), -(-size[1] // tile)


def map_tile(map_scale: float) -> int:
    """Side of a page's maps tiles: TILE_PX page px at map scale s (16 at 0.5, 8 at 0.25), so that the maps'
    tiles cover the same page px as the image's and a crop's block of either is the same tiles."""
    return round(TILE_PX * map_scale)


def image_values(size: tuple[int, int]) -> int:
    """uint8 values a page image of size (W, H) takes as tiles (3 per pixel of the tiles that cover it)."""
    tx, ty = tile_grid(size)
    return 3 * TILE_PX * TILE_PX * tx * ty


def map_values(size: tuple[int, int], map_scale: float) -> int:
    """uint16 values the maps of a page of size (W, H) page px take as tiles (one per map pixel of the tiles
    that cover the page: the same tiles as its image's)."""
    tx, ty = tile_grid(size)
    return map_tile(map_scale) ** 2 * tx * ty


def block_tiles(side: int, tile: int = TILE_PX) -> int:
    """Tiles per side of the block that holds any window of `side` px, wherever in a tile the window begins."""
    return (side + tile - 1) // tile + 1


def block_bytes(cfg: BuildConfig) -> int:
    """Bytes of a crop's blocks of image and maps tiles (what a reader copies per crop, crop_page_compact)."""
    n = block_tiles(cfg.input_size)
    return n * n * (3 * TILE_PX ** 2 + MAPS_DTYPE().itemsize * map_tile(cfg.map_scale) ** 2)


class Tiled(NamedTuple):
    """A 2-D array (with leading channels, or none) of width x height px, stored as square tiles:
    tiles[ty, tx] is the (*channels, T, T) square whose top left is px (tx, ty) x T; values past (width, height)
    are 0. A page's image is one (channels (3,), T = TILE_PX), its maps another (no channels, T = map_tile)."""
    tiles: np.ndarray   # (rows, columns, *channels, T, T)
    width: int
    height: int

    @property
    def tile(self) -> int:
        return self.tiles.shape[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        """(*channels, H, W): the array it holds."""
        return (*self.tiles.shape[2:-2], self.height, self.width)

    @property
    def size(self) -> int:
        return self.width * self.height

    @classmethod
    def from_array(cls, arr: np.ndarray, tile: int) -> "Tiled":
        """The tiles of an array (*channels, H, W)."""
        *c, h, w = arr.shape
        tx, ty = tile_grid((w, h), tile)
        padded = np.zeros((*c, ty * tile, tx * tile), arr.dtype)
        padded[..., :h, :w] = arr
        nc = len(c)
        tiles = padded.reshape(*c, ty, tile, tx, tile).transpose(nc, nc + 2, *range(nc), nc + 1, nc + 3)
        return cls(np.ascontiguousarray(tiles), w, h)

    def block(self, x: int, y: int, side: int) -> tuple[np.ndarray, tuple[int, int]]:
        """(tiles (n, n, *channels, T, T), (dx, dy)): the block of n = block_tiles(side, T) tiles per side whose
        px (dx, dy) is px (x, y), so that it holds the window [x, x + side) x [y, y + side); a view of the tiles
        where the block lies on them, zero tiles beyond."""
        t = self.tile
        n = block_tiles(side, t)
        tx, ty = x // t, y // t   # floor: a window may begin left of or above the array
        return window(self.tiles, tx, ty, n, n, 0, axis=0), (x - tx * t, y - ty * t)

    def window(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """(*channels, h, w): the values [x, x + w) x [y, y + h), 0 off the array (a copy)."""
        t = self.tile
        tx0, ty0 = x // t, y // t
        nx, ny = (x + w - 1) // t - tx0 + 1, (y + h - 1) // t - ty0 + 1
        block = window(self.tiles, tx0, ty0, nx, ny, 0, axis=0)
        nc = block.ndim - 4
        values = block.transpose(*range(2, 2 + nc), 0, nc + 2, 1, nc + 3).reshape(*block.shape[2:2 + nc],
                                                                                    ny * t, nx * t)
        dx, dy = x - tx0 * t, y - ty0 * t
        return np.ascontiguousarray(values[..., dy:dy + h, dx:dx + w])

    def array(self) -> np.ndarray:
        """(*channels, H, W): all of it (a copy)."""
        return self.window(0, 0, self.width, self.height)


def _runs(a: int, b: int, t: int) -> list[tuple[int, int, int, int, int]]:
    """[a, b) cut where tiles of side t begin: (first tile, end tile, first px in a tile, end px in a tile,
    offset in [a, b)) per run of whole tiles or part of one tile."""
    if a // t == (b - 1) // t:
        return [(a // t, a // t + 1, a % t, (b - 1) % t + 1, 0)]
    head, tail = -(-a // t), b // t
    runs = [(a // t, head, a % t, t, 0)] if a % t else []
    if tail > head:
        runs.append((head, tail, 0, t, head * t - a))
    if b % t:
        runs.append((tail, tail + 1, 0, b % t, tail * t - a))
    return runs


def put_rect(tiles: np.ndarray, x: int, y: int, values: np.ndarray) -> None:
    """Write values (h, w) at px (x, y) of tiles (rows, columns, T, T) (a Tiled's tiles, or a block of them): at
    most 9 slice assignments, whatever the rectangle's size."""
    t, (h, w) = tiles.shape[-1], values.shape
    by_rows = tiles.transpose(0, 2, 1, 3)   # (rows, T, columns, T): a view
    for ty0, ty1, r0, r1, sy in _runs(y, y + h, t):
        rows = values[sy:sy + (ty1 - ty0) * (r1 - r0)]
        for tx0, tx1, c0, c1, sx in _runs(x, x + w, t):
            part = rows[:, sx:sx + (tx1 - tx0) * (c1 - c0)]
            by_rows[ty0:ty1, r0:r1, tx0:tx1, c0:c1] = part.reshape(ty1 - ty0, r1 - r0, tx1 - tx0, c1 - c0)


def window(arr: np.ndarray, x: int, y: int, w: int, h: int, fill=0, axis: int = -2) -> np.ndarray:
    """arr's [y, y + h) x [x, x + w) along the axes (axis, axis + 1) (default: the last two), filled with `fill`
    where that lies off arr: a view when it lies on it."""
    ax = axis % arr.ndim
    keep = (slice(None),) * ax
    H, W = arr.shape[ax:ax + 2]
    if x >= 0 and y >= 0 and x + w <= W and y + h <= H:
        return arr[keep + (slice(y, y + h), slice(x, x + w))]
    out = np.full(arr.shape[:ax] + (h, w) + arr.shape[ax + 2:], fill, arr.dtype)
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if x1 > x0 and y1 > y0:
        out[keep + (slice(y0 - y, y1 - y), slice(x0 - x, x1 - x))] = arr[keep + (slice(y0, y1), slice(x0, x1))]
    return out


class Page(NamedTuple):
    image: Tiled           # uint8 RGB (3, H, W), page px, in tiles of TILE_PX
    maps: Tiled            # uint16 (H * s, W * s): owner | (1 - roi) << 15 (pack_maps), in tiles of map_tile(s)
    points: np.ndarray     # float32 (P, 2): every word's vertices, page px
    offsets: np.ndarray    # int64 (N + 1,): word k is points[offsets[k]:offsets[k + 1]], record order
    care: np.ndarray       # uint8 (N,): 1 = legible quad (drawn in score and geometry), 0 = don't-care
    theta: np.ndarray      # float64 (L,): min_rect_angles of each legible quad, L = care.sum()
    weight: np.ndarray     # float64 (L,): each legible word's chance to be the one a crop is drawn around
    warning: str | None = None    # from the image decoder (frame size mismatch), else None
    exif_applied: bool = False    # the decoder turned the image as its EXIF orientation says

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) in page px."""
        return self.image.width, self.image.height

    def write_into(self, image: np.ndarray, maps: np.ndarray, size: np.ndarray) -> None:
        """Store the page in flat fields of a fixed-size record (max_page_size): the image's and the maps'
        tiles at the start of their fields, the rest left untouched (a hole in a sparse file costs no disk),
        and (W, H) in size."""
        w, h = self.size
        image[:self.image.tiles.size] = self.image.tiles.ravel()
        maps[:self.maps.tiles.size] = self.maps.tiles.ravel()
        size[:] = (w, h)

    @classmethod
    def from_fields(cls, image: np.ndarray, maps: np.ndarray, size, points: np.ndarray, offsets: np.ndarray,
                    care: np.ndarray, weight: np.ndarray, map_scale: float, theta: np.ndarray | None = None) -> "Page":
        """A page over flat record fields (views, nothing copied) and its words; theta computed when not given."""
        w, h = (int(v) for v in size)
        if theta is None:
            theta = min_rect_angles(gather_quads(points, offsets, care > 0))
        tx, ty = tile_grid((w, h))
        t = map_tile(map_scale)
        return cls(Tiled(image[:image_values((w, h))].reshape(ty, tx, 3, TILE_PX, TILE_PX), w, h),
                   Tiled(maps[:map_values((w, h), map_scale)].reshape(ty, tx, t, t),
                         round(w * map_scale), round(h * map_scale)),
                   points, offsets, care, theta, weight)

    @property
    def owner(self) -> np.ndarray:
        """(H * s, W * s): 1 + legible word index (order of the care == 1 words), 0 = none."""
        return unpack_maps(self.maps.array())[0]

    @property
    def roi(self) -> np.ndarray:
        """uint8 (H * s, W * s): 0 inside don't-care words, 1 elsewhere."""
        return unpack_maps(self.maps.array())[1]

    def legible_quads(self) -> np.ndarray:
        """float64 (L, 4, 2) page px, in owner order."""
        return gather_quads(self.points, self.offsets, self.care > 0)


def page_bytes(size: tuple[int, int], map_scale: float) -> int:
    """Bytes a page of size (W, H) page px holds: 3 per pixel of its image's tiles and 2 per map pixel of them."""
    return image_values(size) + MAPS_DTYPE().itemsize * map_values(size, map_scale)


def expected_page_size(frame_w: int, frame_h: int, cfg: BuildConfig, name: str, variant: int) -> tuple[int, int]:
    """(W, H) of page `variant` of an image with this frame, from its augmentation draw alone (no decode): an
    upper bound, by at most the fringe and a grid step per side, of make_page's when no word lies off the image."""
    params = sample_params(sample_rng(cfg.seed, name, variant), frame_w, frame_h, cfg)
    widest = 0.0   # a decode so coarse that the fringe is MAX_BLEED_PX
    return page_frame(params, frame_w, frame_h, widest, widest, np.zeros((0, 2)), grid_step(cfg.map_scale))[2:]


def pack_maps(owner: np.ndarray, roi: np.ndarray) -> np.ndarray:
    """uint16 maps of an owner map (values <= MAX_LEGIBLE) and an ROI map (0 / 1)."""
    return owner.astype(MAPS_DTYPE) | ((1 - roi.astype(MAPS_DTYPE)) << DONT_CARE_BIT)


def unpack_maps(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner uint16, roi uint8) of packed maps."""
    return maps & OWNER_MASK, (1 - (maps >> DONT_CARE_BIT)).astype(np.uint8)


def page_frame(p: AugParams, frame_w: int, frame_h: int, sx: float, sy: float, points: np.ndarray,
               step: int) -> tuple[float, float, int, int]:
    """(x0, y0, W, H): the canvas in rotation_matrix px, W and H multiples of step. It covers the rotated image,
    the fringe that bilinear interpolation of an image decoded at (sx, sy) times the frame adds around it (up to
    MAX_BLEED_PX), and the words' points (rotation_matrix px) up to WORD_REACH_PX beyond that.

    A frame pixel k covers [k - 0.5, k + 0.5]; interpolation reaches one decoded pixel (1 / sx frame px) past
    the outermost pixel centres, half a decoded pixel past that edge."""
    rotate = rotation_matrix(p, frame_w, frame_h)
    corners = np.array([[-0.5, -0.5], [frame_w - 0.5, -0.5], [frame_w - 0.5, frame_h - 0.5], [-0.5, frame_h - 0.5]])
    rotated = transform_points(rotate, corners)
    scale = float(np.linalg.svd(rotate[:, :2], compute_uv=False)[0])
    bleed = min(MAX_BLEED_PX, scale * 0.5 / max(min(sx, sy), 1e-9) + 1)
    lo, hi = rotated.min(axis=0) - bleed, rotated.max(axis=0) + bleed
    if len(points):
        lo = np.maximum(np.minimum(lo, points.min(axis=0)), lo - WORD_REACH_PX)
        hi = np.minimum(np.maximum(hi, points.max(axis=0)), hi + WORD_REACH_PX)
    (x0, y0), (x1, y1) = np.floor(lo), hi
    return float(x0), float(y0), step * math.ceil((x1 - x0) / step), step * math.ceil((y1 - y0) / step)


def max_page_size(cfg: BuildConfig) -> tuple[int, int]:
    """(W, H) that no page under cfg exceeds, both at once: a square frame, tallest jitter, largest rotation
    (a rotated box's area grows with the angle up to 45 degrees), plus bleed, word reach and rounding."""
    long_side, tall = cfg.image_size, cfg.image_size * (1 + cfg.height_jitter)
    t = math.radians(min(abs(cfg.max_rotation), 45.0))
    step, pad = grid_step(cfg.map_scale), 2 * (MAX_BLEED_PX + WORD_REACH_PX) + 1
    w = long_side * math.cos(t) + tall * math.sin(t) + pad
    h = long_side * math.sin(t) + tall * math.cos(t) + pad
    return step * math.ceil(w / step), step * math.ceil(h / step)


def make_page(rec: ImageRecord, cfg: BuildConfig, variant: int) -> Page:
    """Page `variant` of image `rec` under `cfg`."""
    params = sample_params(sample_rng(cfg.seed, rec.name, variant), rec.width, rec.height, cfg)
    rotate = rotation_matrix(params, rec.width, rec.height)
    d = decode_for(rec, rotate)
    x0, y0, w, h = page_frame(params, rec.width, rec.height, d.sx, d.sy, transform_points(rotate, rec.points),
                              grid_step(cfg.map_scale))
    frame_to_page = compose(np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0]]), rotate)
    image = warp(d, frame_to_page, (w, h))
    points = transform_points(frame_to_page, rec.points).astype(np.float32)
    offsets = np.asarray(rec.offsets, np.int64)
    care = (rec.reason == CARE).astype(np.uint8)
    if care.sum() > MAX_LEGIBLE:
        raise DataError(f"{rec.source}: image {rec.name} has {int(care.sum())} legible words; a page holds at most "
                        f"{MAX_LEGIBLE}: split the image, or build with --crop build")
    try:
        quads = gather_quads(points, offsets, care > 0)
    except ValueError as e:
        raise DataError(f"{rec.source}: image {rec.name}: {e}") from None
    shape = (round(h * cfg.map_scale), round(w * cfg.map_scale))
    owner = owner_map(quads, cfg.map_scale, shape, MAPS_DTYPE)
    maps = pack_maps(owner, roi_map(points, offsets, care, cfg.map_scale, shape))
    weight = word_weights(word_boxes(points, offsets)[care > 0], (w, h), cfg.input_size, grid_step(cfg.map_scale))
    return Page(Tiled.from_array(image.transpose(2, 0, 1), TILE_PX), Tiled.from_array(maps, map_tile(cfg.map_scale)),
                points, offsets, care, min_rect_angles(quads), weight, d.warning, d.exif_applied)
