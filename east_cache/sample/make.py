"""One training sample: an augmented input_size crop of a page and its EAST targets.

The augmentation (resize, height jitter, rotation, crop) is one affine map from the annotation
frame to the crop; the image is warped once with it and the words are mapped with the same matrix.
Every random draw comes from sample_rng(seed, name, variant), so a sample is the same whoever
builds it, in whatever order or process.
"""
from __future__ import annotations

import hashlib
from typing import NamedTuple

import cv2
import numpy as np

from east_cache.config import BuildConfig
from east_cache.ingest.imageio import Decoded, contiguous_source, decode_image
from east_cache.ingest.ufo import CARE, ImageRecord
from east_cache.sample.crop_draw import choose_crop
from east_cache.sample.geometry import (
    AugParams,
    augment_matrix,
    compose,
    gather_quads,
    image_extent,
    rotation_matrix,
    sample_params,
    transform_points,
)
from east_cache.sample.targets import make_targets


class Sample(NamedTuple):
    image: np.ndarray        # uint8 (3, S, S) RGB, S = input_size
    score: np.ndarray        # uint8 (1, m, m), m = map_size
    geo: np.ndarray          # float32 (5, m, m): d_top, d_bottom, d_left, d_right (crop px), angle (rad)
    roi: np.ndarray          # uint8 (1, m, m): 0 over don't-care words
    points: np.ndarray       # float32 (P, 2): the crop's words, crop px
    offsets: np.ndarray      # int64 (N + 1,): word k is points[offsets[k]:offsets[k + 1]]
    care: np.ndarray         # uint8 (N,): 1 = legible positive, 0 = don't-care
    warning: str | None      # from the image decoder (frame size mismatch), else None
    exif_applied: bool = False   # the decoder turned the image as its EXIF orientation says
    words: np.ndarray | None = None   # int32 (N,): each word's index among the record's words


def sample_rng(seed: int, name: str, variant: int) -> np.random.Generator:
    """The generator of sample (image name, variant) under a build seed."""
    if seed < 0 or variant < 0:
        raise ValueError(f"seed {seed} and variant {variant} must be >= 0")
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.default_rng(np.random.SeedSequence([seed, variant, *words]))


def _legible_quads(rec: ImageRecord, legible: np.ndarray) -> np.ndarray:
    try:
        return gather_quads(rec.points, rec.offsets, legible)
    except ValueError as e:
        raise ValueError(f"{rec.source}: image {rec.name}: {e}") from None


def decoded_to_frame(sx: float, sy: float) -> np.ndarray:
    """Decoded px -> frame px, pixel centres to pixel centres (the decoded grid is the frame scaled by sx, sy)."""
    return np.array([[1 / sx, 0, 0.5 / sx - 0.5], [0, 1 / sy, 0.5 / sy - 0.5]])


def decode_for(rec: ImageRecord, frame_to_out: np.ndarray) -> Decoded:
    """The source decoded at the smallest size that the warp frame_to_out allows."""
    scale = float(np.linalg.svd(frame_to_out[:, :2], compute_uv=False)[0])
    return decode_image(rec.path, rec.width, rec.height, scale)


def warp(d: Decoded, frame_to_out: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(h, w, 3) uint8: the decoded image warped once by frame_to_out into a size = (w, h) canvas, zeros outside,
    from the pixels as stored (an EXIF turn is part of the warp, not a copy)."""
    pixels, to_pixels = contiguous_source(d.image)
    m = compose(frame_to_out, decoded_to_frame(d.sx, d.sy), cv2.invertAffineTransform(to_pixels))
    return cv2.warpAffine(pixels, m, size, flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def _inside_crop(points: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """(N,) bool: the word's box overlaps the crop [0, size]^2 (same test as choose_crop)."""
    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, bool)
    lo = np.minimum.reduceat(points, offsets[:-1], axis=0)
    hi = np.maximum.reduceat(points, offsets[:-1], axis=0)
    return np.all((hi > 0) & (lo < size), axis=1)


def _select(points: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts = np.diff(offsets)[keep]
    point_keep = np.repeat(keep, np.diff(offsets))
    return points[point_keep], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


class CropChoice(NamedTuple):
    params: AugParams
    origin: np.ndarray       # float64 (2,): the crop's top left in rotation_matrix's px
    cut: np.ndarray          # bool (L,): legible words (in record order) that the crop cuts
    whole: np.ndarray        # bool (L,): legible words that lie whole inside the crop


def choose_sample_crop(rec: ImageRecord, cfg: BuildConfig, variant: int) -> CropChoice:
    """The random draws of make_sample: augmentation, then crop (no pixels are read)."""
    rng = sample_rng(cfg.seed, rec.name, variant)
    params = sample_params(rng, rec.width, rec.height, cfg)
    quads = transform_points(rotation_matrix(params, rec.width, rec.height), _legible_quads(rec, rec.reason == CARE))
    origin, cut = choose_crop(rng, quads, np.ones(len(quads), bool), image_extent(params, rec.width, rec.height),
                              cfg.input_size, cfg.crop_tries)
    lo, hi = quads.min(axis=1, initial=np.inf), quads.max(axis=1, initial=-np.inf)
    whole = np.all((lo >= origin) & (hi <= origin + cfg.input_size), axis=1)
    return CropChoice(params, origin, cut, whole)


def make_sample(rec: ImageRecord, cfg: BuildConfig, variant: int) -> Sample:
    """Sample `variant` of image `rec` under `cfg`."""
    params, origin, cut_quads, _ = choose_sample_crop(rec, cfg, variant)
    legible = rec.reason == CARE
    frame_to_crop = augment_matrix(params, rec.width, rec.height, origin)
    d = decode_for(rec, frame_to_crop)
    image, warning, exif = warp(d, frame_to_crop, (cfg.input_size, cfg.input_size)), d.warning, d.exif_applied

    points, offsets, care, keep = words_in_crop(rec.points, rec.offsets, legible, cut_quads, frame_to_crop,
                                                cfg.input_size)
    score, geo, roi = make_targets(points, offsets, care, cfg.input_size, cfg.map_scale)
    return Sample(np.ascontiguousarray(image.transpose(2, 0, 1)), score[None], geo, roi[None], points, offsets,
                  care, warning, exif, np.flatnonzero(keep).astype(np.int32))


def words_in_crop(points: np.ndarray, offsets: np.ndarray, legible: np.ndarray, cut: np.ndarray, to_crop: np.ndarray,
                  size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 (P', 2) crop px, offsets (N' + 1,) int64, care uint8 (N',), keep bool (N,)): the words
    (points (P, 2), offsets (N + 1,), legible (N,)) mapped by to_crop (2x3) into a crop of side `size`, those whose
    box overlaps it kept, the legible ones the crop cuts (cut (L,), in legible order) made don't-care: the words
    make_targets draws for the crop (make_sample's, and a reader's under an epoch's warp)."""
    legible = np.asarray(legible, bool)
    offsets = np.asarray(offsets, np.int64)
    points = transform_points(to_crop, points).astype(np.float32)
    care = legible.copy()
    care[np.flatnonzero(legible)[cut]] = False   # words the crop cuts become don't-care
    keep = _inside_crop(points, offsets, size)
    points, offsets = _select(points, offsets, keep)
    return points, offsets, care[keep].astype(np.uint8), keep
