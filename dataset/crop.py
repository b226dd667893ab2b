"""Read time of a page-mode cache: one crop of a page (preprocess/sample/page.py), cut as a window of its arrays.

The crop at origin o (page px, on window.grid_step) equals make_targets applied to the page's words
shifted by -o, with the legible words that the crop cuts turned don't-care, the maps clipped to the
crop and, beyond the page's canvas, background (score 0, geometry 0, ROI 1); its image is the page's
pixels in the window, zeros beyond the canvas (tests/test_page.py checks both against a direct
computation). Without cut words, owner and ROI are a slice of the page's packed maps and the
geometry is rebuilt from the owner slice (fill_geometry, the code make_targets runs); with cut
words, the crop's owner map is drawn again from its uncut words, as make_targets would, and the cut
words are drawn into the ROI.
"""
from __future__ import annotations

import numpy as np

from preprocess.sample.page import Page, pack_maps, unpack_maps
from preprocess.sample.targets import fill_geometry, owner_map, roi_map, word_table
from preprocess.sample.window import draw_crop, window_rng, word_boxes


def window(arr: np.ndarray, x: int, y: int, w: int, h: int, fill) -> np.ndarray:
    """arr[..., y:y + h, x:x + w], filled with `fill` where that lies off arr: a view when it lies on it."""
    H, W = arr.shape[-2:]
    if x >= 0 and y >= 0 and x + w <= W and y + h <= H:
        return arr[..., y:y + h, x:x + w]
    out = np.full(arr.shape[:-2] + (h, w), fill, arr.dtype)
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if x1 > x0 and y1 > y0:
        out[..., y0 - y:y1 - y, x0 - x:x1 - x] = arr[..., y0:y1, x0:x1]
    return out


def legible_boxes(page: Page) -> np.ndarray:
    """float64 (L, 4) boxes of the page's legible words, in owner order."""
    return word_boxes(page.points, page.offsets)[page.care > 0]


def choose(page: Page, size: int, step: int, seed: int, epoch: int, name: str, variant: int):
    """(origin, cut) of the crop of page (name, variant) at an epoch (window.draw_crop)."""
    return draw_crop(window_rng(seed, epoch, name, variant), legible_boxes(page), page.size, size, step, page.weight)


def crop_page(page: Page, origin, cut: np.ndarray, size: int, map_scale: float) -> dict[str, np.ndarray]:
    """image uint8 (3, S, S), score uint8 (1, m, m), geo float16 (5, m, m), roi uint8 (1, m, m) of the crop at
    origin (x, y) page px, with the legible words `cut` (L,) made don't-care."""
    image, owner, roi, quads, theta = _crop_parts(page, origin, cut, size, map_scale)
    m = owner.shape[0]
    geo = np.zeros((5, m, m), np.float16)
    if len(quads):
        fill_geometry(geo, owner, quads, map_scale, theta)
    return {"image": image, "score": (owner > 0).view(np.uint8)[None], "geo": geo, "roi": roi[None]}


def crop_page_compact(page: Page, origin, cut: np.ndarray, size: int, map_scale: float) -> dict[str, np.ndarray]:
    """The crop for dataset/expand.py: image uint8 (3, S, S), maps uint16 (1, m, m) (owner | don't-care bit, as a
    page stores them) and table float32 (L, 9), row k the word of owner value k + 1 (targets.word_table)."""
    ox, oy = int(origin[0]), int(origin[1])
    m, mx, my = round(size * map_scale), round(ox * map_scale), round(oy * map_scale)
    if not cut.any() and page.maps.size:   # the page's own maps, sliced: nothing to compute per pixel
        quads = page.legible_quads() - np.array([ox, oy], np.float64)
        maps = window(page.maps, mx, my, m, m, 0)
        return {"image": window(page.image, ox, oy, size, size, 0), "maps": maps[None],
                "table": word_table(quads, page.theta) if len(quads) else np.zeros((0, 9), np.float32)}
    image, owner, roi, quads, theta = _crop_parts(page, origin, cut, size, map_scale)
    return {"image": image, "maps": pack_maps(owner, roi)[None],
            "table": word_table(quads, theta) if len(quads) else np.zeros((0, 9), np.float32)}


def _crop_parts(page: Page, origin, cut: np.ndarray, size: int, map_scale: float):
    """(image, owner, roi, quads, theta) of a crop: owner values k + 1 index quads[k] (crop px) and theta[k]."""
    ox, oy = int(origin[0]), int(origin[1])
    m, mx, my = round(size * map_scale), round(ox * map_scale), round(oy * map_scale)
    quads = page.legible_quads() - np.array([ox, oy], np.float64)
    theta = page.theta
    owner, roi = unpack_maps(window(page.maps, mx, my, m, m, 0))
    if not page.maps.size:   # an empty page: an image --skip-bad could not decode, all don't-care
        roi[:] = 0
    if cut.any():
        quads, theta = quads[~cut], theta[~cut]
        owner = owner_map(quads, map_scale, (m, m)) * _on_page(page, mx, my, m)
        cut_points = page.legible_quads()[cut].reshape(-1, 2) - (ox, oy)
        roi_map(cut_points, np.arange(cut.sum() + 1) * 4, np.zeros(int(cut.sum()), np.uint8), map_scale, (m, m), roi)
        roi |= ~_on_page(page, mx, my, m)
    return window(page.image, ox, oy, size, size, 0), owner, roi, quads, theta


def _on_page(page: Page, mx: int, my: int, m: int) -> np.ndarray:
    """bool (m, m): the crop's map pixels that lie on the page's canvas."""
    h, w = page.maps.shape
    on = np.zeros((m, m), bool)
    on[max(0, -my):max(0, min(m, h - my)), max(0, -mx):max(0, min(m, w - mx))] = True
    return on


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
