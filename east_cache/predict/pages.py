"""The images east-predict reads and the model's inputs made of each, apart from the model: the pages of a data set's
split or of a folder (Page: a name, a file, the frame its words are in); an image decoded as the build decodes it
(EXIF-aware), resized so that its long side is the input size, padded to a multiple of the backbone's stride
(load_input), and for several input sizes (--scales) decoded once and resized to each (load_inputs); pages batched by
their padded shapes (plan_batches) and loaded a few batches ahead of the model by threads (loaded), each page once
however many passes (checkpoints, sizes) then read it.

The resize is the build's convention: a frame point p lands at image_size / long side * p, and the resized
image is warped with that same map (east_cache.sample.make), so training crops and prediction inputs agree.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby, islice
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
LOADER_THREADS = 4            # images decoded and resized at once (PIL and OpenCV release the GIL)
PREFETCH_BATCHES = 2          # batches being loaded while the model runs on the current one
MAX_HALVINGS = 3              # a smaller size's source is halved at most this often (1/8: JPEG's deepest DCT reduction)
JPEG_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif")   # files whose decode for a size alone JPEG's DCT scaling reduces


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
    return load_inputs(page, [image_size])[image_size]


def load_inputs(page: Page, sizes: Sequence[int]) -> dict[int, np.ndarray]:
    """{input size: uint8 (H, W, 3) RGB} for each of sizes: the page decoded once, at the largest size's scale (for
    that size exactly what load_input gives), then warped to each size as input_geometry says, zero-padded right and
    below. Of a JPEG (by its name: JPEG_SUFFIXES), a smaller size reads the decode halved (2 x 2 means) once per
    factor of 2 by which it would still hold that size's px, as a decode for that size alone is reduced by the DCT
    (within about 55 dB of it); any other image is decoded whole for every size, and each size is warped from it as
    before."""
    sizes = sorted(set(sizes), reverse=True)
    d = decode_image(page.path, page.width, page.height, input_geometry(page, sizes[0])[0])
    source, sx, sy = np.ascontiguousarray(d.image), d.sx, d.sy
    decoded, top, done = source.shape, halvings(source.shape, input_geometry(page, sizes[0])[1]), 0
    jpeg = str(page.path).lower().endswith(JPEG_SUFFIXES)
    out = {}
    for size in sizes:   # largest first: each reads the source as reduced as the sizes before it, or more
        scale, (h, w), (ph, pw) = input_geometry(page, size)
        while jpeg and done < halvings(decoded, (h, w)) - top:   # a smaller size: the source halved once more
            source = cv2.resize(source, (-(-source.shape[1] // 2), -(-source.shape[0] // 2)),
                                interpolation=cv2.INTER_AREA)
            sx, sy, done = source.shape[1] / page.width, source.shape[0] / page.height, done + 1
        m = compose(np.array([[scale, 0, 0], [0, scale, 0]]), decoded_to_frame(sx, sy))
        out[size] = np.zeros((ph, pw, 3), np.uint8)
        out[size][:h, :w] = cv2.warpAffine(source, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return out


def halvings(shape: tuple[int, ...], need: tuple[int, int]) -> int:
    """How many times (at most MAX_HALVINGS) an image of shape (h, w, ...) can be halved, each side rounded up, and
    still have at least need (h, w) px per side."""
    (h, w), n = shape[:2], 0
    while n < MAX_HALVINGS and -(-h // 2) >= need[0] and -(-w // 2) >= need[1]:
        h, w, n = -(-h // 2), -(-w // 2), n + 1
    return n


def plan_batches(pages: list[Page], sizes: int | Sequence[int], batch_size: int) -> list[list[Page]]:
    """Pages grouped by padded shape at the input size (at every one of several sizes: a batch is one array at each),
    in name order within a shape, then cut into batches."""
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)

    def shape(p: Page) -> tuple[tuple[int, int], ...]:
        return tuple(input_geometry(p, s)[2] for s in sizes)
    batches = []
    for _, group in groupby(sorted(pages, key=lambda p: (shape(p), p.name)), key=shape):
        group = list(group)
        batches += [group[k:k + batch_size] for k in range(0, len(group), batch_size)]
    return batches


def loaded(batches: list[list[Page]], sizes: Sequence[int], pool: ThreadPoolExecutor,
           skip_bad: bool = False) -> Iterator[tuple[list[Page], dict[int, np.ndarray] | None, list[tuple[str, str]]]]:
    """(pages, {size: uint8 (B, H, W, 3)}, bad [(name, why)]) per batch (None for no page), PREFETCH_BATCHES
    batches loading ahead in pool, each page decoded once for every size (load_inputs). skip_bad: a page that
    cannot be decoded is named in bad instead of raising its DataError."""
    pending, todo = deque(), iter(batches)
    for batch in islice(todo, PREFETCH_BATCHES):
        pending.append((batch, [pool.submit(load_inputs, p, sizes) for p in batch]))
    while pending:
        batch, futures = pending.popleft()
        for nxt in islice(todo, 1):
            pending.append((nxt, [pool.submit(load_inputs, p, sizes) for p in nxt]))
        ok, inputs, bad = [], [], []
        for page, fut in zip(batch, futures):
            try:
                inputs.append(fut.result())
                ok.append(page)
            except DataError as e:
                if not skip_bad:
                    raise
                bad.append((page.name, str(e)))
        yield ok, ({s: np.stack([i[s] for i in inputs]) for s in sizes} if inputs else None), bad
