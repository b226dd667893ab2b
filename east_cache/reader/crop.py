"""Read time of a page-mode cache: one crop of a page (store/page_record.py), cut out of its arrays.

The crop at origin o (page px, on crop_draw.grid_step) equals make_targets applied to the page's words
shifted by -o, with the legible words that the crop cuts turned don't-care, the maps clipped to the
crop and, beyond the page's canvas, background (score 0, geometry 0, ROI 1); its image is the page's
pixels in the crop, zeros beyond the canvas (tests/test_page.py checks both against a direct
computation). Without cut words, owner and ROI are a slice of the page's packed maps and the
geometry is rebuilt from the owner slice (fill_geometry, the code make_targets runs); with cut
words, the pixels they owned are drawn again from the uncut words (crop_maps).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from east_cache.budget import ByteBudget
from east_cache.sample.crop_draw import CropDraw, grid_step, word_boxes
from east_cache.sample.geometry import shrink_quads
from east_cache.sample.targets import (
    fill_geometry,
    fill_polygon,
    map_polygon,
    word_table,
)
from east_cache.store.page_record import (
    CROP_IN_BLOCK,
    DONT_CARE_BIT,
    IMAGE_BLOCK,
    MAPS_BLOCK,
    MAPS_DTYPE,
    MAPS_PATCH,
    MOVES_WITH_X,
    MOVES_WITH_Y,
    OWNER_MASK,
    TABLE_COLUMNS,
    WORD_TABLE,
    Page,
    unpack_maps,
)


class PageWords(NamedTuple):
    """What every crop of a page needs from its words, derived once per page by a reader that keeps it."""
    boxes: np.ndarray             # float64 (L, 4): legible_boxes
    quads: np.ndarray             # float64 (L, 4, 2) page px: legible_quads
    whole: np.ndarray             # int32 (L, 4, 2) map px of the page: each legible quad (map_polygon)
    shrunk: np.ndarray            # int32 (L, 4, 2) map px of the page: each shrunk quad, as the page's owner map has it
    draw: CropDraw | None         # the page's crop draw (None: not asked for)
    table: np.ndarray             # float64 (L, C) page px: word_table of the legible quads (a crop's is a shift of it)
    patches: Patches | None = None   # the page's maps patches by set of cut words, kept (None: not kept)


class Patches(dict):
    """A page's maps patches in page map px (page_patch), by the set of cut words (the bytes of their indices):
    a page's crops cut the same few sets again and again, epoch after epoch, and a patch does not depend on
    where the crop lies. Kept while the reader's budget for them lasts."""

    def __init__(self, budget: ByteBudget):
        super().__init__()
        self.budget = budget

    def keep(self, key: bytes, patch) -> None:
        if self.budget.take(0 if patch is None else patch[2].nbytes + 64):
            self[key] = patch


def page_words(page: Page, size: int, map_scale: float, draw: bool = True,
               patches: ByteBudget | None = None, best: ByteBudget | None = None) -> PageWords:
    """A page's PageWords for crops of side `size` page px; draw: with its CropDraw; patches: the reader's budget
    for the maps patches the page keeps, None: it keeps none; best: its budget for the draw's best origins, None:
    the draw keeps none."""
    boxes, quads = legible_boxes(page), page.legible_quads()
    return PageWords(boxes, quads, map_polygon(quads, map_scale), map_polygon(shrink_quads(quads), map_scale),
                     CropDraw(boxes, page.size, size, grid_step(map_scale), page.weight, best) if draw else None,
                     word_table(quads, page.theta, np.float64) if len(quads) else np.zeros((0, len(TABLE_COLUMNS))),
                     None if patches is None else Patches(patches))


def shifted_table(table: np.ndarray, origin) -> np.ndarray:
    """float32 word_table of quads shifted by -origin, from the unshifted quads' float64 table (the shift of a
    float64 quad by integer px is exact, so this equals word_table of the shifted quads to within float32). One
    subtraction of a row that is +0.0 in the columns that do not move (x - +0.0 is x, -0.0 included)."""
    shift = np.zeros(table.shape[1])
    shift[MOVES_WITH_X], shift[MOVES_WITH_Y] = origin[0], origin[1]
    return (table - shift).astype(np.float32)


