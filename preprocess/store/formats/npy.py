"""npy: a data file is one `.npy` array of records, memory-mapped to read (the fastest) and to write in place.

Workers fill preallocated rows through a writable memory map, so a file's rows can come from many
workers at once and nothing but small results travel back to the parent.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from preprocess.errors import CacheError
from preprocess.store.format import SPARSE_KINDS, RecordSpec
from preprocess.store.formats.base import FileFormat, RecordWriter


class NpyWriter(RecordWriter):
    def __init__(self, path: Path):
        self.rows = np.load(path, mmap_mode="r+")

    def finish(self) -> None:
        self.rows.flush()


class NpyFormat(FileFormat):
    name = "npy"

    def preallocate(self, path: Path, spec: RecordSpec, rows: int) -> None:
        arr = np.lib.format.open_memmap(path, mode="w+", dtype=spec.dtype, shape=(rows,))
        del arr
        if spec.kind.name in SPARSE_KINDS:   # pages fill a prefix of each record: the rest stays a hole
            return
        fd = os.open(path, os.O_RDWR)
        try:   # reserve the blocks now: a full disk fails here, not mid-write
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def writer(self, path: Path, spec: RecordSpec, rows: int) -> NpyWriter:
        return NpyWriter(path)

    def open(self, path, spec: RecordSpec, in_memory: bool = False):
        records = np.load(path) if in_memory else np.load(path, mmap_mode="r")
        if records.dtype != spec.dtype or records.ndim != 1:
            raise CacheError(f"{path}: its header says {records.dtype} x {records.shape}, not records of the "
                             f"cache's {spec.kind.name} kind: the file is damaged. Run `python -m preprocess verify "
                             f"CACHE`, then the build command it prints")
        return records

    def stored_files(self, path) -> list[Path]:
        return [Path(path)]
