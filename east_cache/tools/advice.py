"""A warning about build settings that waste training: mostly text-free crops (from the coverage replay). The
build plan's own warning, mostly upscaled images, is store/announce.py's upscale_warning."""
from __future__ import annotations

from east_cache.config import BuildConfig
from east_cache.store.announce import MOST
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
