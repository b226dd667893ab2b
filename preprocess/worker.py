"""What a joblib worker does: fill rows of preallocated data files in place.

A worker writes its samples straight into their rows through a memory map and returns only
small things (row checksum, the sample's words, a decode note), never image arrays, so the
parent's memory does not grow with the dataset.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from preprocess.config import BuildConfig
from preprocess.format import row_quads
from preprocess.manifest import quads_path, record_crc
from preprocess.plan import Task


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


def run_tasks(cfg: BuildConfig, tasks: list[Task], skip_bad: bool) -> list[RowResult]:
    dst_maps: dict[str, np.memmap] = {}
    src_maps: dict[str, tuple[np.ndarray, dict]] = {}
    results = []
    for t in tasks:
        dst = dst_maps.get(t.dst)
        if dst is None:
            dst = dst_maps[t.dst] = np.load(t.dst, mmap_mode="r+")
        if t.src is None:
            results.append(_compute(cfg, t, dst, skip_bad))
        else:
            if t.src not in src_maps:
                src_maps[t.src] = (np.load(t.src, mmap_mode="r"), dict(np.load(quads_path(Path(t.src)))))
            results.append(_copy(t, dst, *src_maps[t.src]))
    for m in dst_maps.values():
        m.flush()
    return results


def _compute(cfg: BuildConfig, t: Task, dst: np.memmap, skip_bad: bool) -> RowResult:
    from preprocess.sample import make_sample
    from preprocess.ufo import DataError
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
                         np.zeros(0, np.uint8), t.record.name, f"skipped: {e}")
    rec["image"], rec["score"], rec["geo"], rec["roi"] = s.image, s.score, s.geo.astype(np.float16), s.roi
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), s.points, s.offsets, s.care,
                     t.record.name, s.warning)


def _copy(t: Task, dst: np.memmap, src: np.ndarray, quads: dict) -> RowResult:
    dst[t.row] = src[t.src_row]
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), *row_quads(quads, t.src_row))
