"""What a joblib worker does: fill rows of data files through their format's writer.

A worker writes its samples straight into their rows and returns only small things (row checksum,
the sample's words, a decode note), never image arrays, so the parent's memory does not grow with
the dataset. npy rows are filled in place through a memory map, a few per call; a format that writes
a file in one piece (zarr) gets a whole file per call, assembled in the worker's memory.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.store.fingerprint import record_crc
from east_cache.ingest.ufo import CARE
from east_cache.store.format import PAGE, SPARSE_KINDS, RecordSpec, record_spec
from east_cache.store.formats import format_of, get_format
from east_cache.store.plan import Task
from east_cache.store.sidecar import load_sidecar, row_quads, row_words

SKIPPED_NOTE = "skipped: "   # starts the manifest note of an image --skip-bad blanked (build reports them)
PARENT_POLL_S = 0.5          # how often a worker looks whether the build that started it is still alive
_watching = threading.Event()


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
    word: np.ndarray | None = None     # int32 (N,): each word's index among its image's words
    weight: np.ndarray | None = None   # float32 (N,): page records: each word's draw weight
    legible: int = 0              # legible words of the source image


def init_worker(build_pid: int) -> None:
    """loky's initializer for the build's worker processes. Ctrl-C reaches every process of the terminal's
    group: the build stops its workers itself, so a worker ignores it rather than print a traceback. And a
    worker exits once the build is gone: a build killed with SIGKILL cannot stop its workers, which would
    otherwise wait for work for minutes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != build_pid:   # the build died while this worker was starting
        os._exit(1)
    if _watching.is_set():
        return
    _watching.set()

    def watch() -> None:
        while os.getppid() == build_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)   # orphaned: nobody will collect these rows

    threading.Thread(target=watch, name="exit-with-build", daemon=True).start()


def write_rows(cfg: BuildConfig, tasks: list[Task], skip_bad: bool, file_format: str) -> list[RowResult]:
    """Fill the tasks' rows, then finish every file written to (a whole-file format gets all of a file's rows)."""
    fmt, spec = get_format(file_format), record_spec(cfg)
    per_file = Counter(t.dst for t in tasks)
    if fmt.whole_file:
        assert all([t.row for t in tasks if t.dst == d] == list(range(n)) for d, n in per_file.items()), \
            "a whole-file format gets each of its files' rows, in order"
    writers = {d: fmt.writer(Path(d), spec, n) for d, n in per_file.items()}
    sources: dict[str, tuple] = {}
    results = [_fill(cfg, spec, t, writers[t.dst].rows, sources, skip_bad) for t in tasks]
    for w in writers.values():
        w.finish()
    return results


def _fill(cfg: BuildConfig, spec: RecordSpec, t: Task, dst, sources: dict, skip_bad: bool) -> RowResult:
    """Row t.row of dst, computed or copied from an old file of any format (opened once per call)."""
    if t.src is None:
        return _compute(cfg, spec, t, dst, skip_bad)
    if t.src not in sources:
        sources[t.src] = (format_of(t.src).open(t.src, spec), load_sidecar(Path(t.src)))
    src, quads = sources[t.src]
    if spec.kind.name in SPARSE_KINDS:   # only the page's prefix: a whole-record copy would fill the holes
        copy_page(src[t.src_row], dst[t.row], cfg.map_scale)
    else:
        dst[t.row] = src[t.src_row]
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), *row_quads(quads, t.src_row),
                     **row_words(quads, t.src_row))


def _compute(cfg: BuildConfig, spec: RecordSpec, t: Task, dst, skip_bad: bool) -> RowResult:
    # cv2 and the sample maths load in workers only, not in a no-op build
    from east_cache.sample.make import make_sample
    from east_cache.store.page_record import Page
    rec, page = dst[t.row], spec.kind.name == PAGE.name
    legible = int(np.sum(t.record.reason == CARE))
    try:
        s = Page.make(t.record, cfg, t.variant) if page else make_sample(t.record, cfg, t.variant)
    except DataError as e:
        if not skip_bad:
            raise
        # An image that cannot be decoded becomes an all-don't-care sample (an empty page): it keeps its place
        # in the layout, adds nothing to the loss, and is listed in the manifest.
        for f in spec.kind.fields:
            if not page or f.name == "size":
                rec[f.name] = 0
        empty = np.zeros((0, 2), np.float32)
        return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), empty, np.zeros(1, np.int64),
                         np.zeros(0, np.uint8), t.record.name, f"{SKIPPED_NOTE}{e}", word=np.zeros(0, np.int32),
                         weight=np.zeros(0, np.float32) if page else None, legible=legible)
    if page:
        s.write_into(rec["image"], rec["maps"], rec["size"])
        weight = np.zeros(len(s.care), np.float32)
        weight[s.care > 0] = s.weight
        words = np.arange(len(s.care), dtype=np.int32)
    else:
        for f in spec.kind.fields:
            rec[f.name] = f.stored(getattr(s, f.name))
        weight, words = None, s.words
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), s.points, s.offsets, s.care,
                     t.record.name, s.warning, s.exif_applied, words, weight, legible)


def copy_page(src, dst, map_scale: float) -> None:
    """The used prefix of a page record's fields, and its size."""
    w, h = (int(v) for v in src["size"])
    from east_cache.store.page_record import image_values, map_values   # sample code (cv2) loads with pages
    n_image, n_maps = image_values((w, h)), map_values((w, h), map_scale)
    dst["image"][:n_image] = src["image"][:n_image]
    dst["maps"][:n_maps] = src["maps"][:n_maps]
    dst["size"] = src["size"]