def words_bytes(words: PageWords) -> int:
    """Bytes a PageWords holds (its arrays; its CropDraw's counts: kept best origins have their own budget)."""
    arrays = [words.boxes, words.quads, words.whole, words.shrunk, words.table]
    return sum(a.nbytes for a in arrays) + (0 if words.draw is None else words.draw.nbytes())


def legible_boxes(page: Page) -> np.ndarray:
    """float64 (L, 4) boxes of the page's legible words, in owner order."""
    return word_boxes(page.points, page.offsets)[page.care > 0]


def crop_page(page: Page, origin, cut: np.ndarray, size: int, map_scale: float,
              words: PageWords | None = None) -> dict[str, np.ndarray]:
    """image uint8 (3, S, S), score uint8 (1, m, m), geo float16 (5, m, m), roi uint8 (1, m, m) of the crop at
    origin (x, y) page px, with the legible words `cut` (L,) made don't-care. words: page_words(page, ...), when
    the caller keeps them."""
    maps, quads, theta = crop_maps(page, origin, cut, size, map_scale, words)
    owner, roi = unpack_maps(maps)
    geo = np.zeros((5, *maps.shape), np.float16)
    if len(quads):
        fill_geometry(geo, owner, quads, map_scale, theta)
    return {"image": page.image.rect(int(origin[0]), int(origin[1]), size, size),
            "score": (owner > 0).view(np.uint8)[None], "geo": geo, "roi": roi[None]}


def crop_page_compact(page: Page, origin, cut: np.ndarray, size: int, map_scale: float,
                      words: PageWords | None = None) -> dict[str, np.ndarray]:
    """The compact crop item (its keys and what they hold: store/page_record.py) for east_cache/reader/expand.py:
    the blocks of the page's image and maps tiles that hold the crop (Tiled.block; the crop's maps begin at
    (dx, dy) x s in theirs), where the crop begins in them, the maps patch of the cut words (collate writes it
    over the copied tiles: page_record.put_rect) and the word table shifted into the crop."""
    words = page_words(page, size, map_scale, draw=False) if words is None else words
    ox, oy = int(origin[0]), int(origin[1])
    tiles, (dx, dy) = page.image.block(ox, oy, size)
    m, mx, my = round(size * map_scale), round(ox * map_scale), round(oy * map_scale)
    maps, (mdx, mdy) = page.maps.block(mx, my, m)
    if not page.maps.size:   # an empty page (an image --skip-bad could not decode): all don't-care
        maps = np.full(maps.shape, 1 << DONT_CARE_BIT, MAPS_DTYPE)
    side = len(maps) * page.maps.tile
    patch = rect_patch(page, cut, words, mx - mdx, my - mdy, side, side)
    return {IMAGE_BLOCK: tiles, CROP_IN_BLOCK: np.array([dx, dy, size], np.int32), MAPS_BLOCK: maps,
            MAPS_PATCH: patch, WORD_TABLE: shifted_table(words.table, origin)}


def crop_maps(page: Page, origin, cut: np.ndarray, size: int, map_scale: float, words: PageWords | None = None):
    """(maps uint16 (m, m) packed as a page's, quads (crop px), theta) of a crop: owner value k + 1 is quads[k].
    The page's maps in the crop (maps_and_patch), with its patch applied to a copy where it has one."""
    words = page_words(page, size, map_scale, draw=False) if words is None else words
    maps, patch = maps_and_patch(page, origin, cut, size, map_scale, words)
    if patch is not None:
        apply_patch(maps, patch)
    return maps, words.quads - np.array([int(origin[0]), int(origin[1])], np.float64), page.theta


def apply_patch(maps: np.ndarray, patch: tuple) -> None:
    """Write a maps_and_patch patch (x0, y0, values (h, w)) into maps (..., m, m)."""
    x0, y0, values = patch
    maps[..., y0:y0 + values.shape[0], x0:x0 + values.shape[1]] = values


def maps_and_patch(page: Page, origin, cut: np.ndarray, size: int, map_scale: float, words: PageWords):
    """(maps, patch) of the crop at origin with the legible words `cut` made don't-care: maps (m, m), a copy of
    the page's maps in the crop, patch None or (x0, y0, values (h, w)), the rectangle of it that the cut words
    change, as it must read instead (apply_patch)."""
    ox, oy = int(origin[0]), int(origin[1])
    m, mx, my = round(size * map_scale), round(ox * map_scale), round(oy * map_scale)
    if not page.maps.size:   # an empty page (an image --skip-bad could not decode): all don't-care
        return np.full((m, m), 1 << DONT_CARE_BIT, MAPS_DTYPE), None
    return page.maps.rect(mx, my, m, m), rect_patch(page, cut, words, mx, my, m, m)


