"""`--strategy auto` and `--image-codec auto`: how many records go in a file, and how a page's image is stored,
from the cache's size and the RAM at hand."""
from __future__ import annotations

import dataclasses

from east_cache.budget import available_ram
from east_cache.config import AUTO, BuildConfig
from east_cache.errors import BuildError
from east_cache.store.format import sample_bytes

# A cache that fits in this share of available RAM stays in the page cache across epochs: one file.
WHOLE_RAM_SHARE = 0.5
# Records this large (an input_size of ~1800 px and up) are big enough to be files of their own.
BIG_RECORD_BYTES = 12 << 20
# Beyond this many samples, per-batch files become too many inodes and opens: group into chunks.
MANY_SAMPLES = 20_000
STRATEGY_BY_FLAG = "chosen with --strategy"   # the recorded reason of a strategy the user named
AUTO_REASON = "auto: "                        # starts the recorded reason of one picked here


def choose_strategy(n_samples: int, record_bytes: int, ram: int | None = None) -> tuple[str, str]:
    """(strategy, the reason in words)."""
    ram = available_ram() if ram is None else ram
    total = n_samples * record_bytes
    gib = lambda b: f"{b / 2**30:.1f} GiB"  # noqa: E731
    if total <= WHOLE_RAM_SHARE * ram:
        return "whole", (f"the cache ({gib(total)}) fits in half the available RAM ({gib(ram)}): one file stays in "
                         f"the page cache after the first epoch")
    if record_bytes >= BIG_RECORD_BYTES:
        return "image", (f"records are large ({record_bytes / 2**20:.0f} MiB each) and the cache ({gib(total)}) "
                         f"exceeds half the RAM ({gib(ram)}): one file per image")
    if n_samples > MANY_SAMPLES:
        return "chunked", (f"{n_samples} samples ({gib(total)}) exceed half the RAM ({gib(ram)}) and would make too "
                           f"many per-batch files: chunks of samples")
    return "batch", (f"the cache ({gib(total)}) exceeds half the RAM ({gib(ram)}): one file per training batch, "
                     f"read in one sequential read")


CODEC_BY_FLAG = "chosen with --image-codec"   # the recorded reason of an image codec the user named
CROP_BUILD_CODEC = "--crop build records keep raw images"


def choose_codec(raw_bytes: int, ram: int | None = None) -> tuple[str, str]:
    """(image codec, the reason in words) of a page cache whose raw pages take raw_bytes: raw while it fits in the
    share of RAM that --strategy auto keeps in the page cache (read at memory speed, nothing decoded), else jpeg
    (a cache near the photos' own size; each crop decodes the tiles it covers)."""
    ram = available_ram() if ram is None else ram
    gib = lambda b: f"{b / 2**30:.1f} GiB"  # noqa: E731
    if raw_bytes <= WHOLE_RAM_SHARE * ram:
        return "raw", (f"the raw cache ({gib(raw_bytes)}) fits in half the available RAM ({gib(ram)}): pages stay "
                       f"in the page cache and are read without decoding")
    return "jpeg", (f"the raw cache ({gib(raw_bytes)}) exceeds half the available RAM ({gib(ram)}): JPEG tiles keep "
                    f"it near the photos' size, and each crop decodes only the tiles it covers")


def resolve_codec(cfg: BuildConfig, records, old: BuildConfig | None = None) -> tuple[BuildConfig, str]:
    """cfg with a concrete image codec, and why it was picked: --crop build keeps raw crops; a codec named stays;
    auto keeps an existing cache's (old, its config) where nothing else changes, else choose_codec from the raw
    pages' size."""
    if cfg.crop == "build":
        if cfg.image_codec == "jpeg":
            raise BuildError("--image-codec jpeg stores pages (--crop read); a --crop build record keeps its crop's "
                             "pixels raw: pass --crop read, or --image-codec raw")
        return dataclasses.replace(cfg, image_codec="raw"), CROP_BUILD_CODEC
    if cfg.image_codec != AUTO:
        return cfg, CODEC_BY_FLAG
    if (old is not None and  # options only a reader uses (config.READER_ONLY) leave the pages as they are
            dataclasses.replace(cfg, strategy=old.strategy, image_codec=old.image_codec).stored() == old.stored()):
        return (dataclasses.replace(cfg, image_codec=old.image_codec),
                f"kept the existing cache's image codec ({old.image_codec}) so that it can be updated in place")
    members = [(i, v) for i in range(len(records)) for v in range(cfg.variants)]
    codec, reason = choose_codec(sample_bytes(dataclasses.replace(cfg, image_codec="raw"), records, members))
    return dataclasses.replace(cfg, image_codec=codec), AUTO_REASON + reason
