"""Warnings about a build that wastes training or adds nothing: mostly text-free crops (from the coverage replay), a
--data root whose split lists no image (a pseudo-label root that `pseudo` left empty). The build plan's own
warning, mostly upscaled images, is build/announce.py's upscale_warning."""
from __future__ import annotations

from east_cache.config import BuildConfig
from east_cache.ingest.pseudolabels import PROVENANCE, file_head
from east_cache.ingest.ufo import find_split
from east_cache.build.announce import MOST
from east_cache.tools.coverage import Coverage


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


def empty_root_warning(root, split: str) -> str | None:
    """When the --data root's split lists no image, so that it adds nothing to the cache: why, and for a root of
    pseudo-labels what to run again."""
    try:
        json_path, _ = find_split(root, split)
    except (ValueError, OSError):
        return None   # the build names what is wrong with it
    head = file_head(json_path)
    if head is None or head[1]:
        return None
    if PROVENANCE in head[0]:
        return (f"--data {root}: {json_path} lists no image, so it adds nothing: a root of pseudo-labels in which "
                f"`pseudo` kept no word (none predicted, or every one scored below its --min-score "
                f"{head[0][PROVENANCE].get('min_score', '')}); run `pseudo` again with a lower --min-score, or "
                f"east-predict with a lower --score-thresh")
    return f"--data {root}: {json_path} lists no image, so it adds nothing to the cache"
