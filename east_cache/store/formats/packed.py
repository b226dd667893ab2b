"""Packed data files: records whose fields each use a prefix of a fixed-size slot (pages), stored as just those
prefixes, back to back, with an index, so that a file takes on disk (and in a bucket) only its content.

A build's workers fill a sparse staging file of fixed slots in place (npy of the kind's record dtype: any worker
writes any row, a copied row is a prefix copy); once every row is in, `pack` writes the packed file from it in
one sequential pass, each field's bytes copied file to file by the kernel (os.copy_file_range: no page of either
file mapped or copied through this process) where the system has it. The packed file is a `.npy` array of uint8
(np.load maps it), laid out as:

    head     int64 (4,)            PACKED_MAGIC, rows R, fields F, the record kind's code (RecordKind.code)
    index    int64 (R, F, 2)       (start, bytes) of field k of record r, from the array's first byte
    records  each field's bytes at an ALIGN-byte boundary, zero padding between, records in row order

A record read back (PackedRecords[r]) is a dict of flat views, one per field, of the field's dtype: exactly
the prefix the worker wrote. A record's checksum (parts_crc) covers its fields' bytes without the padding, so the
staging row and the packed record give the same CRC.
"""
from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from east_cache.errors import REPAIR, CacheError
from east_cache.store.format import RECORD_KINDS, Fixed, RecordSpec

PACKED_MAGIC = int.from_bytes(b"EASTPK02", "little")   # bump the digits when the layout changes
HEAD_VALUES = 4
ALIGN = 64   # bytes: every field starts on a cache line, so its views are aligned for any dtype


def parts_crc(parts) -> int:
    """CRC32 of arrays' bytes one after another (a record's used fields)."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(p)).cast("B"), crc)
    return crc


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def layout(spec: RecordSpec, lengths: list) -> tuple[np.ndarray, int]:
    """(index (R, F, 2) int64, total bytes) of a packed file whose record r's field k holds lengths[r][k] values."""
    sizes = np.array([[n * spec.dtype[f].base.itemsize for f, n in zip(spec.kind.names, row)] for row in lengths],
                     np.int64).reshape(len(lengths), len(spec.kind.names))
    index = np.zeros((*sizes.shape, 2), np.int64)
    at = _aligned(8 * (HEAD_VALUES + index.size))
    for r, row in enumerate(sizes):
        for k, n in enumerate(row):
            index[r, k] = at, n
            at += _aligned(int(n))
    return index, at


def pack(stage: Path, dst: Path, spec: RecordSpec, lengths: list) -> None:
    """Write the packed file dst from the staging file of fixed slots at stage, whose row r's field k holds
    lengths[r][k] values; dst is written (the caller syncs and renames it)."""
    slots = np.load(stage, mmap_mode="r")
    index, total = layout(spec, lengths)
    head = np.array([PACKED_MAGIC, len(lengths), len(spec.kind.names), spec.kind.code], "<i8")
    # each field's (row, name, bytes from the packed array's start, bytes)
    fields = [(r, name, int(start), int(nbytes)) for r, row in enumerate(index)
              for name, (start, nbytes) in zip(spec.kind.names, row) if nbytes]
    with open(dst, "wb") as f:
        npformat.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": (total,)})
        at = f.tell()   # the array's first byte in the file
        f.write(head.tobytes() + index.astype("<i8").tobytes())
        f.truncate(at + total)   # the padding between fields reads 0
        f.flush()
        row, where = slots.dtype.itemsize, {name: slots.dtype.fields[name][1] for name in spec.kind.names}
        parts = [(slots.offset + r * row + where[name], at + start, n) for r, name, start, n in fields]
        if not _copy_in_kernel(stage, f.fileno(), parts):
            for (r, name, start, n), (_, d, _) in zip(fields, parts):   # through this process, from the map
                os.pwrite(f.fileno(), slots[name][r].reshape(-1).view(np.uint8)[:n], d)
    del slots


