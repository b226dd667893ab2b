"""`python -m preprocess show CACHE INDEX`: one PNG of a sample as a cache holds it, read through CacheDataset
and drawn by east_cache/tools/show.py (render_sample)."""
from __future__ import annotations

import sys
from pathlib import Path

from east_cache.augment import Augment
from east_cache.errors import refuse_overwrite
from east_cache.reader.cache import CacheDataset
from east_cache.store.format import cache_inputs
from east_cache.store.stale import check_stale
from east_cache.tools.show import render_sample, words_caption


def show_cached(cache, index: str, variant: int, out: Path, epoch: int = 0, local_cache=None,
                local_cache_limit: str | int = 0, augment: dict | None = None) -> None:
    """Draw variant `variant` of image `index` (its index in name order, or its name) of the cache into the PNG
    `out`: its crop at the epoch that reads that variant; of a page warped at read time, its crop at `epoch`, with
    that epoch's draw under the cache's build values changed by `augment` (Augment fields: east-train's flags of the
    same names), the draw in the caption. A stale cache is drawn with a note saying so. A cache at a URL is read through
    the folder local_cache (--local-cache; local_cache_limit, --local-cache-limit)."""
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
    render_sample(item["image"], item["score"], item["geo"], item["roi"], points, offsets, care, caption).save(out)
