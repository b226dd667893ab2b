"""Build orchestration: ingest, plan, fill data files in parallel, commit the manifest last.

Crash safety: new data files are written under temp names and renamed into place only when
complete; the manifest is replaced atomically after every file is in place; files the new
manifest no longer names are deleted only after that. A build killed at any point leaves the
previous cache readable, and the next build reuses every file that was finished and, in a file left
unfinished, every row it had finished (journal.py; not for zarr, whose files are written whole). What
the build may touch in --out is outdir.py's; how workers start and stop (Ctrl-C) is pool.py's.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from east_cache.config import AUTO, READER_ONLY, BuildConfig
from east_cache.errors import BuildError, BuildInterrupted, BuildStopped, CacheError, cache_command, interrupt_in
from east_cache.ingest.objects import source_root
from east_cache.ingest.pseudolabels import marked_files
from east_cache.ingest.ufo import load_splits
from east_cache.progress import Progress
from east_cache.build.announce import announce
from east_cache.atomic import fsync_path, publish
from east_cache.build.fingerprint import build_fingerprint, json_fingerprints, source_fingerprints
from east_cache.store.fingerprint import rows_checksum
from east_cache.store.format import DATA_DIR, MANIFEST, record_spec, sample_bytes
from east_cache.store.formats import FileFormat, format_of, get_format
from east_cache.build.journal import append_rows, journaled, resume
from east_cache.build.members import memberships, same_splits, source_names, splits_change
from east_cache.store.manifest import BuildStats, FileEntry, Manifest, Source, data_path
from east_cache.build.outdir import (
    build_lock,  # noqa: F401  (the lock is part of the build's API)
    collect_garbage,
    corrupt_files,
    owned_out,
    remove_other_temp_files,
    remove_temp_files,
)
from east_cache.build.plan import CORRUPT_MARKER, FilePlan, Plan, journal_name, make_plan, stage_name, tmp_name
from east_cache.build.pool import running
from east_cache.store.sidecar import quads_checksum, quads_path, sidecar_arrays
from east_cache.build.stale import Staleness, compare_sources, sources_unchanged
from east_cache.build.strategy import AUTO_REASON, STRATEGY_BY_FLAG, choose_strategy, resolve_codec
from east_cache.build.worker import SKIPPED_NOTE, RowResult


@dataclass
class BuildReport:
    out: Path
    strategy: str
    strategy_reason: str = ""
    images: int = 0
    samples: int = 0
    computed: int = 0           # samples made from the source images
    copied: int = 0             # samples copied from the previous cache
    resumed: int = 0            # samples an interrupted build had finished in a file it left unfinished
    files_reused: int = 0
    files_written: int = 0
    files_removed: int = 0
    seconds: float = 0.0
    up_to_date: bool = False
    full_rebuild_reason: str = ""
    first_build: bool = True
    skipped: list[tuple[str, str]] = field(default_factory=list)   # --skip-bad: (image, why) left out or blanked
    changes: Staleness = field(default_factory=Staleness)
    cleanup_error: str = ""     # old files the committed build could not delete (the next build does)
    reader_defaults: str = ""   # options only a reader uses whose new values were recorded, the pages kept
    splits_recorded: str = ""   # the sources' splits recorded anew (members.splits_change), nothing computed for them


def build_cache(cfg: BuildConfig, data_dirs, out, **kw) -> BuildReport:
    """Build or update the cache at out. cfg.strategy "auto" picks one (build/strategy.py) and keeps an existing
    cache's; file_format None keeps the cache's format where it can hold the strategy, else npy (keywords: _build's).
    on_plan(BuildPlan) is called once the work is known, before it starts (not when the cache is up to date).
    A first build that fails removes the --out, data/ and lock file it created, where nothing else is in them;
    an --out whose manifest.json no build of ours wrote is refused. on_file(name) is called as each data file
    this build writes is in place (a build for a URL uploads it then)."""
    out = Path(out)
    with owned_out(out):
        return _build(cfg, data_dirs, out, **kw)


def _build(cfg: BuildConfig, data_dirs, out: Path, split: str = "train", jobs: int = -1, quiet: bool = False,
           check_content: bool = False, skip_bad: bool = False, backend: str | None = None, log=None,
           file_format: str | None = None, on_plan=None, on_file=None, names: list[str] | None = None) -> BuildReport:
    log = log or (lambda msg: None if quiet else print(msg, file=sys.stderr))
    t0 = time.perf_counter()
    old = _old_manifest(out, log)
    fmt = _pick_format(file_format, old, cfg)
    source = Source([source_root(d) for d in data_dirs], split, skip_bad, check_content)
    names = source_names(source.data_dirs, names, old)
    if old is not None and _nothing_to_do(old, cfg, source, out, fmt) and same_splits(old, names, source):
        n = len(old.images)
        return BuildReport(out, old.config.strategy, old.strategy_reason, images=n, samples=n * cfg.variants,
                           files_reused=len(old.files), up_to_date=True, first_build=False,
                           seconds=time.perf_counter() - t0)
    # Fingerprint the UFO files before reading them: an edit made during the build shows next time.
    source.json_files = json_fingerprints(source.data_dirs, split, check_content)
    records, summary = load_splits(source.data_dirs, split, cfg, skip_bad=skip_bad)
    ingest = {**summary.to_dict(), "pseudo": marked_files(records)}   # [UFO file, images] of pseudo-labels
    cfg, codec_reason = resolve_codec(cfg, records, old.config if old is not None else None)
    cfg, reason = _resolve_strategy(cfg, records, old, fmt)
    report = BuildReport(out, cfg.strategy, reason, images=len(records), samples=len(records) * cfg.variants,
                         first_build=old is None)
    sources = source_fingerprints(records, check_content)
    data_sources, members = memberships(source.data_dirs, names, split, sources, check_content, old, log)
    build_fp = build_fingerprint(cfg)
    corrupt = corrupt_files(out)
    plan = make_plan(cfg, build_fp, records, sources, old, out, corrupt, fmt.name)
    report.changes = compare_sources(old.images, sources) if old else Staleness(added=list(sources))
    if old is not None and old.build_fingerprint != build_fp:
        report.full_rebuild_reason = _config_change(old, cfg)
    if old is not None and not plan.to_write and not corrupt and _same_files(old, plan):
        report.up_to_date, report.files_reused = True, len(plan.files)
        report.reader_defaults = _reader_change(old.config, cfg)
        report.splits_recorded = splits_change(old.sources, data_sources)   # new folds, say: nothing computed
        if ((old.source, old.images, old.build_fingerprint, old.config, old.sources, old.members)
                != (source, sources, build_fp, cfg, data_sources, members)):
            # e.g. a UFO file saved again unchanged: record it, so that the quick test passes next time. (The files'
            # names carry the build fingerprint: files found under them were made by a build with this config.)
            dataclasses.replace(old, source=source, images=sources, build_fingerprint=build_fp, config=cfg,
                                sources=data_sources, members=members).save(out)
        report.seconds = time.perf_counter() - t0
        return report
    spec = record_spec(cfg)
    going_on = set() if fmt.whole_file else resume(out, plan, spec)
    if on_plan is not None:
        on_plan(announce(out, cfg, plan, fmt, old, source, records, reason, report.full_rebuild_reason,
                         report.changes, codec_reason, ingest["pseudo"]))
    # Per-image facts learnt while decoding; rows copied from the old cache keep theirs.
    unchanged = lambda n: n in sources and n not in report.changes.changed   # noqa: E731
    notes = {n: v for n, v in (old.notes if old else {}).items() if unchanged(n)}
    exif = {n for n in (old.exif_applied if old else []) if unchanged(n)}
    try:
        remove_other_temp_files(out, going_on)
        _preallocate(out, cfg, plan, fmt, records)
        entries = _execute(cfg, plan, out, jobs, quiet, skip_bad, backend, notes, exif, report, on_file)
    except BaseException as e:
        if interrupt_in(e) is None:   # an error: finished files stay, for the next build to reuse
            remove_temp_files(out, plan)
            raise
        kept, rows = journaled(out, plan, spec)   # Ctrl-C, SIGTERM: finished files and journaled rows stay
        remove_temp_files(out, plan, kept)
        done = [f for f in plan.files if data_path(out, f.name).exists()]
        raise BuildStopped(sum(len(f.keys) for f in done) + rows, report.samples, len(done), len(plan.files),
                           rows) from None
    ingest["exif_applied"] = len(exif)
    stats = BuildStats(round(time.perf_counter() - t0, 3), time.strftime("%Y-%m-%dT%H:%M:%S"), report.computed,
                       report.copied, report.files_reused)
    manifest = Manifest(build_fp, cfg, source, sources, entries, fmt.name, reason, ingest, notes, sorted(exif), stats,
                        codec_reason=codec_reason, sources=data_sources, members=members)
    report.skipped = [tuple(b) for b in summary.bad] + [(n, v) for n, v in sorted(notes.items())
                                                         if v.startswith(SKIPPED_NOTE)]
    try:
        _commit(out, manifest)
        try:
            report.files_removed = collect_garbage(out, {e.name for e in entries})
        except OSError as e:   # the new cache is in place: say so, rather than that the old one is unchanged
            report.cleanup_error = f"{e.filename or out}: {e.strerror or e}"
    except BaseException as e:   # Ctrl-C once the manifest is renamed into place (its sync, the cleanup)
        if interrupt_in(e) is not None and _committed(out, manifest):
            raise BuildInterrupted() from None
        raise
    report.seconds = time.perf_counter() - t0
    return report


def _commit(out: Path, manifest: Manifest) -> None:
    """Save the manifest. Should an error come after the rename (while syncing the directory), the new cache is
    what a reader sees: the error says so, not that the previous cache is unchanged (a Ctrl-C: _build's line)."""
    try:
        manifest.save(out)
    except OSError as e:
        if _committed(out, manifest):
            raise BuildError(f"{out}: the new cache is in place, but making it durable failed ({e}); run "
                             f"`{cache_command('verify')} {out}` once the disk is healthy") from e
        raise


def _committed(out: Path, manifest: Manifest) -> bool:
    try:
        return json.loads((out / MANIFEST).read_text()).get("build") == dataclasses.asdict(manifest.build)
    except (OSError, ValueError, AttributeError):
        return False


def rebuild(cache_dir, jobs: int = -1, quiet: bool = False) -> BuildReport:
    """Bring a cache up to date with the source and the config it was built with (also one of another format
    version, or made by other sample code: made anew)."""
    m = Manifest.load(cache_dir, any_version=True)
    return build_cache(m.config, m.source.data_dirs, cache_dir, split=m.source.split, jobs=jobs, quiet=quiet,
                       check_content=m.source.check_content, skip_bad=m.source.skip_bad, file_format=m.file_format)


def _pick_format(name: str | None, old: Manifest | None, cfg: BuildConfig) -> FileFormat:
    """The format asked for; else the cache's, unless it cannot hold the strategy or crop mode asked for; else
    npy. Pages (--crop read) are npy only: their records are packed (store/formats/packed.py)."""
    packed = cfg.crop == "read"
    if name is not None:
        if packed and name != "npy":
            raise BuildError(f"--format {name} holds --crop build caches only; page caches (--crop read, the "
                             f"default) are packed into npy files: pass --format npy, or --crop build")
        return get_format(name)
    kept = old.format if old is not None else get_format("npy")
    if not packed and (cfg.strategy == AUTO or kept.strategies is None or cfg.strategy in kept.strategies):
        return kept
    return get_format("npy")


def _nothing_to_do(old: Manifest, cfg: BuildConfig, source: Source, out: Path, fmt: FileFormat) -> bool:
    """Up to date, decided without reading the annotations: the same source, config and file format, the
    UFO and image files untouched, every data file in place. Anything else takes the full comparison."""
    if cfg.strategy == AUTO:
        cfg = dataclasses.replace(cfg, strategy=old.config.strategy)
    if cfg.image_codec == AUTO:
        cfg = dataclasses.replace(cfg, image_codec=old.config.image_codec)
    in_place = all(data_path(out, f.name).exists() and quads_path(data_path(out, f.name)).exists() for f in old.files)
    return (old.source.request() == source.request() and old.build_fingerprint == build_fingerprint(cfg)
            and old.config == cfg
            and old.file_format == fmt.name and not (out / CORRUPT_MARKER).exists() and in_place
            and sources_unchanged(old))


def _old_manifest(out: Path, log) -> Manifest | None:
    try:
        return Manifest.load(out)
    except CacheError as e:
        if (out / MANIFEST).exists():
            log(f"ignoring the previous manifest: {e}")
        return None


def _resolve_strategy(cfg: BuildConfig, records, old: Manifest | None, fmt: FileFormat) -> tuple[BuildConfig, str]:
    """cfg with a concrete strategy, and why it was picked."""
    auto = cfg.strategy == AUTO
    if fmt.strategies is not None:
        if auto:
            return (dataclasses.replace(cfg, strategy=fmt.strategies[0]),
                    f"--format {fmt.name}: {fmt.name} files hold the {' or '.join(fmt.strategies)} strategy")
        if cfg.strategy not in fmt.strategies:
            raise BuildError(f"--format {fmt.name} stores the {' or '.join(fmt.strategies)} strategy only, not "
                             f"{cfg.strategy}; use --strategy {fmt.strategies[0]} (or auto)")
    if not auto:
        return cfg, STRATEGY_BY_FLAG
    if old is not None:
        kept = dataclasses.replace(cfg, strategy=old.config.strategy)
        if kept.stored() == old.config.stored():   # options only a reader uses leave the layout as it is
            return kept, f"kept the existing cache's strategy ({kept.strategy}) so that it can be updated in place"
    members = [(i, v) for i in range(len(records)) for v in range(cfg.variants)]
    per_sample = sample_bytes(cfg, records, members) // max(1, len(members))
    strategy, reason = choose_strategy(len(records) * cfg.variants, per_sample)
    return dataclasses.replace(cfg, strategy=strategy), AUTO_REASON + reason


def _config_change(old: Manifest, cfg: BuildConfig) -> str:
    was, new = old.config.stored().to_dict(), cfg.stored().to_dict()
    fields = [k for k in sorted(set(was) | set(new)) if was.get(k) != new.get(k)]
    if fields:
        return "the build configuration changed (" + ", ".join(f"{k}: {was.get(k)} -> {new.get(k)}" for k in fields) + ")"
    return "the sample-making code or the cache format changed"


def _reader_change(was: BuildConfig, new: BuildConfig) -> str:
    """The options only a reader uses (config.READER_ONLY) that changed, "name: old -> new, ...": the readers'
    defaults recorded, the pages kept."""
    return ", ".join(f"{k}: {getattr(was, k)} -> {getattr(new, k)}" for k in READER_ONLY
                     if getattr(was, k) != getattr(new, k))


def _same_files(old: Manifest, plan: Plan) -> bool:
    return [f.name for f in old.files] == [f.name for f in plan.files]


def _preallocate(out: Path, cfg: BuildConfig, plan: Plan, fmt: FileFormat, records) -> None:
    """Reserve every new file's space up front: a full disk fails here, with a message, not mid-write. Page files
    are packed from sparse staging files: the check counts the pages' own bytes, and one file's staging beside its
    packed copy; their blocks are taken as the pages are written."""
    spec = record_spec(cfg)
    if spec.kind.packed:
        need = (sum(sample_bytes(cfg, records, f.members) for f in plan.to_write)
                + max((sample_bytes(cfg, records, f.members, staging=True) for f in plan.to_write), default=0))
    else:
        need = sum(fmt.disk_bytes(spec, len(f.keys)) for f in plan.to_write)
    free = shutil.disk_usage(out).free
    if need > free:
        raise BuildError(f"{out}: not enough disk space: this build needs {need / 2**30:.2f} GiB, "
                         f"{free / 2**30:.2f} GiB are free. Free some space or build into another --out; "
                         f"the existing cache is unchanged.")
    fmt.check_writers(spec, max((len(f.keys) for f in plan.to_write), default=0))
    for f in plan.to_write:
        if f.done:   # its staging file holds rows of an interrupted build: this build goes on with it
            continue
        path = data_path(out, stage_name(f.name, spec))
        try:
            fmt.preallocate(path, spec, len(f.keys))
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            raise BuildError(f"{out}: the disk filled up while reserving {path.name}. Free some space or build "
                             f"into another --out; the existing cache is unchanged.") from e


def _execute(cfg, plan: Plan, out: Path, jobs, quiet, skip_bad, backend, notes, exif, report,
             on_file=None) -> list[FileEntry]:
    entries: list[FileEntry | None] = [None] * len(plan.files)
    pending: dict[int, dict] = {i: {} for i, f in enumerate(plan.files) if f.reuse is None}
    for i, f in enumerate(plan.files):
        if f.reuse is not None:
            entries[i] = f.reuse if isinstance(f.reuse, FileEntry) else _entry_from_disk(out, f, cfg)
            report.files_reused += 1
    journal = not get_format(plan.file_format).whole_file

    def arrived(rows: list[RowResult], resumed: bool = False) -> None:
        """Rows reported (or kept from an interrupted build): files complete are finished, the rest journaled."""
        unfinished: dict[int, list] = {}
        for r in rows:
            _record(r, notes, exif, report, resumed)
            done, f = pending[r.file], plan.files[r.file]
            done[r.row] = r
            unfinished.setdefault(r.file, []).append((f.keys[r.row], r))
            if len(done) == len(f.keys):
                entries[r.file] = _finish_file(out, f, done, record_spec(cfg))
                report.files_written += 1
                if on_file is not None:
                    on_file(entries[r.file].name)
                del pending[r.file], unfinished[r.file]
        for i, journaled_rows in unfinished.items():
            if journal and not resumed:
                append_rows(data_path(out, journal_name(plan.files[i].name)), journaled_rows)

    arrived([r for f in plan.to_write for r in f.done.values()], resumed=True)
    progress = Progress(len(plan.tasks), "samples", quiet)
    with running(cfg, plan, jobs, skip_bad, backend) as results:
        for batch in results:
            arrived(batch)
            progress.update(len(batch))
    progress.close()
    fsync_path(out / DATA_DIR)
    return entries


def _record(r: RowResult, notes: dict, exif: set, report: BuildReport, resumed: bool = False) -> None:
    if resumed:
        report.resumed += 1
    elif r.name is None:
        report.copied += 1
    else:
        report.computed += 1
    if r.name is None:
        return
    (exif.add if r.exif else exif.discard)(r.name)
    if r.note:
        notes[r.name] = r.note
    else:
        notes.pop(r.name, None)


def _finish_file(out: Path, f: FilePlan, rows: dict[int, RowResult], spec) -> FileEntry:
    """Pack a page file's staging slots, write the sidecar, make the data file durable, then rename both into place
    (sidecar first)."""
    tmp = data_path(out, tmp_name(f.name))
    ordered = [rows[i] for i in range(len(f.keys))]
    final = data_path(out, f.name)
    stage = data_path(out, stage_name(f.name, spec))
    if spec.kind.packed:
        format_of(final).pack(stage, tmp, spec, [r.lengths for r in ordered])
    final_quads = quads_path(final)
    tmp_quads = final_quads.with_name(tmp_name(final_quads.name))
    checksum = rows_checksum(r.crc for r in ordered)
    np.savez(tmp_quads, **sidecar_arrays(ordered, checksum))
    for p in (tmp_quads, tmp):
        fsync_path(p)
    publish(tmp_quads, final_quads)
    fmt = format_of(final)
    fmt.install(tmp, final)
    for p in (stage, data_path(out, journal_name(f.name))):   # kept until now: a kill before leaves the rows
        p.unlink(missing_ok=True)
    return _file_entry(final, f, checksum, fmt)


def _entry_from_disk(out: Path, f: FilePlan, cfg: BuildConfig) -> FileEntry:
    """A file finished by an interrupted build: trusted (it was renamed into place complete), checksummed now."""
    path = data_path(out, f.name)
    fmt = format_of(path)
    return _file_entry(path, f, fmt.checksum(path, record_spec(cfg)), fmt)


def _file_entry(path: Path, f: FilePlan, checksum: str, fmt: FileFormat) -> FileEntry:
    """A data file's manifest entry. checksum covers the decoded records, the same in every format; a file of
    several parts (a zarr group) adds one per part, which verify compares without decoding."""
    return FileEntry(f.name, len(f.keys), f.keys, checksum, quads_checksum(quads_path(path)),
                     fmt.part_checksums(path), fmt.file_bytes(path))
