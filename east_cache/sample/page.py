"""A page's content: one image's augmentation minus the crop, made at build time; crops are cut from it at read time.

Under --geometry build, variant v of a page draws the same resize, height jitter and rotation as make_sample's
variant v (sample_rng, sample_params) and warps the image once into a canvas that holds the whole rotated
image, corners included: page px = rotation_matrix px - (x0, y0). Under --geometry read (page_params), the page
is only resized (height 1, angle 0): the reader draws each epoch's height, rotation and crop from it
(east_cache/sample/epoch_geometry.py). Its targets are kept at map
scale s in a form that any crop of the page can be cut from exactly (east_cache/reader/crop.py):
- owner: 1 + index of the legible word whose shrunk quad covers the map pixel (later words win,
  as in make_targets), 0 elsewhere. The score is owner > 0; the 5 geometry channels are a function
  of the owner word's quad and the pixel's position, so they are rebuilt for the crop alone
  (targets.fill_geometry), never stored;
- roi: 0 inside every don't-care word (whole polygon), as make_targets draws it;
- every word's points in page px, its care flag, each legible quad's angle (min_rect_angles) and
  its draw weight (crop_draw.word_weights; for a page warped at read time, weighed in its warped frames too).
The canvas sides are multiples of crop_draw.grid_step(s) px, so map side = page side x s is an integer.
The canvas also holds words that stick out of the image, up to WORD_REACH_PX beyond it; beyond the
canvas a crop is background: zero pixels, score 0, ROI 1.

How a page is stored (tiles, the maps' bits) is the page record's concern: east_cache/store/page_record.py.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.imageio import Decoded
from east_cache.ingest.ufo import CARE, ImageRecord
from east_cache.sample.crop_draw import grid_step, word_boxes, word_weights
from east_cache.sample.epoch_geometry import page_warp, quad_boxes
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

MAX_BLEED_PX = 4.0           # page px of interpolation fringe kept around the rotated image (more: only far upscales)
WORD_REACH_PX = 32.0         # page px past the image that the canvas grows to hold words annotated beyond its edge


class PageContent(NamedTuple):
    """What make_page makes: a page of W x H page px and its maps of (W s) x (H s) map px."""
    image: np.ndarray      # uint8 RGB (3, H, W), channels first (a view of the warped canvas)
    owner: np.ndarray | None   # int32 (H s, W s): 1 + legible word index (order of the care == 1 words), 0 = none
    roi: np.ndarray | None     # uint8 (H s, W s): 0 inside don't-care words, 1 elsewhere (both None: not made)
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
        return self.image.shape[2], self.image.shape[1]


def page_params(cfg: BuildConfig, name: str, variant: int, frame_w: int, frame_h: int) -> AugParams:
    """The warp a page is stored with: make_sample's draw for the variant (--geometry build), or the resize alone
    (--geometry read: height and angle are drawn by the reader every epoch)."""
    params = sample_params(sample_rng(cfg.seed, name, variant), frame_w, frame_h, cfg)
    return params._replace(height=1.0, angle=0.0) if cfg.warps_at_read else params


def expected_page_size(frame_w: int, frame_h: int, cfg: BuildConfig, name: str, variant: int) -> tuple[int, int]:
    """(W, H) of page `variant` of an image with this frame, from its augmentation draw alone (no decode): an
    upper bound, by at most the fringe and a grid step per side, of make_page's when no word lies off the image."""
    params = page_params(cfg, name, variant, frame_w, frame_h)
    widest = 0.0   # a decode so coarse that the fringe is MAX_BLEED_PX
    return page_frame(params, frame_w, frame_h, widest, widest, np.zeros((0, 2)), grid_step(cfg.map_scale))[2:]


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
    jitter, rotation = (0.0, 0.0) if cfg.warps_at_read else (cfg.height_jitter, cfg.max_rotation)
    long_side, tall = cfg.image_size, cfg.image_size * (1 + jitter)
    t = math.radians(min(abs(rotation), 45.0))
    step, pad = grid_step(cfg.map_scale), 2 * (MAX_BLEED_PX + WORD_REACH_PX) + 1
    w = long_side * math.cos(t) + tall * math.sin(t) + pad
    h = long_side * math.sin(t) + tall * math.cos(t) + pad
    return step * math.ceil(w / step), step * math.ceil(h / step)


def page_geometry(rec: ImageRecord, cfg: BuildConfig, variant: int) -> tuple[Decoded, np.ndarray, tuple[int, int]]:
    """(the source decoded as the page needs it, frame px -> page px (2x3), (W, H)) of page `variant` of `rec`."""
    params = page_params(cfg, rec.name, variant, rec.width, rec.height)
    rotate = rotation_matrix(params, rec.width, rec.height)
    d = decode_for(rec, rotate)
    x0, y0, w, h = page_frame(params, rec.width, rec.height, d.sx, d.sy, transform_points(rotate, rec.points),
                              grid_step(cfg.map_scale))
    return d, compose(np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0]]), rotate), (w, h)


def warped_frames(quads: np.ndarray, page_size: tuple[int, int], cfg: BuildConfig) -> list:
    """[(the legible quads' boxes (L, 4), the warped page's size)] of a page stored resized only, under the four
    corners of the reader's draw (height 1 -/+ height_jitter, angle -/+ max_rotation; epoch_geometry.page_warp):
    the frames word_weights weighs the words in beside the upright page. Upright weights alone left the words that a
    rotation packs against their neighbours rarely seen on dense pages (docs/performance.md, bench_geometry)."""
    if not len(quads) or (cfg.height_jitter == 0 and cfg.max_rotation == 0):
        return []
    step, j, r = grid_step(cfg.map_scale), cfg.height_jitter, cfg.max_rotation
    frames = []
    for height, angle in ((1 - j, -r), (1 + j, r), (1 - j, r), (1 + j, -r)):
        warp_to, size = page_warp(page_size, height, angle, step)
        frames.append((quad_boxes(transform_points(warp_to, quads)), size))
    return frames


def make_page(rec: ImageRecord, cfg: BuildConfig, variant: int, maps: bool = True) -> PageContent:
    """Page `variant` of image `rec` under `cfg`; maps=False: without its owner and ROI maps (a record that does not
    store them: a reader draws a crop's from the words)."""
    d, frame_to_page, (w, h) = page_geometry(rec, cfg, variant)
    image = warp(d, frame_to_page, (w, h))
    points = transform_points(frame_to_page, rec.points).astype(np.float32)
    offsets = np.asarray(rec.offsets, np.int64)
    care = (rec.reason == CARE).astype(np.uint8)
    try:
        quads = gather_quads(points, offsets, care > 0)
    except ValueError as e:
        raise DataError(f"{rec.source}: image {rec.name}: {e}") from None
    shape = (round(h * cfg.map_scale), round(w * cfg.map_scale))
    owner = owner_map(quads, cfg.map_scale, shape) if maps else None
    roi = roi_map(points, offsets, care, cfg.map_scale, shape) if maps else None
    # for the crop side and draw of cfg.stored(): a page stored resized only has weights for the default side,
    # height jitter and rotation (a reader that cuts another side derives its own, reader/pages.py), so what a
    # reader picks leaves the stored page as it is
    kept = cfg.stored()
    weight = word_weights(word_boxes(points, offsets)[care > 0], (w, h), kept.input_size, grid_step(cfg.map_scale),
                          warped_frames(quads, (w, h), kept) if cfg.warps_at_read else None)
    return PageContent(image.transpose(2, 0, 1), owner, roi, points, offsets, care, min_rect_angles(quads), weight,
                       d.warning, d.exif_applied)
