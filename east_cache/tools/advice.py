"""Warnings about build settings that waste training: mostly text-free crops, mostly upscaled images."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from east_cache.config import BuildConfig
from east_cache.tools.coverage import Coverage

UPSCALE_LIMIT = 1.25   # linear scale above which resizing only blurs: no detail is added
MOST = 0.5             # share of images / crops above which a setting is worth a warning


def upscale_warning(sizes: Sequence[tuple[int, int]], cfg: BuildConfig) -> str | None:
    """When --image-size enlarges most images (width, height) by more than UPSCALE_LIMIT."""
    if not len(sizes):
        return None
    long_sides = np.array([max(w, h) for w, h in sizes], np.float64)
    share = float(np.mean(cfg.image_size / long_sides > UPSCALE_LIMIT))
    if share <= MOST:
        return None
    median = int(np.median(long_sides))
    return (f"--image-size {cfg.image_size} enlarges {share:.0%} of the images by more than {UPSCALE_LIMIT}x "
            f"(median long side {median} px): upscaling adds blur, not detail, and makes pages {cfg.image_size} px "
            f"that a {cfg.input_size} px crop shows a small part of. Consider --image-size {_multiple(median)}")


def text_free_warning(cov: Coverage, cfg: BuildConfig, crop_mode: str) -> str | None:
    """When most training crops hold no legible word whole."""
    if cov.text_free <= MOST:
        return None
    why = (f"{cov.text_free:.0%} of the training crops hold no legible word (images without any: "
           f"{cov.blank_pages:.0%}): those steps teach only background")
    if crop_mode == "build":
        return (f"{why}. --crop read draws every epoch's crop around a legible word; or raise --input-size "
                f"{cfg.input_size} / lower --image-size {cfg.image_size}")
    return f"{why}; most images have no legible word: check the annotations (illegible, ignore tags, --min-area)"


def _multiple(px: float, step: int = 32) -> int:
    return max(step, int(round(px / step)) * step)
