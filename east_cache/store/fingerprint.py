"""Checksums of what is on disk: of records (CRC32 each, a data file's checksum from them), of files (size and
mtime, or the bytes), and the fingerprints the manifest records for an image's source (ImageSource).

A data file's checksum covers its decoded records, so it is the same whichever format stores them; the manifest keeps
it, and a reader or `verify` recomputes it. What decides whether a cache is out of date (the build's config, code and
source fingerprints) is east_cache/build/fingerprint.py's, built from these.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass

import numpy as np

from east_cache.ingest.files import open_regular, regular_stat
from east_cache.ingest.objects import is_url, object_fingerprint


def digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def file_fingerprint(path: str | os.PathLike, check_content: bool = False) -> str:
    """size + mtime (cheap), or the bytes themselves with check_content (a regular file only: a FIFO swapped in for
    an image would block the read forever; files.NotAllowed, a ValueError, says so instead). An object at a URL:
    size + ETag from its data set's listing (ingest/objects.py), or its bytes with check_content."""
    if is_url(path) and not check_content:
        return object_fingerprint(regular_stat(path))
    if check_content:
        h = hashlib.blake2b(digest_size=16)
        with open_regular(path) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return "b2:" + h.hexdigest()
    st = os.stat(path)
    return f"st:{st.st_size}:{st.st_mtime_ns}"


@dataclass(frozen=True)
class ImageSource:
    """What one image's samples were made from, as the manifest records it."""
    ann: str     # fingerprint of the image's annotation entry
    file: str    # file_fingerprint of the image file
    json: str    # the UFO file that holds the entry
    path: str    # the image file


def record_crc(record: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(record)).cast("B"))


def rows_checksum(row_crcs) -> str:
    """A data file's checksum: a hash of its records' CRC32s in row order (workers compute those). It covers
    the decoded records, so it is the same whichever format stores them."""
    return digest(*[f"{int(c):08x}" for c in row_crcs])
