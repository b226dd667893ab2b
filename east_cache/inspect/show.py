"""`east-cache show`: one PNG of a sample, drawn by east_cache/inspect/draw.py (render_sample): as a cache holds it,
read through CacheDataset (show CACHE INDEX: show_cached); with --epochs (and --augment RECIPE), a contact sheet of
one image's crops over several epochs (show_epochs); or made now from the data set beside its source page (show
--source: show_source, without the reader or torch, which the cached sample's functions import only when they run)."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from east_cache.atomic import writing
from east_cache.augment import Augment
from east_cache.build.stale import check_stale
from east_cache.inputs import refuse_overwrite
from east_cache.ingest.imageio import decode_image
from east_cache.ingest.ufo import dataset_inputs, load_splits
from east_cache.inspect.draw import (GAP, LABEL_H, PAGE_SIDE, crop_panel, render_page, render_sample,
                                     words_caption)
from east_cache.sample.make import make_sample
from east_cache.store.format import cache_inputs


def show_cached(cache, index: str, variant: int, out: Path, epoch: int = 0, local_cache=None,
                local_cache_limit: str | int = 0, epochs: list[int] | None = None, recipe=None,
                augment: dict | None = None) -> None:
    """Draw variant `variant` of image `index` (its index in name order, or its name) of the cache into the PNG
    `out`: its crop at the epoch that reads that variant; of a page warped at read time, its crop at `epoch`, with
    that epoch's draw under the cache's build values changed by `augment` (Augment fields: east-train's flags of the
    same names), the draw in the caption. A stale cache is drawn with a note saying so. A cache at a URL is read through
    the folder local_cache (--local-cache; local_cache_limit, --local-cache-limit). With epochs or recipe (--augment
    RECIPE): show_epochs's contact sheet of the crops at `epochs` (default [epoch]), whose captions it returns."""
    if epochs is not None or recipe is not None:
        return show_epochs(cache, index, epochs or [epoch], out, recipe, variant, local_cache, local_cache_limit,
                           augment)
    from east_cache.reader.cache import CacheDataset   # torch: only when a cached sample is shown
    refuse_overwrite("-o", out, cache_inputs(cache, "CACHE"))
    ds = CacheDataset(cache, check_stale=False, local_cache=local_cache, local_cache_limit=local_cache_limit)
    ds.augment = Augment.of_cache(ds.config, **(augment or {}))
    stale = check_stale(ds.manifest)
    if stale.stale:
        print(f"note: {cache} is stale ({stale.describe()}); showing what it holds", file=sys.stderr)
    i = int(index) if index.isdigit() else (ds.names.index(index) if index in ds.names else -1)
    if not 0 <= i < len(ds) or not 0 <= variant < ds.config.variants or epoch < 0:
        raise ValueError(f"{cache}: no sample {index!r} variant {variant} at epoch {epoch}: it holds images "
                         f"0..{len(ds) - 1} (or their names), variants 0..{ds.config.variants - 1}, epochs from 0")
    warped = ds.pages and ds.config.warps_at_read
    # the epoch at which item i is this variant, where the variants rotate
    ds.set_epoch(epoch if warped else (variant - int(ds.offsets[i])) % ds.config.variants)
    item = ds[i]
    points, offsets, care = ds.quads(i, variant)
    drawn = f"variant {variant}"
    if warped:
        g = ds.cropper.geometry(i, variant, epoch)
        drawn = f"epoch {epoch}: height x{g.height:.3f}, rotation {g.angle:+.1f} deg, scale x{g.scale:.3f}" + (
            f", perspective corners moved up to {abs(g.corners).max():.3f} of the crop" if g.corners.any() else "")
    caption = f"{ds.names[i]} (#{i}) {drawn}: {words_caption(care)}. Score red, ROI=0 dark + hatched."
    save_png(render_sample(item["image"], item["score"], item["geo"], item["roi"], points, offsets, care, caption), out)


SHEET_COLUMNS = 4   # crops per row of a contact sheet


