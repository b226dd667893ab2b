"""What `build` is asked to do, and what it says before it starts.

An existing cache's recorded options are the defaults of its rebuild: every build flag defaults to None
(unset), and an unset flag takes the value the cache at --out was built with, or the documented default
where there is no cache yet. So `build --out CACHE` updates a cache as it was built, and changing an
option takes its flag. The plan (cache, strategy and why, counts, size, what changed) is printed before
the first data file is written; its warnings go last, where the user sees them before the progress.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from east_cache.config import AUTO, BuildConfig
from east_cache.errors import CacheError, UsageError
from east_cache.inputs import refuse_overwrite
from east_cache.location import Location
from east_cache.ingest.ufo import dataset_inputs
from east_cache.build.announce import BuildPlan
from east_cache.store.format import MANIFEST
from east_cache.store.manifest import Manifest
from east_cache.build.outdir import BUILD_WRITES
from east_cache.build.publish import default_staging
from east_cache.build.strategy import CODEC_BY_FLAG, STRATEGY_BY_FLAG

DEFAULT_SPLIT = "train"


@dataclass(frozen=True)
class BuildRequest:
    config: BuildConfig
    data: list[Path] | None      # None: the sample set a build without --data generates
    split: str
    skip_bad: bool
    check_content: bool
    file_format: str | None      # None: the cache's own format where it can hold the strategy, else npy


def existing_cache(out: Path, data_given: bool) -> Manifest | None:
    """The manifest of the cache at out, None where there is none. One that cannot be read is ignored (the build
    says so) when --data is given; without --data its recorded options are lost, and guessing would build the
    sample set into the user's cache folder."""
    try:
        return Manifest.load(out)
    except CacheError:
        if (out / MANIFEST).exists() and not data_given:
            raise   # its message says to rebuild with --data and the options it was built with
        return None


def recorded_config(m: Manifest) -> BuildConfig:
    """The config a rebuild starts from: the recorded one, with the strategy and the image codec left to auto again
    unless the user had named them (auto keeps the cache's while nothing else changes)."""
    cfg = m.config
    if m.strategy_reason != STRATEGY_BY_FLAG:
        cfg = dataclasses.replace(cfg, strategy=AUTO)
    if m.codec_reason != CODEC_BY_FLAG:
        cfg = dataclasses.replace(cfg, image_codec=AUTO)
    return cfg


def config_from_args(a, base: BuildConfig | None = None) -> BuildConfig:
    """base (default: BuildConfig()) with every config flag that was given; a flag's dest is its field's name."""
    given = {}
    for f in dataclasses.fields(BuildConfig):
        value = getattr(a, f.name, None)
        if value is None:
            continue
        if f.name == "ignore_tags" and isinstance(value, str):
            value = tuple(t.strip() for t in value.split(",") if t.strip())
        given[f.name] = value
    return dataclasses.replace(base or BuildConfig(), **given)


def refuse_build_over_inputs(a, dest: Location) -> None:
    """Before any work (a bucket's cache pulled into staging included): where the build writes, --out or, building
    to a URL, its staging folder, against the --data sets given (inputs.refuse_overwrite; resolve checks those an
    existing cache recorded)."""
    flag, out = ("--staging", a.staging or default_staging(dest)) if dest.remote else ("--out", a.out)
    refuse_overwrite(flag, out, [i for d in a.data or () for i in dataset_inputs(d, "--data")], BUILD_WRITES)


def resolve(a) -> BuildRequest:
    """The build's request: each flag given, else the existing cache's recorded option, else the default."""
    if a.jobs is not None and a.jobs != -1 and a.jobs < 1:
        raise UsageError(f"--jobs {a.jobs}: give -1 (every core) or a number of worker processes >= 1")
    old = existing_cache(a.out, bool(a.data))

    def pick(flag: str, default):
        given = getattr(a, flag)
        if given is not None:
            return given
        return getattr(old.source, flag) if old is not None else default

    data = a.data or (list(old.source.data_dirs) if old is not None else None)
    refuse_overwrite("--out", a.out, [i for d in data or () for i in dataset_inputs(d, "--data")], BUILD_WRITES)
    return BuildRequest(
        config=config_from_args(a, recorded_config(old) if old is not None else None), data=data,
        split=pick("split", DEFAULT_SPLIT), skip_bad=pick("skip_bad", False),
        check_content=pick("check_content", False), file_format=a.file_format)


def plan_lines(p: BuildPlan) -> list[str]:
    """The plan as printed: where, what changed, how it is stored and why, how much; warnings last."""
    mib = p.disk_bytes / 2**20
    head = "a new cache" if p.first_build else "update of the existing cache"
    lines = [f"cache {p.out}: {head}"]
    if p.changes:
        lines.append("  changed: " + "; ".join(p.changes))
    if p.source_changes:
        lines.append(f"  source: {p.source_changes}")
    if p.full_rebuild_reason:
        lines.append(f"  full rebuild: {p.full_rebuild_reason}")
    lines += [f"  strategy {p.strategy}, {p.file_format} files: {p.strategy_reason}",
              (f"  {p.images} images x {p.variants} variant(s) = {p.images * p.variants} samples in {p.files} file(s); "
               f"to write: {p.files_to_write} file(s), {p.samples_to_make} sample(s) to make, {p.samples_to_copy} "
               f"to copy from the previous cache"
               + (f", {p.samples_resumed} kept from the interrupted build" if p.samples_resumed else "")),
              f"  estimated size on disk: {mib:,.2f} MiB"]
    if p.codec_bytes:
        quality = f" at {p.image_settings}" if p.image_settings else ""
        sizes = ", ".join(f"{c} {b / 2**20:,.2f} MiB" for c, b in p.codec_bytes.items())
        lines.insert(-1, f"  image codec {p.image_codec}{quality}: {p.codec_reason} (estimated: {sizes})")
    lines += [f"  {p.pseudo}"] if p.pseudo else []
    lines += [f"warning: {w}" for w in p.warnings]
    return lines


def print_plan(p: BuildPlan) -> None:
    print("\n".join(plan_lines(p)), file=sys.stderr, flush=True)


def result_line(r, shown: str) -> str:
    """The line a build (its BuildReport r) ends with, the cache named `shown`: up to date, and what it recorded
    (readers' defaults, new splits: computed 0), or what it computed, copied, wrote and kept."""
    if r.up_to_date:   # pages stored resized only do not depend on what only a reader uses; splits are bookkeeping
        recorded = [f"readers' defaults now {r.reader_defaults}"] * bool(r.reader_defaults) + \
            [f"splits recorded: {r.splits_recorded}"] * bool(r.splits_recorded)
        done = f"computed 0, {'; '.join(recorded)}" if recorded else "nothing to do"
        return (f"cache {shown}: up to date ({r.images} images, {r.samples} samples, strategy {r.strategy}); {done} "
                f"[{r.seconds:.2f} s]")
    resumed = f", kept {r.resumed} from the interrupted build" if r.resumed else ""
    return (f"cache {shown}: {r.images} images, {r.samples} samples: computed {r.computed}, copied {r.copied} from "
            f"the previous cache{resumed}; files written {r.files_written}, kept {r.files_reused}, removed "
            f"{r.files_removed} [{r.seconds:.1f} s]")
