"""What a build is about to do, told before the first data file is written (the CLI prints it as the plan)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from east_cache.config import BuildConfig
from east_cache.store.format import SPARSE_KINDS, record_spec, sample_bytes
from east_cache.store.formats import FileFormat
from east_cache.store.manifest import Manifest, Source
from east_cache.store.plan import Plan
from east_cache.store.stale import Staleness
from east_cache.tools.advice import upscale_warning


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



def announce(out: Path, cfg: BuildConfig, plan: Plan, fmt: FileFormat, old: Manifest | None, source: Source,
             records, strategy_reason: str, full_rebuild_reason: str, changes: Staleness) -> BuildPlan:
    """The plan of a build of cfg (strategy resolved) of records from source into out, whose previous manifest is
    old. Pages (sparse records) count their own bytes."""
    spec = record_spec(cfg)
    if spec.kind.name in SPARSE_KINDS:
        disk = sum(sample_bytes(cfg, records, f.members) for f in plan.files)
    else:
        disk = sum(fmt.disk_bytes(spec, len(f.keys)) for f in plan.files)
    warning = upscale_warning([(r.width, r.height) for r in records], cfg)
    return BuildPlan(out, old is None, cfg.strategy, strategy_reason, fmt.name, len(records), cfg.variants,
                     len(plan.files), len(plan.to_write), plan.count("compute"), plan.count("copy"), disk,
                     full_rebuild_reason, changes.describe() if old is not None and changes.stale else "",
                     option_changes(old, source, fmt), [warning] if warning else [])


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
