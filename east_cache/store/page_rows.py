"""A page stored resized only (--geometry read), raw: its pixels row after row and, built with --levels, its half
level's (image codec "raw" of such a page, RawRows; the record kinds are store/format.py RAW_PAGE and
RAW_LEVELS_PAGE).

Rows, not tiles: a warp reads any rotated region of them in place, where tiles would first be gathered into rows
(page_record.RawTiles answers the same questions for pages stored warped). The half level (half_level: each px the
rounded mean of 2 x 2 page px on even px) is what a crop that shrinks the page by about 2 or more reads instead
(east_cache/sample/epoch_geometry.py read_level): a quarter of the px, and no aliasing. It costs a quarter more bytes
and build time, for runs that draw crops at scale < 0.71 only (a training run's --scale; the default, 1, never does),
so it is stored with --levels alone; without it such a crop averages the page's own px under it (the same px:
reader/warped.py level_region). A jpeg page keeps the same level as tiles of its own (store/page_jpeg.py).
"""
from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

from east_cache.store.page_record import padded_rect


def half_size(size: tuple[int, int]) -> tuple[int, int]:
    """(W // 2, H // 2): the size of a page's half level, each px the mean of page px [2x, 2x + 2) x [2y, 2y + 2)."""
    return size[0] // 2, size[1] // 2


def half_level(pixels: np.ndarray) -> np.ndarray:
    """uint8 (H // 2, W // 2, 3): the half level of page px (H, W, 3), each px the rounded mean of a 2 x 2 block
    of them aligned on even px (cv2.INTER_AREA at exactly 1/2; an odd last row or column has no block)."""
    h, w = pixels.shape[0] // 2, pixels.shape[1] // 2
    if not h or not w:
        return np.zeros((h, w, 3), np.uint8)
    return cv2.resize(pixels[:2 * h, :2 * w], (w, h), interpolation=cv2.INTER_AREA)


class PageRows(NamedTuple):
    """A page image stored row after row, uint8 (H, W, 3) RGB channels last: what a reader warps a crop from reads
    it in place (a view of the record, rows strided), nothing copied. A page built with --levels keeps its half
    level beside it (half_level), which a crop that shrinks the page by about 2 or more reads instead (a quarter of
    the px)."""
    pixels: np.ndarray   # (H, W, 3)
    half: np.ndarray | None = None   # (H // 2, W // 2, 3): half_level(pixels), where stored

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    def half_image(self) -> "PageRows | None":
        """The half level as a page image of its own (its px 2 x 2 page px), None where none is stored."""
        return None if self.half is None else PageRows(self.half)

    def hwc(self, x: int, y: int, w: int, h: int) -> tuple[np.ndarray, int, int]:
        """(pixels, x0, y0): the part of [x, x + w) x [y, y + h) on the page, a view, and where it begins (page px);
        what lies off the page reads 0 to a warp with a zero border."""
        x0, y0 = max(x, 0), max(y, 0)
        return self.pixels[y0:max(y0, min(y + h, self.height)), x0:max(x0, min(x + w, self.width))], x0, y0

    def rect(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """uint8 (3, h, w): the page's px [x, x + w) x [y, y + h), 0 off the page (a copy)."""
        return np.ascontiguousarray(padded_rect(self.pixels, x, y, w, h, 0, axis=0).transpose(2, 0, 1))

    def array(self) -> np.ndarray:
        return self.rect(0, 0, self.width, self.height)


class RawRows:
    """Image codec "raw" of a page warped at read time (--geometry read): the page's pixels row after row, (H, W, 3)
    flattened, with `levels` (--levels) then its half level's (H // 2, W // 2, 3) the same way, and no maps (each
    crop's are drawn from the words under its epoch's warp). Rows, not tiles: a warp reads any rotated region of them
    in place, where tiles would first be gathered into rows (RawTiles answers the same questions for pages stored
    warped). The half level adds a quarter of the page's bytes; a crop of scale 0.5 to 0.71 reads a quarter of the
    px from it (epoch_geometry.read_level)."""
    name = "raw"
    stores_maps = False

    def __init__(self, levels: bool = False):
        self.levels = levels

    def values(self, size: tuple[int, int]) -> int:
        hw, hh = half_size(size) if self.levels else (0, 0)
        return 3 * (size[0] * size[1] + hw * hh)

    def encode(self, image: np.ndarray, where: str = "") -> PageRows:
        """The page image of uint8 RGB (3, H, W)."""
        pixels = np.ascontiguousarray(image.transpose(1, 2, 0))
        return PageRows(pixels, half_level(pixels) if self.levels else None)

    def write(self, image: PageRows, field: np.ndarray) -> int:
        n = image.pixels.size
        field[:n] = image.pixels.reshape(-1)
        if not self.levels:
            return n
        field[n:n + image.half.size] = image.half.reshape(-1)
        return n + image.half.size

    def view(self, field: np.ndarray, size: tuple[int, int], where: str = "") -> PageRows:
        (w, h), (hw, hh) = size, half_size(size)
        n = 3 * w * h
        half = field[n:n + 3 * hw * hh].reshape(hh, hw, 3) if self.levels else None
        return PageRows(field[:n].reshape(h, w, 3), half)


RAW_ROWS = RawRows()                    # --geometry read, the default
RAW_LEVELS_ROWS = RawRows(levels=True)  # --geometry read --levels
