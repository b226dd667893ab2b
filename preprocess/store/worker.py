"""What a joblib worker does: fill rows of preallocated data files in place, or write zarr files whole.

A worker writes its samples straight into their rows through a memory map and returns only
small things (row checksum, the sample's words, a decode note), never image arrays, so the
parent's memory does not grow with the dataset. zarr writes a shard in one piece, so one call
owns a whole zarr file: it assembles the file's records in its own memory and writes the group.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from preprocess.config import BuildConfig
from preprocess.errors import DataError
from preprocess.store.format import open_records, record_dtype, row_quads
from preprocess.store.manifest import quads_path, record_crc
from preprocess.store.plan import Task
from preprocess.store.zarrfile import write_group

SKIPPED_NOTE = "skipped: "   # starts the manifest note of an image --skip-bad blanked (build reports them)


@dataclass
class RowResult:
    file: int
    row: int
    crc: int
    points: np.ndarray     # float32 (P, 2) crop px
    offsets: np.ndarray    # int64 (N + 1,)
    care: np.ndarray       # uint8 (N,)
    name: str | None = None       # source image, when computed
    note: str | None = None       # decode warning or skip reason
    exif: bool = False            # the decoder applied the image's EXIF orientation


def run_tasks(cfg: BuildConfig, tasks: list[Task], skip_bad: bool) -> list[RowResult]:
    """Rows of preallocated .npy files, written in place."""
    dst_maps: dict[str, np.memmap] = {}
    sources: dict[str, tuple] = {}
    results = []
    for t in tasks:
        dst = dst_maps.get(t.dst)
        if dst is None:
            dst = dst_maps[t.dst] = np.load(t.dst, mmap_mode="r+")
        results.append(_fill(cfg, t, dst, sources, skip_bad))
    # The writer syncs its own rows: with --backend dask, --out is shared storage and this worker may run on
    # another machine, whose page cache the parent's fsync of the finished file does not reach.
    for m in dst_maps.values():
        m.flush()
    return results


def write_zarr_file(cfg: BuildConfig, tasks: list[Task], skip_bad: bool) -> list[RowResult]:
    """Every row of one zarr file, in row order: it holds rows x record bytes of memory while it works."""
    assert [t.row for t in tasks] == list(range(len(tasks))), "a zarr file is written whole, rows in order"
    records = np.zeros(len(tasks), record_dtype(cfg.input_size, cfg.map_size))
    sources: dict[str, tuple] = {}
    results = [_fill(cfg, t, records, sources, skip_bad) for t in tasks]
    write_group(tasks[0].dst, records)
    return results


def _fill(cfg: BuildConfig, t: Task, dst: np.ndarray, sources: dict, skip_bad: bool) -> RowResult:
    """Row t.row of dst, computed or copied from an old file of either format (opened once per call)."""
    if t.src is None:
        return _compute(cfg, t, dst, skip_bad)
    if t.src not in sources:
        sources[t.src] = (open_records(t.src), dict(np.load(quads_path(Path(t.src)))))
    return _copy(t, dst, *sources[t.src])


def _compute(cfg: BuildConfig, t: Task, dst: np.ndarray, skip_bad: bool) -> RowResult:
    from preprocess.sample.make import (
        make_sample,  # cv2 and the sample maths load in workers only, not in a no-op rebuild
    )
    rec = dst[t.row]
    try:
        s = make_sample(t.record, cfg, t.variant)
    except DataError as e:
        if not skip_bad:
            raise
        # An image that cannot be decoded becomes an all-don't-care sample: it keeps its place in
        # the layout, adds nothing to the loss, and is listed in the manifest.
        rec["image"], rec["score"], rec["geo"], rec["roi"] = 0, 0, 0, 0
        empty = np.zeros((0, 2), np.float32)
        return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), empty, np.zeros(1, np.int64),
                         np.zeros(0, np.uint8), t.record.name, f"{SKIPPED_NOTE}{e}")
    rec["image"], rec["score"], rec["geo"], rec["roi"] = s.image, s.score, s.geo.astype(np.float16), s.roi
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), s.points, s.offsets, s.care,
                     t.record.name, s.warning, s.exif_applied)


def _copy(t: Task, dst: np.ndarray, src, quads: dict) -> RowResult:
    dst[t.row] = src[t.src_row]
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), *row_quads(quads, t.src_row))
