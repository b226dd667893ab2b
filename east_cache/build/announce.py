"""What a build is about to do, told before the first data file is written (the CLI prints it as the plan)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from east_cache.config import IMAGE_CODECS, BuildConfig
from east_cache.ingest.pseudolabels import pseudo_line
from east_cache.store.format import record_spec, sample_bytes
from east_cache.store.formats import FileFormat
from east_cache.store.manifest import Manifest, Source
from east_cache.store.page_jpeg import jpeg_settings_words
from east_cache.build.plan import Plan
from east_cache.build.stale import Staleness

UPSCALE_LIMIT = 1.25   # linear scale above which resizing only blurs: no detail is added
MOST = 0.5             # share of images / crops above which a setting is worth a warning


@dataclass
class BuildPlan:
    """What a build is about to do, handed to on_plan before the first data file is written."""
    out: Path
    first_build: bool
    strategy: str
    strategy_reason: str
    file_format: str
    images: int
    variants: int
    files: int                  # data files of the finished cache
    files_to_write: int
    samples_to_make: int        # rows made from the source images
    samples_to_copy: int        # rows copied from the previous cache
    disk_bytes: int             # estimated data bytes of the finished cache
    full_rebuild_reason: str    # "" unless every sample is made anew
    source_changes: str         # images changed, added or removed since the previous build ("" for a first build)
    changes: list[str] = field(default_factory=list)    # recorded source options this build changes: "k: a -> b"
    warnings: list[str] = field(default_factory=list)   # settings that misfit the data, shown before the work
    image_codec: str = "raw"    # the page image codec (resolved), and why
    codec_reason: str = ""
    image_settings: str = ""    # jpeg: its quality and chroma, in words
    codec_bytes: dict[str, int] = field(default_factory=dict)   # page caches: estimated data bytes under each codec
    samples_resumed: int = 0    # rows an interrupted build finished in a file it left unfinished, not made again
    pseudo: str = ""            # "N of M images are pseudo-labels (from FILE)", or ""



def announce(out: Path, cfg: BuildConfig, plan: Plan, fmt: FileFormat, old: Manifest | None, source: Source,
             records, strategy_reason: str, full_rebuild_reason: str, changes: Staleness,
             codec_reason: str = "", pseudo: list | None = None) -> BuildPlan:
    """The plan of a build of cfg (strategy and image codec resolved) of records from source into out, whose
    previous manifest is old. Pages (packed records) count their own bytes, under both image codecs. pseudo:
    [UFO file, images] of the files of pseudo-labels among the sources (pseudolabels.marked_files)."""
    spec = record_spec(cfg)
    codec_bytes = {}
    if spec.kind.packed:
        members = [m for f in plan.files for m in f.members]
        codec_bytes = {c: sample_bytes(dataclasses.replace(cfg, image_codec=c), records, members)
                       for c in IMAGE_CODECS}
        disk = codec_bytes[cfg.image_codec]
    else:
        disk = sum(fmt.disk_bytes(spec, len(f.keys)) for f in plan.files)
    warning = upscale_warning([(r.width, r.height) for r in records], cfg)
    return BuildPlan(out, old is None, cfg.strategy, strategy_reason, fmt.name, len(records), cfg.variants,
                     len(plan.files), len(plan.to_write), plan.count("compute"), plan.count("copy"), disk,
                     full_rebuild_reason, changes.describe() if old is not None and changes.stale else "",
                     option_changes(old, source, fmt), [warning] if warning else [], cfg.image_codec, codec_reason,
                     jpeg_settings_words(cfg) if cfg.image_codec == "jpeg" else "", codec_bytes, plan.resumed,
                     pseudo_line(pseudo or [], len(records)) or "")


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


def _multiple(px: float, step: int = 32) -> int:
    return max(step, int(round(px / step)) * step)


def option_changes(old: Manifest | None, source: Source, fmt: FileFormat) -> list[str]:
    """The recorded source options (not the sample config: a change of that is a full rebuild's reason) that this
    build changes, as "name: old -> new"."""
    if old is None:
        return []
    was = old.source
    pairs = (("data", " ".join(was.data_dirs), " ".join(source.data_dirs)), ("split", was.split, source.split),
             ("format", old.file_format, fmt.name), ("skip_bad", was.skip_bad, source.skip_bad),
             ("check_content", was.check_content, source.check_content))
    return [f"{name}: {a} -> {b}" for name, a, b in pairs if a != b]
