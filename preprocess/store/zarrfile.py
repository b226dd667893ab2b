"""The zarr file format of the chunked strategy: one zarr v3 group per chunk file, one array per field.

A group holds the records of one `.npy` chunk file split by field: `image` (rows, 3, S, S) uint8,
`score` and `roi` (rows, 1, m, m) uint8, `geo` (rows, 5, m, m) float16. Each array has one sample per
inner chunk, so a sample decodes alone, and one shard, so a chunk file is four shard files plus
metadata, not four files per sample. zarr encodes a shard in one piece: one worker writes a whole
file from its records in memory. The group is a directory, written under a temp name and renamed
into place when complete, as a `.npy` file is (build.py).
"""
from __future__ import annotations

import operator
import os
import shutil
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from preprocess.store.format import FIELDS, stored_files
from preprocess.store.manifest import file_fingerprint, fsync_path

# Chosen by measurement (numcodecs on one core; 1024 px crops of benchmark pages, and a camera photo):
# zstd level 1 shrinks geo 67x, score 210x, roi 500x, decoding 0.04-0.4 ms a sample; level 3 and blosc
# (lz4 or zstd, shuffle or bitshuffle) gain at most 1.3x on score and roi, less on geo, and decode
# slower. Images shrink 2.2x on the synthetic white pages but only 1.1x on the photo, for 3 ms of
# decoding per 1024 px crop (a memcpy of the whole record: 0.6 ms) and 11 ms of encoding: stored raw.
MAP_CODEC = ZstdCodec(level=1)
RAW_FIELDS = ("image",)
DIMENSIONS = ("sample", "channel", "y", "x")


def write_group(path, records: np.ndarray) -> None:
    """Write records (a structured array of the record dtype) as a zarr group at path, replacing what is
    there (the leftover of a killed build), and make it durable."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for k in FIELDS:
        field = records.dtype[k]
        shape = (len(records), *field.shape)
        # write_empty_chunks: all-zero samples (a skipped image, a page without words) are stored too, so
        # every field always has its shard file, and one that is gone means damage (verify says so).
        array = group.create_array(k, shape=shape, dtype=field.base, chunks=(1, *field.shape), shards=shape,
                                   compressors=None if k in RAW_FIELDS else MAP_CODEC, fill_value=0,
                                   dimension_names=DIMENSIONS, config={"write_empty_chunks": True})
        array[:] = records[k]
    _fsync_tree(path)


class ZarrRecords:
    """A zarr file read like the memory map of a `.npy` one: [row] is a record, [a:b] an array of records.
    Rows decode on access. It holds no open file; the Dataset still reopens it in every process."""

    def __init__(self, path):
        group = zarr.open_group(path, mode="r")
        self.arrays = [group[k] for k in FIELDS]
        self.dtype = np.dtype([(k, a.dtype, a.shape[1:]) for k, a in zip(FIELDS, self.arrays)])

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
        for k, array in zip(FIELDS, self.arrays):
            out[k] = array[start:stop]
        return out


def shard_checksums(path) -> dict[str, str]:
    """Content hash of each file of a zarr group (every field's shard and metadata), by its path in the
    group, so that `verify` names the shard that went bad."""
    path = Path(path)
    return {p.relative_to(path).as_posix(): file_fingerprint(p, check_content=True) for p in stored_files(path)}


def raw_bytes(dtype: np.dtype) -> int:
    """Bytes a record takes at the least in a zarr file: its uncompressed fields."""
    return sum(dtype[k].itemsize for k in RAW_FIELDS)


def _fsync_tree(root: Path) -> None:
    """Every file, then every directory, deepest first. The writer syncs its own writes: on shared storage
    (a dask cluster's --out) the parent's fsync would not reach them."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)
