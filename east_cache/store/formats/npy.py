"""npy: a data file is one `.npy` array of records, memory-mapped to read (the fastest) and to write in place.

Workers fill preallocated rows through a writable memory map, so a file's rows can come from many
workers at once and nothing but small results travel back to the parent. Records of a packed kind (pages) are
filled into a sparse staging file of fixed slots the same way and then packed (formats/packed.py): the file read
is the packed one.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from east_cache.errors import REPAIR, CacheError
from east_cache.ingest.files import NotAllowed, open_regular
from east_cache.store.format import RecordSpec
from east_cache.store.formats.base import FileFormat, RecordWriter
from east_cache.store.formats.packed import PackedRecords, check_file, pack, parts_crc
from east_cache.store.fingerprint import rows_checksum


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
        if spec.kind.packed:   # a staging file: pages fill a prefix of each slot, the rest stays a hole
            return
        fd = os.open(path, os.O_RDWR)
        try:   # reserve the blocks now: a full disk fails here, not mid-write
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def writer(self, path: Path, spec: RecordSpec, rows: int) -> NpyWriter:
        return NpyWriter(path)

    def pack(self, stage: Path, dst: Path, spec: RecordSpec, lengths: list) -> None:
        """The packed file dst from a finished staging file (packed kinds): packed.pack."""
        pack(stage, dst, spec, lengths)

    def open(self, path, spec: RecordSpec, in_memory: bool = False):
        # mmap_mode "c": a private map, so its arrays are writable (a reader may wrap them as tensors without a
        # warning, a user's DataLoader default collate too) while a write changes this process's copy, never the cache
        records = np.load(path) if in_memory else np.load(path, mmap_mode="c")
        if spec.kind.packed and records.dtype == np.uint8 and records.ndim == 1:
            return PackedRecords(records, spec, path)
        if records.dtype != spec.dtype or records.ndim != 1:
            raise CacheError(f"{path}: its header says {records.dtype} x {records.shape}, not records of the "
                             f"cache's {spec.kind.name} kind: the file is damaged: {REPAIR}")
        return records

    def check(self, path, spec: RecordSpec, rows: int, nbytes: int | None = None) -> str | None:
        try:
            with open_regular(path) as f:
                if spec.kind.packed:
                    return check_file(f, spec, rows, nbytes)
                version = npformat.read_magic(f)
                read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
                shape, fortran, dtype = read(f)
                offset, size = f.tell(), os.fstat(f.fileno()).st_size
        except NotAllowed as e:
            return str(e)
        except OSError as e:
            return f"unreadable ({e.strerror})"
        except Exception as e:   # noqa: BLE001  numpy's header parser raises ValueError, SyntaxError, TokenError...
            return f"its npy header is damaged ({type(e).__name__})"
        if dtype != spec.dtype:
            return f"its header says {dtype_difference(dtype, spec.dtype)}"
        if shape != (rows,) or fortran:
            return f"its header says shape {shape}, the manifest {rows} records"
        if size != offset + rows * dtype.itemsize:
            return f"{size} bytes, where {rows} records take {offset + rows * dtype.itemsize} (truncated or extended)"
        if nbytes is not None and size != nbytes:
            return f"{size} bytes, where the manifest recorded {nbytes}"
        return None

    def checksum(self, path, spec: RecordSpec) -> str:
        if not spec.kind.packed:
            return super().checksum(path, spec)
        records = self.open(path, spec)
        return rows_checksum(parts_crc(records[r].values()) for r in range(len(records)))

    def file_bytes(self, path) -> int | None:
        return os.path.getsize(path)

    def stored_files(self, path) -> list[Path]:
        return [Path(path)]


def dtype_difference(found: np.dtype, want: np.dtype) -> str:
    """The first field whose type differs, in words: "geo is >f2 (5, 64, 64), the cache's records <f2 (5, 64, 64)"."""
    for name in want.names or ():
        if found.names is None or name not in found.names:
            return f"no field {name!r}, which the cache's records have"
        a, b = found.fields[name][0], want.fields[name][0]
        if a != b:
            return f"field {name} is {a.base.str} {a.shape}, the cache's records {b.base.str} {b.shape}"
    return f"dtype {found.str}, not the cache's records"