def rect_patch(page: Page, cut: np.ndarray, words: PageWords, x: int, y: int, w: int, h: int):
    """None or (x0, y0, values (h', w')): the part of the page's patch for the legible words `cut` (page_patch)
    in the rectangle [x, x + w) x [y, y + h) page map px, (x0, y0) from its corner; a view of the patch. A reader
    copies a crop's maps once, into its batch, and this over them."""
    if not cut.any() or not page.maps.size:
        return None
    patch = page_patch(page, cut, words)
    if patch is None:
        return None
    px, py, values = patch
    ph, pw = values.shape
    x0, y0, x1, y1 = max(px, x), max(py, y), min(px + pw, x + w), min(py + ph, y + h)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0 - x, y0 - y, values[y0 - py:y1 - py, x0 - px:x1 - px]


def page_patch(page: Page, cut: np.ndarray, words: PageWords):
    """None or (x0, y0, values uint16 (h, w)) in page map px: what the legible words `cut` (L,) change in the
    page's maps, within the box of their polygons on the canvas. Kept in words.patches where it has them.

    Only the pixels that a cut word owned are drawn again, from the uncut words whose shrunk quads reach them
    (the last one wins, as in make_targets), and the cut words' whole polygons get the don't-care bit, on the
    page's canvas only. Polygons are drawn by fill_polygon, whose pixels move with an integer shift and do not
    depend on where a buffer clips them, so the patch of a crop (whose origin is an even number of map px,
    where np.around commutes with the shift) is its part of this one."""
    key = np.flatnonzero(cut).tobytes()
    if words.patches is not None and key in words.patches:
        return words.patches[key]
    mh, mw = page.maps.shape
    whole = words.whole[cut]
    (x0, y0), (x1, y1) = np.maximum(whole.min(axis=(0, 1)), 0), np.minimum(whole.max(axis=(0, 1)) + 1, (mw, mh))
    patch = None
    if x1 > x0 and y1 > y0:
        region = page.maps.rect(int(x0), int(y0), int(x1 - x0), int(y1 - y0))
        was_cut = np.zeros(len(words.quads) + 1, bool)
        was_cut[np.flatnonzero(cut) + 1] = True
        hit = was_cut[region & OWNER_MASK]
        if hit.any():
            polys = words.shrunk - np.array([x0, y0], np.int32)
            near = ~cut & np.all((polys.max(axis=1) >= 0) & (polys.min(axis=1) < (x1 - x0, y1 - y0)), axis=1)
            redrawn = np.zeros(hit.shape, MAPS_DTYPE)
            for k in np.flatnonzero(near):
                fill_polygon(redrawn, polys[k], int(k) + 1)
            region[hit] = (region[hit] & (1 << DONT_CARE_BIT)) | redrawn[hit]
        dont_care = np.zeros(hit.shape, np.uint8)
        for poly in whole - np.array([x0, y0], np.int32):
            fill_polygon(dont_care, poly, 1)
        region |= dont_care.astype(MAPS_DTYPE) << DONT_CARE_BIT
        patch = (int(x0), int(y0), region)
    if words.patches is not None:
        words.patches.keep(key, patch)
    return patch


def crop_words(page: Page, origin, cut: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 (P, 2) crop px, offsets (N + 1,), care uint8 (N,)) of the words whose box overlaps the crop,
    cut legible words as don't-care: what make_sample records for its crop."""
    boxes = word_boxes(page.points, page.offsets) - np.tile(np.asarray(origin, np.float64), 2)
    keep = np.all((boxes[:, 2:] > 0) & (boxes[:, :2] < size), axis=1)
    care = page.care.copy()
    care[np.flatnonzero(care)[cut]] = 0
    counts = np.diff(page.offsets)
    points = (page.points.astype(np.float64) - np.asarray(origin, np.float64))[np.repeat(keep, counts)]
    return (points.astype(np.float32), np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64),
            care[keep].astype(np.uint8))
