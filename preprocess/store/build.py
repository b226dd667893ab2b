"""Build orchestration: ingest, plan, fill data files in parallel, commit the manifest last.

Crash safety: new data files are written under temp names and renamed into place only when
complete; the manifest is replaced atomically after every file is in place; files the new
manifest no longer names are deleted only after that. A build killed at any point leaves the
previous cache readable, and the next build reuses every file that was finished.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed, parallel_config

from preprocess.config import BuildConfig
from preprocess.errors import BuildError, CacheError
from preprocess.ingest.ufo import load_splits
from preprocess.progress import Progress
from preprocess.store.format import DATA_DIR, FILE_FORMATS, FORMAT_VERSION, record_dtype
from preprocess.store.manifest import (
    Staleness,
    build_fingerprint,
    compare_sources,
    data_path,
    file_checksum,
    fsync_path,
    json_fingerprints,
    quads_checksum,
    quads_path,
    read_manifest,
    rows_checksum,
    source_fingerprints,
    sources_unchanged,
    write_manifest,
)
from preprocess.store.plan import CORRUPT_MARKER, OWN_FILE, FilePlan, Plan, make_plan, tmp_name
from preprocess.store.strategy import available_ram, choose_strategy
from preprocess.store.worker import SKIPPED_NOTE, RowResult, run_tasks, write_zarr_file
from preprocess.store.zarrfile import raw_bytes, shard_checksums

TASKS_PER_CALL = 4   # rows per joblib call: amortises dispatch without starving workers on small builds



@dataclass
class BuildReport:
    out: Path
    strategy: str
    strategy_reason: str = ""
    images: int = 0
    samples: int = 0
    computed: int = 0           # samples made from the source images
    copied: int = 0             # samples copied from the previous cache
    files_reused: int = 0
    files_written: int = 0
    files_removed: int = 0
    seconds: float = 0.0
    up_to_date: bool = False
    full_rebuild_reason: str = ""
    first_build: bool = True
    skipped: list[tuple[str, str]] = field(default_factory=list)   # --skip-bad: (image, why) left out or blanked
    changes: Staleness = field(default_factory=Staleness)


@contextmanager
def build_lock(out: Path):
    """One build per cache directory; the kernel drops the lock if the process dies."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BuildError(f"{out}: another build (pid {holder}) is writing this cache. Wait for it to finish, "
                             f"or build into another --out.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def build_cache(cfg: BuildConfig, data_dirs, out, split: str = "train", jobs: int = -1, quiet: bool = False,
                check_content: bool = False, skip_bad: bool = False, auto_strategy: bool = False,
                backend: str | None = None, log=None, file_format: str | None = None) -> BuildReport:
    log = log or (lambda msg: None if quiet else print(msg, file=sys.stderr))
    out = Path(out)
    (out / DATA_DIR).mkdir(parents=True, exist_ok=True)
    with build_lock(out):
        t0 = time.perf_counter()
        old = _old_manifest(out, log)
        if file_format is None:   # keep the cache's format, unless it cannot hold the strategy asked for
            kept = (old or {}).get("file_format", "npy")
            file_format = kept if auto_strategy or cfg.strategy == "chunked" else "npy"
        source = {"data_dirs": [str(Path(d).resolve()) for d in data_dirs], "split": split,
                  "skip_bad": skip_bad, "check_content": check_content}
        if old is not None and _nothing_to_do(old, cfg, source, auto_strategy, out, file_format):
            n = len(old["images"])
            return BuildReport(out, old["config"]["strategy"], old.get("strategy_reason", ""), images=n,
                               samples=n * cfg.variants, files_reused=len(old["files"]), up_to_date=True,
                               first_build=False, seconds=time.perf_counter() - t0)
        # Fingerprint the UFO files before reading them: an edit made during the build shows next time.
        source["json_files"] = json_fingerprints(source["data_dirs"], split, check_content)
        records, summary = load_splits([Path(d) for d in source["data_dirs"]], split, cfg, skip_bad=skip_bad)
        cfg, reason = _resolve_strategy(cfg, records, old, auto_strategy, file_format)
        report = BuildReport(out, cfg.strategy, reason, images=len(records), samples=len(records) * cfg.variants,
                             first_build=old is None)
        sources = source_fingerprints(records, check_content)
        build_fp = build_fingerprint(cfg)
        corrupt = _corrupt_files(out)
        plan = make_plan(cfg, build_fp, records, sources, old, out, corrupt, file_format)
        report.changes = compare_sources(old["images"], sources) if old else Staleness(added=list(sources))
        if old is not None and old["build_fingerprint"] != build_fp:
            report.full_rebuild_reason = _config_change(old, cfg)
        if old is not None and not plan.to_write and not corrupt and _same_files(old, plan):
            report.up_to_date, report.files_reused = True, len(plan.files)
            if (old["source"], old["images"]) != (source, sources):
                # e.g. a UFO file saved again unchanged: record it, so that the quick test passes next time.
                write_manifest(out, {**old, "source": source, "images": sources})
            report.seconds = time.perf_counter() - t0
            return report
        _preallocate(out, cfg, plan)
        # Per-image facts learnt while decoding; rows copied from the old cache keep theirs.
        unchanged = lambda n: n in sources and n not in report.changes.changed   # noqa: E731
        notes = {n: v for n, v in (old or {}).get("notes", {}).items() if unchanged(n)}
        exif = {n for n in (old or {}).get("exif_applied", []) if unchanged(n)}
        entries = _execute(cfg, plan, out, jobs, quiet, skip_bad, backend, notes, exif, report)
        summary.exif_applied = len(exif)
        manifest = {
            "format_version": FORMAT_VERSION, "build_fingerprint": build_fp, "config": cfg.to_dict(),
            "strategy_reason": reason, "file_format": file_format,
            "source": source,
            "images": sources, "files": entries, "ingest": summary.to_dict(), "notes": notes,
            "exif_applied": sorted(exif),
            "build": {"seconds": round(time.perf_counter() - t0, 3), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                      "computed": report.computed, "copied": report.copied, "files_reused": report.files_reused},
        }
        write_manifest(out, manifest)
        report.skipped = [tuple(b) for b in summary.bad] + [(n, v) for n, v in sorted(notes.items())
                                                             if v.startswith(SKIPPED_NOTE)]
        report.files_removed = _collect_garbage(out, {e["name"] for e in entries})
        report.seconds = time.perf_counter() - t0
        return report