def _copy_in_kernel(src: Path, dst: int, parts: list[tuple[int, int, int]]) -> bool:
    """Copy each (source offset, destination offset, bytes) of file src into the open file dst with
    os.copy_file_range; False (nothing done that matters: the caller writes every part) where the system or the
    file system cannot."""
    if not hasattr(os, "copy_file_range"):
        return False
    fd = os.open(src, os.O_RDONLY)
    try:
        for s, d, n in parts:
            done = 0
            while done < n:
                moved = os.copy_file_range(fd, dst, n - done, s + done, d + done)
                if moved <= 0:
                    return False
                done += moved
    except OSError as e:
        if e.errno in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise
    finally:
        os.close(fd)
    return True


class PackedRecords:
    """A packed file's records over its bytes (a memory map, or an array read whole): [r] is record r as a dict of
    flat field views; lengths(name) every record's values of a field."""

    def __init__(self, data: np.ndarray, spec: RecordSpec, where):
        self.data, self.spec = data, spec
        why = index_problem(data, data.size, spec)
        if why:
            raise CacheError(f"{where}: {why}: the file is damaged: {REPAIR}")
        rows, fields = int(data[8:16].view("<i8")[0]), len(spec.kind.names)
        self.index = data[8 * HEAD_VALUES:8 * (HEAD_VALUES + 2 * rows * fields)].view("<i8").reshape(rows, fields, 2)
        self.dtypes = [spec.dtype[f].base for f in spec.kind.names]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, r: int) -> dict[str, np.ndarray]:
        if not -len(self) <= r < len(self):
            raise IndexError(f"record {r} of {len(self)}")
        return {name: self.data[start:start + n].view(dtype)
                for name, dtype, (start, n) in zip(self.spec.kind.names, self.dtypes, self.index[r].tolist())}

    def lengths(self, name: str) -> np.ndarray:
        """int64 (R,): values of field `name` in each record."""
        k = self.spec.kind.names.index(name)
        return self.index[:, k, 1] // self.dtypes[k].itemsize


def index_problem(head: np.ndarray, size: int, spec: RecordSpec, rows: int | None = None) -> str | None:
    """What is wrong with a packed file's head and index, None when they add up: head, the array's first bytes (at
    least its head and index); size, the array's bytes. Its magic, records (rows, where known) and fields, every
    field within the array, aligned, in order, of whole values; its record kind the manifest's (the image codec
    included: a manifest edited from jpeg to raw is caught here)."""
    fields = len(spec.kind.names)
    if head.size < 8 * HEAD_VALUES:
        return f"its packed array of {size} bytes is shorter than its head"
    magic, found, f, code = (int(v) for v in head[:8 * HEAD_VALUES].view("<i8"))
    if magic == PACKED_MAGIC and code != spec.kind.code:
        kind = next((k for k in RECORD_KINDS.values() if k.code == code), None)
        held = f"{kind.name} records (image codec {kind.page_codec})" if kind else f"records of unknown kind {code:#x}"
        return (f"its own head says it holds {held}, where the manifest says {spec.kind.name} (image codec "
                f"{spec.kind.page_codec}): the manifest does not describe this file")
    if magic != PACKED_MAGIC or f != fields or found < 0 or (rows is not None and found != rows):
        return (f"its packed head says {found} records of {f} fields (magic {magic:#x}), where the cache's "
                f"{spec.kind.name} records have {fields} fields")
    end = 8 * (HEAD_VALUES + 2 * found * fields)
    if end > head.size:
        return f"its packed index ends at byte {end}, past the array's {size}"
    index = head[8 * HEAD_VALUES:end].view("<i8").reshape(found, fields, 2)
    starts, sizes = index[..., 0].ravel(), index[..., 1].ravel()
    items = np.tile([spec.dtype[name].base.itemsize for name in spec.kind.names], found)
    if len(starts) and (starts.min() < end or (starts % ALIGN).any() or (sizes < 0).any()
                        or (starts + sizes).max() > size or (sizes % items).any()
                        or (np.diff(starts) < sizes[:-1]).any()):
        return "its packed index does not add up (fields overlap or lie past the array)"
    slots = np.tile([spec.dtype[name].itemsize for name in spec.kind.names], found)
    fixed = np.tile([isinstance(f.shape, Fixed) for f in spec.kind.fields], found)
    if len(sizes) and ((sizes > slots).any() or (sizes[fixed] != slots[fixed]).any()):
        return ("its packed index gives a field another length than a page can have (longer than the largest "
                "page's, or a size field not of two values)")
    return None


