"""zarr: a data file is one zarr v3 group, one array per field, maps compressed (chunked strategy only).

Each array has one sample per inner chunk, so a sample decodes alone, and one shard, so a file is one
shard file per field plus metadata, not files per sample. zarr encodes a shard in one piece: one worker
writes a whole file from its records in memory. The group is a directory, written under a temp name
and renamed into place when complete, as a `.npy` file is.
"""
from __future__ import annotations

import operator
import shutil
from pathlib import Path

import numpy as np

from east_cache.atomic import fsync_tree
from east_cache.budget import available_ram
from east_cache.errors import REPAIR, BuildError, CacheError
from east_cache.store.fingerprint import file_fingerprint
from east_cache.store.format import RecordSpec
from east_cache.store.formats.base import FileFormat, RecordWriter

# The field table names codecs "zstd:LEVEL". Level 1 for the maps, which are mostly zeros: they shrink many
# times over and decode in a small share of a sample's read; higher levels and blosc's codecs shrink them
# little further and decode slower. Images are stored raw: photos hardly shrink, and decoding a crop's image
# costs several times a memcpy of its whole record (benchmarks/bench_zarr.py measures sizes and speeds).
DIMENSIONS = ("sample", "channel", "y", "x")


def _zarr():
    """The zarr package, imported where a zarr file is written or read: every command and build process registers
    this format, and zarr's import alone takes a noticeable share of a process's start."""
    import zarr
    return zarr


def _codec(name: str | None):
    if name is None:
        return None
    kind, _, level = name.partition(":")
    assert kind == "zstd", f"unknown codec {name}"
    from zarr.codecs import ZstdCodec
    return ZstdCodec(level=int(level))


def write_group(path: Path, records: np.ndarray, spec: RecordSpec) -> None:
    """Write records as a zarr group at path, replacing what is there (a killed build's leftover), durably."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    group = _zarr().open_group(path, mode="w", zarr_format=3)
    for k in spec.dtype.names:
        field = spec.dtype[k]
        shape = (len(records), *field.shape)
        # write_empty_chunks: all-zero samples (a skipped image, a page without words) are stored too, so
        # every field always has its shard file, and one that is gone means damage (verify says so).
        array = group.create_array(k, shape=shape, dtype=field.base, chunks=(1, *field.shape), shards=shape,
                                   compressors=_codec(spec.codec(k)), fill_value=0,
                                   dimension_names=DIMENSIONS[:len(shape)], config={"write_empty_chunks": True})
        array[:] = records[k]
    fsync_tree(path)


class ZarrWriter(RecordWriter):
    """A whole file's records in memory, written as a group by finish()."""

    def __init__(self, path: Path, spec: RecordSpec, rows: int):
        self.path, self.spec = path, spec
        self.rows = np.zeros(rows, spec.dtype)

    def finish(self) -> None:
        write_group(self.path, self.rows, self.spec)


class ZarrRecords:
    """A zarr file read like the memory map of a `.npy` one: [row] is a record, [a:b] an array of records.
    Rows decode on access. It holds no open file; the Dataset still reopens it in every process."""

    def __init__(self, path, spec: RecordSpec):
        group = _zarr().open_group(path, mode="r")
        self.dtype = spec.dtype
        try:
            self.arrays = [group[k] for k in spec.dtype.names]
        except KeyError as e:
            raise CacheError(f"{path}: field {e} is missing: the file is damaged: {REPAIR}") from None
        found = np.dtype([(k, a.dtype, a.shape[1:]) for k, a in zip(spec.dtype.names, self.arrays)])
        if found != spec.dtype or len({a.shape[0] for a in self.arrays}) > 1:
            raise CacheError(f"{path}: holds {found}, not the cache's {spec.kind.name} records: the file is damaged: "
                             f"{REPAIR}")

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def __getitem__(self, key):
        if not isinstance(key, slice):
            row = operator.index(key)
            if not -len(self) <= row < len(self):
                raise IndexError(f"row {row} of a file of {len(self)} records")
            row %= len(self)
            return self[row:row + 1][0]
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise IndexError("zarr records are read in contiguous slices")
        out = np.empty(max(0, stop - start), self.dtype)
        for k, array in zip(self.dtype.names, self.arrays):
            out[k] = array[start:stop]
        return out


class ZarrFormat(FileFormat):
    name = "zarr"
    whole_file = True
    strategies = ("chunked",)   # one shard per field: chunk files are what it is made for
    mapped = False              # a read opens its shard files by name

    def preallocate(self, path: Path, spec: RecordSpec, rows: int) -> None:
        """Nothing to reserve: the compressed size is known only once the file is written."""

    def writer(self, path: Path, spec: RecordSpec, rows: int) -> ZarrWriter:
        return ZarrWriter(path, spec, rows)

    def open(self, path, spec: RecordSpec, in_memory: bool = False):
        records = ZarrRecords(path, spec)
        return records[:] if in_memory else records

    def check(self, path, spec: RecordSpec, rows: int, nbytes: int | None = None) -> str | None:
        path = Path(path)
        if not path.is_dir():
            return "not a zarr group (a directory)"
        odd = next((p for p in path.rglob("*") if p.is_symlink() or not (p.is_dir() or p.is_file())), None)
        if odd is not None:   # a FIFO would block zarr's read of it forever; a link may lead out of the cache
            return f"{odd.relative_to(path)} is a link or not a regular file"
        try:
            group = _zarr().open_group(path, mode="r")
            arrays = {k: group[k] for k in spec.dtype.names}
        except KeyError as e:
            return f"field {e} is missing"
        except Exception as e:   # noqa: BLE001  damaged metadata: zarr and json raise many kinds
            return f"its zarr metadata is damaged ({type(e).__name__})"
        for k, array in arrays.items():
            want = spec.dtype[k]
            if np.dtype(array.dtype) != want.base or tuple(array.shape) != (rows, *want.shape):
                return (f"field {k} is {np.dtype(array.dtype).str} {tuple(array.shape)}, the cache's records "
                        f"{want.base.str} {(rows, *want.shape)}")
            if not any(p.is_file() and p.name != "zarr.json" and p.stat().st_size for p in (path / k).rglob("*")):
                return f"field {k}'s shard is missing"
        return None

    def stored_files(self, path) -> list[Path]:
        return sorted(p for p in Path(path).rglob("*") if p.is_file())

    def disk_bytes(self, spec: RecordSpec, rows: int) -> int:
        return rows * spec.raw_bytes()

    def check_writers(self, spec: RecordSpec, rows: int) -> None:
        need, ram = rows * spec.dtype.itemsize, available_ram()
        if need > ram:
            raise BuildError(f"--format zarr: a worker holds a whole chunk file in memory, {rows} samples x "
                             f"{spec.dtype.itemsize / 2**20:.1f} MiB = {need / 2**30:.1f} GiB, more than the "
                             f"{ram / 2**30:.1f} GiB of available RAM. Use a smaller --chunk-size (each of the "
                             f"--jobs workers holds one file); the existing cache is unchanged.")

    def part_checksums(self, path) -> dict[str, str]:
        """Content hash of each file of the group (every field's shard and metadata), by its path in the group,
        so that verify names the shard that went bad."""
        path = Path(path)
        return {p.relative_to(path).as_posix(): file_fingerprint(p, check_content=True)
                for p in self.stored_files(path)}

    def install(self, tmp: Path, final: Path) -> None:
        if final.is_dir():  # a file verify found corrupt: rename cannot replace a directory that has files
            shutil.rmtree(final)
        super().install(tmp, final)

    def remove(self, path: Path) -> None:
        shutil.rmtree(path)
