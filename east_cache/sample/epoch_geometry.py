"""The geometry a reader draws every epoch (--geometry read): a page's height factor, rotation and crop.

A page is stored resized only (page.py page_params: height 1, angle 0). At epoch e, item (image name, variant)
draws, from crop_rng(seed, e, name, variant) alone and in this order, its height factor U[1 - j, 1 + j] and its
angle U[-r, r] degrees (the order of geometry.sample_params), then its crop. The warp (page_warp) scales the
page's height by the factor and rotates it, both about the page's centre, as the on-the-fly pipelines do after
resizing (the centre of the canvas, not of the image in it: the two differ by a shift, which the crop draw that
follows makes irrelevant), then moves the warped canvas's box to the origin. The crop is drawn in that warped
frame by the page-mode rule (crop_draw.draw_crop: a legible word by the page's weights, then a crop holding it
that cuts no other legible word, else fewest), from the legible quads mapped by the warp. A crop is then one
matrix, page px -> crop px: the reader warps the page's pixels under the crop once with it (bilinear) and makes
the crop's targets from the page's words mapped by it (make.words_in_crop, then targets.make_targets).

Pure numpy: no I/O. The words' weights were computed on the page unwarped (page.py): a warp of a few degrees
moves which neighbours a crop can avoid cutting only at the margins.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from east_cache.config import BuildConfig
from east_cache.sample.crop_draw import crop_rng, draw_crop, grid_step
from east_cache.sample.geometry import transform_points


class EpochGeometry(NamedTuple):
    """One epoch's draw for a page, and the crop it makes."""
    height: float          # vertical scale of the page, U[1 - height_jitter, 1 + height_jitter]
    angle: float           # degrees, U[-max_rotation, max_rotation], about the page's centre
    origin: np.ndarray     # int64 (2,): the crop's top left in the warped frame, px (on the crop grid)
    matrix: np.ndarray     # float64 (2, 3): page px -> crop px
    cut: np.ndarray        # bool (L,): the page's legible words (in their order) that the crop cuts


def page_warp(page_size: tuple[int, int], height: float, angle: float, step: int) -> tuple[np.ndarray, tuple[int, int]]:
    """(page px -> warped px (2, 3), (W', H')): the height scaled and the page rotated about its centre, the box of
    the warped canvas moved to (0, 0) and its sides rounded up to multiples of step (the crop grid's)."""
    w, h = page_size
    centre = np.array([w / 2, h / 2])
    t = math.radians(angle)
    c, s = math.cos(t), math.sin(t)
    linear = np.array([[c, -s * height], [s, c * height]])   # rotation after the vertical scale, about the centre
    warp = np.column_stack([linear, centre - linear @ centre])
    corners = transform_points(warp, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64))
    lo, hi = np.floor(corners.min(axis=0)), corners.max(axis=0)
    size = (step * math.ceil((hi[0] - lo[0]) / step), step * math.ceil((hi[1] - lo[1]) / step)) if w and h else (0, 0)
    return shifted(warp, -lo), size


def shifted(matrix: np.ndarray, by) -> np.ndarray:
    """matrix (2, 3) followed by a shift of `by` px (x, y), a new matrix: compose(translation, matrix) without its
    3 x 3 products."""
    out = np.array(matrix, np.float64)
    out[:, 2] += by
    return out


def quad_boxes(quads: np.ndarray) -> np.ndarray:
    """float64 (L, 4): x_lo, y_lo, x_hi, y_hi of quads (L, 4, 2)."""
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)
    return np.hstack([q.min(axis=1), q.max(axis=1)])


def draw_geometry(rng: np.random.Generator, quads: np.ndarray, page_size: tuple[int, int], weights: np.ndarray,
                  cfg: BuildConfig, augment: bool = True) -> EpochGeometry:
    """The draw of a page whose legible quads (L, 4, 2) page px have draw weights (L,): height, angle (1 and 0
    without augment: an unaugmented crop, as a validation set reads), then the crop in the warped frame."""
    height = float(rng.uniform(1 - cfg.height_jitter, 1 + cfg.height_jitter)) if augment else 1.0
    angle = float(rng.uniform(-cfg.max_rotation, cfg.max_rotation)) if augment else 0.0
    step = grid_step(cfg.map_scale)
    warp, size = page_warp(page_size, height, angle, step)
    boxes = quad_boxes(transform_points(warp, quads)) if len(quads) else np.zeros((0, 4))
    origin, cut = draw_crop(rng, boxes, size, cfg.input_size, step, weights if len(quads) else None)
    matrix = shifted(warp, -origin)
    return EpochGeometry(height, angle, origin, matrix, cut)


def epoch_geometry(cfg: BuildConfig, epoch: int, name: str, variant: int, quads: np.ndarray,
                   page_size: tuple[int, int], weights: np.ndarray, augment: bool = True) -> EpochGeometry:
    """The draw of page (image name, variant) at an epoch: from crop_rng's generator for that key, so the same in
    every process, worker, batch order and rank, and again on an exact resume."""
    return draw_geometry(crop_rng(cfg.seed, epoch, name, variant), quads, page_size, weights, cfg, augment)


def source_rect(matrix: np.ndarray, size: int, margin: int = 1) -> tuple[int, int, int, int]:
    """(x, y, w, h): the page px a crop of side `size` under matrix (page px -> crop px) reads, bilinear
    interpolation's neighbours and `margin` px more included: the box of the crop's inverse image."""
    inverse = np.linalg.inv(np.vstack([matrix, [0, 0, 1]]))[:2]
    edge = np.array([[-1, -1], [size, -1], [size, size], [-1, size]], np.float64)
    corners = transform_points(inverse, edge)
    lo, hi = np.floor(corners.min(axis=0)) - margin, np.ceil(corners.max(axis=0)) + margin
    return int(lo[0]), int(lo[1]), int(hi[0] - lo[0]) + 1, int(hi[1] - lo[1]) + 1