def check_file(f, spec: RecordSpec, rows: int, nbytes: int | None) -> str | None:
    """A packed file's header, size and index against what the manifest says (nbytes: the file's size, where
    recorded); f: the file, open for reading at its start. Reads the npy header, the head and the index, nothing
    of the records."""
    version = npformat.read_magic(f)
    read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
    shape, fortran, dtype = read(f)
    offset, size = f.tell(), os.fstat(f.fileno()).st_size
    if dtype != np.uint8 or len(shape) != 1 or fortran:
        return f"its header says {dtype} x {shape}, not the packed bytes of the cache's {spec.kind.name} records"
    if nbytes is not None and size != nbytes:
        return f"{size} bytes, where the manifest recorded {nbytes} (truncated or extended)"
    if size != offset + shape[0]:
        return f"{size} bytes, where its header says {offset + shape[0]} (truncated or extended)"
    head = np.frombuffer(f.read(min(shape[0], 8 * (HEAD_VALUES + 2 * rows * len(spec.kind.names)))), np.uint8)
    return index_problem(head, shape[0], spec, rows)


def extent_problem(fields: dict[str, np.ndarray], spec: RecordSpec, map_scale: float) -> str | None:
    """What is wrong with a page record's extent, None when it adds up: its size field is a width and a height,
    and every field is as long as a page of that size takes (the raw tiles, the maps' tiles, the packed JPEG tiles,
    whose head must say the same size); an empty page (0 x 0, an image --skip-bad blanked) holds nothing else. A
    file damaged inside its records (zeroed, its index intact) would otherwise read as a blank or short page."""
    from east_cache.store.jpeg_tiles import packed_extent  # page code loads where pages are read
    from east_cache.store.page_record import image_values, map_values
    from east_cache.store.page_rows import RAW_LEVELS_ROWS, RAW_ROWS, half_size
    size = fields["size"]
    if size.size != 2 or (size < 0).any() or (size.min() == 0 and size.max() > 0):
        return f"its size field holds {size.tolist()}, not a page's width and height"
    w, h = (int(v) for v in size)
    if spec.kind.page_codec == "jpeg":
        image = fields["image"]
        extent = packed_extent(image) if w else (0, 0, 0)
        if extent is None or image.size and extent[:2] != (w, h):
            return (f"its size field says {w} x {h} px, its compressed image "
                    + ("has no head" if extent is None else f"{extent[0]} x {extent[1]} px"))
        n, (hw, hh) = extent[2], half_size((w, h))
        if spec.kind.half_level and hw * hh:   # its half level's packed tiles follow
            half = packed_extent(image[n:])
            if half is None or half[:2] != (hw, hh):
                return (f"its size field says {w} x {h} px, its compressed half level "
                        + ("has no head" if half is None else f"{half[0]} x {half[1]} px, not {hw} x {hh}"))
            n += half[2]
        want = {"image": n}
    else:
        # a page warped at read time: raw rows (its half level's after them, with --levels), not tiles
        what = spec.kind.field("image").shape.what
        values = {"rows": RAW_ROWS.values, "rows-levels": RAW_LEVELS_ROWS.values}.get(what, image_values)
        want = {"image": values((w, h)), "maps": map_values((w, h), map_scale)}
    for name, n in want.items():
        if name in fields and fields[name].size != n:
            return f"its {name} field holds {fields[name].size} values, where a {w} x {h} px page takes {n}"
    return None


def check_extent(fields: dict[str, np.ndarray], spec: RecordSpec, map_scale: float, where: str) -> None:
    """CacheError naming `where` (the file and the image) and the repair when the page's extent does not add up."""
    why = extent_problem(fields, spec, map_scale)
    if why:
        raise CacheError(f"{where}: {why}: the file is damaged: {REPAIR}")