def show_epochs(cache, index: str, epochs: list[int], out: Path, recipe=None, variant: int = 0, local_cache=None,
                local_cache_limit: str | int = 0, augment: dict | None = None) -> list[list[str]]:
    """A contact sheet of image `index`'s crops at each of `epochs` (a cache whose pages are stored resized only):
    each as training reads it, the epoch's warp (the cache's build values changed by `augment`, as show_cached) then
    `recipe` (a recipe file or transform, reader/recipe.py), with
    its score (red), don't-care (dark, hatched) and words (green legible, orange don't-care) where the recipe moved
    them; what a recipe does, seen before training on it. Each crop's caption: its geometric draw and, for an
    albumentations recipe, the transforms of it that fired on the crop (albumentations' applied transforms).
    Returns the captions, a list of lines per crop."""
    from east_cache.reader.cache import CacheDataset
    from east_cache.reader.recipe import recipe_inputs
    refuse_overwrite("-o", out, [*cache_inputs(cache, "CACHE"), *recipe_inputs(recipe)])
    ds = CacheDataset(cache, check_stale=False, local_cache=local_cache, local_cache_limit=local_cache_limit)
    if not (ds.pages and ds.config.warps_at_read):
        raise ValueError(f"{cache}: its crops' geometry was drawn at build time (--crop build or --geometry build): "
                         f"--epochs draws a page stored resized only (--geometry read, the default); draw one crop "
                         f"with --variant")
    plain = CacheDataset(cache, check_stale=False, local_cache=local_cache, local_cache_limit=local_cache_limit)
    ds.augment = plain.augment = Augment.of_cache(ds.config, **(augment or {}))
    ds.transform = recipe
    i = int(index) if index.isdigit() else (ds.names.index(index) if index in ds.names else -1)
    if not 0 <= i < len(ds) or not 0 <= variant < ds.config.variants:
        raise ValueError(f"{cache}: no image {index!r} variant {variant}: it holds images 0..{len(ds) - 1} (or their "
                         f"names), variants 0..{ds.config.variants - 1}")
    s = ds.aug.input_size
    cols = min(SHEET_COLUMNS, len(epochs))
    rows = -(-len(epochs) // cols)
    what = f"--augment {ds.transform.recipe}" if ds.transform is not None else "no --augment"
    caption = textwrap.wrap(f"{ds.names[i]} (#{i}), variant {variant}, {what}: score red, ROI=0 dark + hatched, words "
                            f"green (legible) / orange (don't care)", width=max(20, cols * (s + GAP) // 6))
    panels, labels = [], []
    for epoch in epochs:
        ds.set_epoch(epoch)
        plain.set_epoch(epoch)
        item, words = ds[i], plain.quads(i, variant)
        moving, fired = ds.cropper.crop_transform(i, variant, epoch), []
        if moving is not None:   # the words where the recipe moved them, drawn over the crop it made, and what fired
            hwc = np.ascontiguousarray(plain[i]["image"].transpose(1, 2, 0))
            words = moving(hwc, words, fired)[1]
        g = ds.cropper.geometry(i, variant, epoch)
        label = [f"epoch {epoch}: x{g.height:.2f} {g.angle:+.0f} deg" + (f" s{g.scale:.2f}" if g.scale != 1 else "")]
        if ds.transform is not None:   # which of the recipe's transforms fired on this crop
            label += (textwrap.wrap(", ".join(fired) or "none fired", width=max(10, s // 6))[:2]
                      if ds.transform.kind == "albumentations" else ["(not albumentations: not known)"])
        labels.append(label)
        panels.append(Image.fromarray(crop_panel(item["image"], item["score"], item["roi"], *words)))
    label_h = LABEL_H * max(map(len, labels))
    sheet = Image.new("RGB", (cols * (s + GAP), rows * (s + label_h + GAP) + len(caption) * LABEL_H), "white")
    draw, font = ImageDraw.Draw(sheet), ImageFont.load_default()
    for k, (panel, label) in enumerate(zip(panels, labels)):
        x, y = (k % cols) * (s + GAP), (k // cols) * (s + label_h + GAP)
        for n, line in enumerate(label):
            draw.text((x, y + n * LABEL_H), line, fill="black", font=font)
        sheet.paste(panel, (x, y + label_h))
    for k, line in enumerate(caption):
        draw.text((2, rows * (s + label_h + GAP) + k * LABEL_H), line, fill="black", font=font)
    save_png(sheet, out)
    return labels


def show_source(data: Path, name: str, split: str, cfg, variant: int, out: Path) -> None:
    """Image `name` of the data set's split drawn beside its sample `variant` made now by make_sample under cfg (no
    cache, no reader): the source page with every word outlined by why it is (not) a positive, then the sample."""
    refuse_overwrite("-o", out, dataset_inputs(data, "--source"))
    records, _ = load_splits([Path(data)], split, cfg)
    rec = next((r for r in records if r.name == name), None)
    if rec is None:
        raise ValueError(f"{data}: no image {name!r} in split {split!r} (e.g. {', '.join(r.name for r in records[:3])})")
    decoded = decode_image(rec.path, rec.width, rec.height, min(1.0, PAGE_SIDE / max(rec.width, rec.height)))
    if decoded.warning:
        print(f"note: {decoded.warning}", file=sys.stderr)
    page = render_page(rec, decoded)
    s = make_sample(rec, cfg, variant)
    caption = f"sample variant {variant}, input {cfg.input_size}, seed {cfg.seed}: {words_caption(s.care)}"
    if s.warning:
        caption += f". {s.warning}"
    sample = render_sample(s.image, s.score, s.geo, s.roi, s.points, s.offsets, s.care, caption)
    fig = Image.new("RGB", (page.width + GAP + sample.width, max(page.height, sample.height)), "white")
    fig.paste(page, (0, 0))
    fig.paste(sample, (page.width + GAP, 0))
    save_png(fig, out)


def save_png(image: Image.Image, out: Path) -> None:
    """-o's picture, through the door: a link at out is replaced, never written through."""
    with writing(out, "wb", "-o") as f:
        image.save(f, format="PNG")
