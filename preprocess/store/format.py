"""The on-disk format, declared once and imported by the writer (build) and the reader (dataset).

A sample is a fixed-size record, so a cache file is one `.npy` array of RECORDS of a structured
dtype, readable with `np.load(mmap_mode="r")`, or (chunked strategy only) a zarr v3 group of one
array per field with compressed maps (zarrfile.py). A strategy only decides how many records a file
holds and in what order; `locate` is the single place that maps (image, variant) to (file, row).
Each data file has a sidecar `.quads.npz` with the sample's words in crop coordinates.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

# Bump when the record layout, the file naming or the manifest schema changes.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATA_DIR = "data"            # data files live in CACHE/data/, the manifest in CACHE/
QUADS_SUFFIX = ".quads.npz"  # sidecar of a data file: points (P,2) f32, offsets (N+1,) i64 per word, care (N,) u8, sample_offsets (R+1,) i64 per record

FIELDS = ("image", "score", "geo", "roi")
# How a data file stores its records, and the suffix of its name: npy, one memory-mappable array
# (fastest to read); zarr, a group of per-field arrays whose maps are compressed (zarrfile.py).
FILE_FORMATS = ("npy", "zarr")


def record_dtype(input_size: int, map_size: int) -> np.dtype:
    """image uint8 (3,S,S); score uint8 (1,m,m); geo float16 (5,m,m): 4 distances in input px + angle in rad; roi uint8 (1,m,m)."""
    s, m = input_size, map_size
    return np.dtype([
        ("image", np.uint8, (3, s, s)),
        ("score", np.uint8, (1, m, m)),
        ("geo", np.float16, (5, m, m)),
        ("roi", np.uint8, (1, m, m)),
    ])


def records_per_file(strategy: str, n_images: int, variants: int, batch_size: int, chunk_size: int) -> int:
    return {
        "whole": max(1, n_images * variants),
        "image": variants,
        "batch": batch_size,
        "chunked": chunk_size,
    }[strategy]


def file_count(strategy: str, n_images: int, variants: int, batch_size: int, chunk_size: int) -> int:
    if n_images == 0:
        return 0
    if strategy == "whole":
        return 1
    if strategy == "image":
        return n_images
    if strategy == "batch":
        return variants * math.ceil(n_images / batch_size)
    return math.ceil(n_images * variants / chunk_size)


def locate(strategy: str, image: int, variant: int, n_images: int, batch_size: int, chunk_size: int) -> tuple[int, int]:
    """(file index, row) of sample (image, variant).

    Rows are variant-major (all images at variant 0, then variant 1, ...) except for the image
    strategy, whose file i holds image i's variants. A batch file holds consecutive images at one
    variant, so a whole training batch is one contiguous read.
    """
    if strategy == "image":
        return image, variant
    if strategy == "batch":
        per_variant = math.ceil(n_images / batch_size)
        return variant * per_variant + image // batch_size, image % batch_size
    g = variant * n_images + image
    if strategy == "whole":
        return 0, g
    return g // chunk_size, g % chunk_size


def file_members(strategy: str, n_images: int, variants: int, batch_size: int, chunk_size: int) -> list[list[tuple[int, int]]]:
    """For every file, the (image, variant) of each of its rows, in row order."""
    files: list[list[tuple[int, int]]] = [[] for _ in range(file_count(strategy, n_images, variants, batch_size, chunk_size))]
    for v in range(variants):
        for i in range(n_images):
            f, r = locate(strategy, i, v, n_images, batch_size, chunk_size)
            assert r == len(files[f]), "layout rows must be dense and ordered"
            files[f].append((i, v))
    return files


def variant_offsets(strategy: str, names: list[str], variants: int, batch_size: int, seed: int) -> np.ndarray:
    """Per-image offset o_i: epoch e reads variant (e + o_i) mod K. Drawn from the seed and the image
    name, so it is stable when other images are added or removed. A batch file rotates as a whole,
    so that a training batch stays one contiguous read."""
    keys = [f"batch{i // batch_size}" for i in range(len(names))] if strategy == "batch" else names
    return np.array([int.from_bytes(hashlib.blake2b(f"{seed}/{k}".encode(), digest_size=8).digest(), "little") % variants
                     for k in keys], dtype=np.int64)


def open_records(path, in_memory: bool = False):
    """A data file as an array of records: a read-only memory map (npy) or rows decoded on access (zarr);
    with in_memory, every record read into RAM at once."""
    if Path(path).suffix == ".zarr":
        from preprocess.store.zarrfile import ZarrRecords  # zarrfile imports this module
        records = ZarrRecords(path)
        return records[:] if in_memory else records
    return np.load(path) if in_memory else np.load(path, mmap_mode="r")


def stored_files(path: Path) -> list[Path]:
    """The plain files a data file is made of: itself (npy), or a zarr group's metadata and shards."""
    path = Path(path)
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def row_quads(sidecar, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points (P,2), offsets (N+1,) from 0, care (N,)) of one record, from its file's loaded sidecar."""
    w0, w1 = sidecar["sample_offsets"][row], sidecar["sample_offsets"][row + 1]
    offsets = sidecar["offsets"][w0:w1 + 1]
    return sidecar["points"][offsets[0]:offsets[-1]], offsets - offsets[0], sidecar["care"][w0:w1]
