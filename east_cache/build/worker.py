"""What a joblib worker does: fill rows of data files through their format's writer.

A worker writes its samples straight into their rows and returns only small things (row checksum,
the sample's words, a decode note, the values it wrote into each field of a page), never image arrays, so the
parent's memory does not grow with the dataset. npy rows are filled in place through a memory map, a few per
call (pages: a prefix of each field of their staging file's slot, which the build packs once the file's rows
are in); a format that writes a file in one piece (zarr) gets a whole file per call, assembled in the worker's
memory.
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
from east_cache.store.format import RecordSpec, record_spec
from east_cache.store.formats import format_of, get_format
from east_cache.store.formats.packed import parts_crc
from east_cache.build.plan import Task
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
    lengths: tuple[int, ...] | None = None   # packed kinds (pages): the values written into each field, in order


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


def write_rows(cfg: BuildConfig, tasks: list[Task], skip_bad: bool, file_format: str,
               shared: bool = True) -> list[RowResult]:
    """Fill the tasks' rows, then finish every file written to (a whole-file format gets all of a file's rows).
    shared: the build runs on other machines too (dask), whose parent reads the rows through shared storage; a
    worker on the build's own machine leaves a page file's staging rows in the page cache it shares with the parent,
    unsynced: the parent packs them and then syncs the packed file alone, and a build that resumes after a crash
    checks each journaled row's CRC32 (journal.py), so a row lost with the page cache is made again."""
    fmt, spec = get_format(file_format), record_spec(cfg)
    per_file = Counter(t.dst for t in tasks)
    if fmt.whole_file:
        assert all([t.row for t in tasks if t.dst == d] == list(range(n)) for d, n in per_file.items()), \
            "a whole-file format gets each of its files' rows, in order"
    writers = {d: fmt.writer(Path(d), spec, n) for d, n in per_file.items()}
    sources: dict[str, tuple] = {}
    results = [_fill(cfg, spec, t, writers[t.dst].rows, sources, skip_bad) for t in tasks]
    if shared or not spec.kind.packed:
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
    if spec.kind.packed:   # only the page's prefixes: a whole-slot copy would fill the holes
        used = copy_page(src[t.src_row], dst[t.row])
        return RowResult(t.file, t.row, page_crc(dst[t.row], spec, used), *row_quads(quads, t.src_row),
                         **row_words(quads, t.src_row), lengths=used)
    dst[t.row] = src[t.src_row]
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), *row_quads(quads, t.src_row),
                     **row_words(quads, t.src_row))


def _compute(cfg: BuildConfig, spec: RecordSpec, t: Task, dst, skip_bad: bool) -> RowResult:
    # cv2 and the sample maths load in workers only, not in a no-op build
    from east_cache.sample.make import make_sample
    from east_cache.store.page_jpeg import codec_of
    from east_cache.store.page_record import Page
    rec, page = dst[t.row], spec.kind.packed
    legible = int(np.sum(t.record.reason == CARE))
    try:
        s = Page.make(t.record, cfg, t.variant, codec_of(cfg)) if page else make_sample(t.record, cfg, t.variant)
    except DataError as e:
        if not skip_bad:
            raise
        # An image that cannot be decoded becomes an all-don't-care sample (an empty page): it keeps its place
        # in the layout, adds nothing to the loss, and is listed in the manifest.
        used = None
        for f in spec.kind.fields:
            if not page or f.name == "size":
                rec[f.name] = 0
        if page:   # an empty page: nothing but its size (0, 0)
            used = tuple(2 if name == "size" else 0 for name in spec.kind.names)
        empty = np.zeros((0, 2), np.float32)
        crc = page_crc(rec, spec, used) if page else record_crc(dst[t.row:t.row + 1])
        return RowResult(t.file, t.row, crc, empty, np.zeros(1, np.int64),
                         np.zeros(0, np.uint8), t.record.name, f"{SKIPPED_NOTE}{e}", word=np.zeros(0, np.int32),
                         weight=np.zeros(0, np.float32) if page else None, legible=legible, lengths=used)
    if page:
        written = s.write_into(rec, codec_of(cfg))
        used = tuple(written[name] for name in spec.kind.names)
        weight = np.zeros(len(s.care), np.float32)
        weight[s.care > 0] = s.weight
        return RowResult(t.file, t.row, page_crc(rec, spec, used), s.points, s.offsets, s.care, t.record.name,
                         s.warning, s.exif_applied, np.arange(len(s.care), dtype=np.int32), weight, legible, used)
    for f in spec.kind.fields:
        rec[f.name] = f.stored(getattr(s, f.name))
    return RowResult(t.file, t.row, record_crc(dst[t.row:t.row + 1]), s.points, s.offsets, s.care,
                     t.record.name, s.warning, s.exif_applied, s.words, None, legible)


def copy_page(src: dict, dst) -> tuple[int, ...]:
    """A page record read from a packed file (its fields as flat views) into a staging slot's field prefixes;
    the values of each field, in order."""
    for name, values in src.items():
        dst[name][:len(values)] = values
    return tuple(len(values) for values in src.values())


def page_crc(rec, spec: RecordSpec, used: tuple[int, ...]) -> int:
    """The CRC32 of a page record as its packed file will hold it: each field's written prefix (packed.parts_crc)."""
    return parts_crc(rec[name][:n] for name, n in zip(spec.kind.names, used))