def rebuild(cache_dir, jobs: int = -1, quiet: bool = False) -> BuildReport:
    """Bring a cache up to date with the source and the config it was built with."""
    m = read_manifest(cache_dir)
    src = m["source"]
    return build_cache(BuildConfig.from_dict(m["config"]), src["data_dirs"], cache_dir, split=src["split"], jobs=jobs,
                       quiet=quiet, check_content=src["check_content"], skip_bad=src["skip_bad"],
                       file_format=m.get("file_format", "npy"))


def _nothing_to_do(old: dict, cfg: BuildConfig, source: dict, auto_strategy: bool, out: Path, file_format: str) -> bool:
    """Up to date, decided without reading the annotations: the same source, config and file format, the
    UFO and image files untouched, every data file in place. Anything else takes the full comparison."""
    if auto_strategy:
        cfg = dataclasses.replace(cfg, strategy=old["config"]["strategy"])
    recorded = {k: old["source"].get(k) for k in source}
    in_place = all(data_path(out, f["name"]).exists() and quads_path(data_path(out, f["name"])).exists()
                   for f in old["files"])
    return (recorded == source and old["build_fingerprint"] == build_fingerprint(cfg)
            and old.get("file_format", "npy") == file_format
            and not (out / CORRUPT_MARKER).exists() and in_place and sources_unchanged(old))


def _old_manifest(out: Path, log) -> dict | None:
    try:
        return read_manifest(out)
    except CacheError as e:
        if (out / "manifest.json").exists():
            log(f"ignoring the previous manifest: {e}")
        return None


