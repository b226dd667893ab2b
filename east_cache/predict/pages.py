"""The images east-predict reads and the model's input made of each: the pages of a data set's split or of a folder
(Page: a name, a file, the frame its words are in), and an image decoded as the build decodes it (EXIF-aware),
resized so that its long side is the input size, padded to a multiple of the backbone's stride (load_input); pages
batched by padded shape (plan_batches).

The resize is the build's convention: a frame point p lands at image_size / long side * p, and the resized
image is warped with that same map (east_cache.sample.make), so training crops and prediction inputs agree.
"""
from __future__ import annotations

import math
from itertools import groupby
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.imageio import decode_image, oriented_size
from east_cache.ingest.ufo import find_split, load_ufo
from east_cache.sample.geometry import compose
from east_cache.sample.make import decoded_to_frame

STRIDE = 32                   # px; the backbone's total stride: input sides are padded to a multiple of it
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")   # what --images DIR picks up


class Page(NamedTuple):
    """One image to predict on."""
    name: str       # key in the output's "images" object
    path: str       # image file
    width: int      # frame width (px): the annotations' img_w, or the EXIF-upright image width
    height: int     # frame height (px)


def pages_from_split(root, split: str, skip_bad: bool = False) -> tuple[list[Page], list[tuple[str, str]]]:
    """The images of ROOT/ufo/{split}.json (their words are not needed), and those skipped as (name, why)."""
    records, summary = load_ufo(*find_split(root, split), BuildConfig(), skip_bad)
    return [Page(r.name, r.path, r.width, r.height) for r in records], list(summary.bad)


def pages_from_folder(folder, skip_bad: bool = False) -> tuple[list[Page], list[tuple[str, str]]]:
    """Every image file directly in folder (by suffix), its frame the EXIF-upright size from its header."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; pass the folder that holds the images")
    pages, bad = [], []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()):
        try:
            w, h, _ = oriented_size(path)
        except DataError as e:
            if not skip_bad:
                raise
            bad.append((path.name, str(e)))
            continue
        pages.append(Page(path.name, str(path), w, h))
    if not pages and not bad:
        raise DataError(f"{folder}: no image files ({', '.join(IMAGE_SUFFIXES)}); pass the folder that holds them")
    return pages, bad


def input_geometry(page: Page, image_size: int) -> tuple[float, tuple[int, int], tuple[int, int]]:
    """(scale frame px -> input px, resized (height, width), padded (height, width))."""
    scale = image_size / max(page.width, page.height)
    h, w = max(1, round(page.height * scale)), max(1, round(page.width * scale))
    return scale, (h, w), (math.ceil(h / STRIDE) * STRIDE, math.ceil(w / STRIDE) * STRIDE)


def load_input(page: Page, image_size: int) -> np.ndarray:
    """uint8 (H, W, 3) RGB: the page resized as input_geometry says, zero-padded right and below."""
    scale, (h, w), (ph, pw) = input_geometry(page, image_size)
    d = decode_image(page.path, page.width, page.height, scale)
    frame_to_input = np.array([[scale, 0, 0], [0, scale, 0]])
    m = compose(frame_to_input, decoded_to_frame(d.sx, d.sy))
    out = np.zeros((ph, pw, 3), np.uint8)
    out[:h, :w] = cv2.warpAffine(np.ascontiguousarray(d.image), m, (w, h), flags=cv2.INTER_LINEAR,
                                 borderMode=cv2.BORDER_REPLICATE)
    return out


def plan_batches(pages: list[Page], image_size: int, batch_size: int) -> list[list[Page]]:
    """Pages grouped by padded shape (in name order within a shape), then cut into batches."""
    def shape(p: Page) -> tuple[int, int]:
        return input_geometry(p, image_size)[2]
    batches = []
    for _, group in groupby(sorted(pages, key=lambda p: (shape(p), p.name)), key=shape):
        group = list(group)
        batches += [group[k:k + batch_size] for k in range(0, len(group), batch_size)]
    return batches