def _resolve_strategy(cfg: BuildConfig, records, old: dict | None, auto: bool,
                      file_format: str) -> tuple[BuildConfig, str]:
    if file_format not in FILE_FORMATS:
        raise ValueError(f"file format {file_format!r} is not one of {', '.join(FILE_FORMATS)}")
    if file_format == "zarr":  # a zarr file holds one shard per field: chunk files are what it is made for
        if auto:
            return dataclasses.replace(cfg, strategy="chunked"), "--format zarr: zarr files hold the chunked strategy"
        if cfg.strategy != "chunked":
            raise BuildError(f"--format zarr stores the chunked strategy only, not {cfg.strategy}; "
                             f"use --strategy chunked (or auto)")
    if not auto:
        return cfg, "chosen with --strategy"
    if old is not None:
        kept = dataclasses.replace(cfg, strategy=old["config"]["strategy"])
        if kept.to_dict() == old["config"]:
            return kept, f"kept the existing cache's strategy ({kept.strategy}) so that it can be updated in place"
    record_bytes = record_dtype(cfg.input_size, cfg.map_size).itemsize
    strategy, reason = choose_strategy(len(records) * cfg.variants, record_bytes)
    return dataclasses.replace(cfg, strategy=strategy), reason


def _config_change(old: dict, cfg: BuildConfig) -> str:
    new = cfg.to_dict()
    fields = [k for k in sorted(set(old["config"]) | set(new)) if old["config"].get(k) != new.get(k)]
    if fields:
        return "the build configuration changed (" + ", ".join(f"{k}: {old['config'].get(k)} -> {new.get(k)}" for k in fields) + ")"
    return "the sample-making code or the cache format changed"


def _same_files(old: dict, plan: Plan) -> bool:
    return [f["name"] for f in old["files"]] == [f.name for f in plan.files]


def _corrupt_files(out: Path) -> set[str]:
    marker = out / CORRUPT_MARKER
    return set(json.loads(marker.read_text())) if marker.exists() else set()


def _preallocate(out: Path, cfg: BuildConfig, plan: Plan) -> None:
    """Reserve every new file's blocks up front: a full disk fails here, with a message, not mid-write.
    A zarr file's compressed size is known only once it is written: there, its raw fields must fit,
    and one worker must be able to hold a whole file in memory."""
    dtype = record_dtype(cfg.input_size, cfg.map_size)
    rows = sum(len(f.keys) for f in plan.to_write)
    need = rows * (raw_bytes(dtype) if plan.file_format == "zarr" else dtype.itemsize)
    free = shutil.disk_usage(out).free
    if need > free:
        raise BuildError(f"{out}: not enough disk space: this build needs {need / 2**30:.2f} GiB, "
                         f"{free / 2**30:.2f} GiB are free. Free some space or build into another --out; "
                         f"the existing cache is unchanged.")
    if plan.file_format == "zarr":
        _check_writer_memory(plan, dtype)
        return
    for f in plan.to_write:
        path = data_path(out, tmp_name(f.name))
        arr = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(len(f.keys),))
        del arr
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise BuildError(f"{out}: the disk filled up while reserving {path.name}. Free some space or build "
                                 f"into another --out; the existing cache is unchanged.") from e
        finally:
            os.close(fd)


def _check_writer_memory(plan: Plan, dtype: np.dtype) -> None:
    """zarr encodes a shard in one piece, so a worker assembles a whole file in its memory first."""
    rows = max((len(f.keys) for f in plan.to_write), default=0)
    need, ram = rows * dtype.itemsize, available_ram()
    if need > ram:
        raise BuildError(f"--format zarr: a worker holds a whole chunk file in memory, {rows} samples x "
                         f"{dtype.itemsize / 2**20:.1f} MiB = {need / 2**30:.1f} GiB, more than the "
                         f"{ram / 2**30:.1f} GiB of available RAM. Use a smaller --chunk-size (each of the --jobs "
                         f"workers holds one file); the existing cache is unchanged.")


def _execute(cfg, plan: Plan, out: Path, jobs, quiet, skip_bad, backend, notes, exif, report) -> list[dict]:
    entries: list[dict | None] = [None] * len(plan.files)
    pending = {i: {} for i, f in enumerate(plan.files) if f.reuse is None}
    for i, f in enumerate(plan.files):
        if f.reuse is not None:
            entries[i] = f.reuse if f.reuse else _entry_from_disk(out, f)
            report.files_reused += 1
    progress = Progress(len(plan.tasks), "samples", quiet)
    with parallel_config(backend=backend) if backend else nullcontext():
        results = Parallel(n_jobs=jobs, return_as="generator_unordered")(_calls(cfg, plan, skip_bad))
        for batch in results:
            for r in batch:
                _record(r, notes, exif, report)
                rows = pending[r.file]
                rows[r.row] = r
                if len(rows) == len(plan.files[r.file].keys):
                    entries[r.file] = _finish_file(out, plan.files[r.file], rows)
                    report.files_written += 1
                    del pending[r.file]
            progress.update(len(batch))
    progress.close()
    fsync_path(out / DATA_DIR)
    return entries


def _calls(cfg: BuildConfig, plan: Plan, skip_bad: bool) -> list:
    """joblib calls: a few rows each for .npy files, which workers fill in place; one whole file each for
    zarr, whose shards are written in one piece, so that no two workers ever write the same shard."""
    if plan.file_format == "zarr":
        by_file: dict[int, list] = {}
        for t in plan.tasks:
            by_file.setdefault(t.file, []).append(t)
        return [delayed(write_zarr_file)(cfg, tasks, skip_bad) for tasks in by_file.values()]
    return [delayed(run_tasks)(cfg, plan.tasks[k:k + TASKS_PER_CALL], skip_bad)
            for k in range(0, len(plan.tasks), TASKS_PER_CALL)]


def _record(r: RowResult, notes: dict, exif: set, report: BuildReport) -> None:
    if r.name is None:
        report.copied += 1
        return
    report.computed += 1
    (exif.add if r.exif else exif.discard)(r.name)
    if r.note:
        notes[r.name] = r.note
    else:
        notes.pop(r.name, None)


def _finish_file(out: Path, f: FilePlan, rows: dict[int, RowResult]) -> dict:
    """Write the sidecar, make the data file durable, then rename both into place (sidecar first)."""
    tmp = data_path(out, tmp_name(f.name))
    ordered = [rows[i] for i in range(len(f.keys))]
    word_counts = [len(r.care) for r in ordered]
    point_base = np.cumsum([0] + [len(r.points) for r in ordered])
    quads = {
        "points": np.concatenate([r.points for r in ordered]).astype(np.float32).reshape(-1, 2),
        "offsets": np.concatenate([[0]] + [r.offsets[1:] + base for r, base in zip(ordered, point_base)]).astype(np.int64),
        "care": np.concatenate([r.care for r in ordered]).astype(np.uint8),
        "sample_offsets": np.cumsum([0] + word_counts).astype(np.int64),
    }
    final_quads = quads_path(data_path(out, f.name))
    tmp_quads = final_quads.with_name(tmp_name(final_quads.name))
    np.savez(tmp_quads, **quads)
    for p in (tmp_quads, tmp):
        fsync_path(p)
    os.replace(tmp_quads, final_quads)
    final = data_path(out, f.name)
    if final.is_dir():  # a zarr file that verify found corrupt: rename cannot replace a directory that has files
        shutil.rmtree(final)
    os.replace(tmp, final)
    return _file_entry(final, f, rows_checksum(r.crc for r in ordered))


def _entry_from_disk(out: Path, f: FilePlan) -> dict:
    """A file finished by an interrupted build: trusted (it was renamed into place complete), checksummed now."""
    path = data_path(out, f.name)
    return _file_entry(path, f, file_checksum(path))


def _file_entry(path: Path, f: FilePlan, checksum: str) -> dict:
    """A data file's manifest entry. checksum covers the decoded records, the same in either format; a zarr
    file adds one per shard and metadata file, which verify compares without decoding."""
    entry = {"name": f.name, "rows": len(f.keys), "keys": f.keys, "checksum": checksum,
             "quads_checksum": quads_checksum(quads_path(path))}
    if path.suffix == ".zarr":
        entry["shards"] = shard_checksums(path)
    return entry


def _collect_garbage(out: Path, keep: set[str]) -> int:
    """After the commit: delete data files no manifest names (old versions, leftovers of killed builds).
    Only names a build writes are candidates: whatever else lies in the directory is not ours to delete."""
    keep = keep | {quads_path(data_path(out, name)).name for name in keep}
    removed = 0
    for p in (out / DATA_DIR).iterdir():
        if p.name in keep or not OWN_FILE.fullmatch(p.name):
            continue
        if p.is_dir():  # a zarr file
            shutil.rmtree(p)
        else:
            p.unlink()
        removed += p.suffix[1:] in FILE_FORMATS
    marker = out / CORRUPT_MARKER
    if marker.exists():
        marker.unlink()
    return removed

