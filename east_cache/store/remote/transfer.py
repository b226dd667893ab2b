"""Moving whole objects between storage and local files, block by block, each block retried on its own.

A download writes into a temp file reserved at the object's full size: blocks of zeros are skipped (a page
file's holes stay holes on the local disk), and a block that comes back short is fetched again. An upload goes
to its final name in one piece where the store makes a put atomic (S3: an unfinished multipart upload leaves no
object), else to a temp name that is then moved into place. Nothing here decides which files; the callers do.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from east_cache.location import Location, filesystem
from east_cache.retry import Incomplete, RetryPolicy, retrying

BLOCK_BYTES = 32 << 20    # bytes per ranged read: one request each, held in memory while written
PIECE_BYTES = 64 << 10    # runs of zeros this long (and aligned) are left as holes in a downloaded file
ATOMIC_PUT = ("s3", "s3a", "gs", "gcs", "az", "abfs")   # stores where an object appears whole or not at all


def download(loc: Location, tmp: Path, size: int, policy: RetryPolicy, advice: str, hashed: bool = False,
             block: int = BLOCK_BYTES, on_bytes=None) -> str | None:
    """The object at loc (size bytes, as listed) into tmp, which exists at that size already; durable. Returns
    the "b2:" content hash where hashed (the form the manifest records for sidecars and zarr parts)."""
    fs = filesystem(loc)
    h = hashlib.blake2b(digest_size=16) if hashed else None
    with open(tmp, "r+b") as f:
        for start in range(0, size, block):
            end = min(size, start + block)
            data = retrying(lambda a=start, b=end: _range(fs, loc, a, b), str(loc), policy, advice)
            if h is not None:
                h.update(data)
            write_sparse(f, start, data)
            if on_bytes is not None:
                on_bytes(len(data))
        os.fsync(f.fileno())
    return "b2:" + h.hexdigest() if h is not None else None


def _range(fs, loc: Location, start: int, end: int) -> bytes:
    data = fs.cat_file(loc.url, start=start, end=end)
    if len(data) != end - start:
        raise Incomplete(f"bytes {start}-{end} came back as {len(data)} bytes")
    return data


def write_sparse(f, offset: int, data: bytes) -> None:
    """data at offset of f, except aligned PIECE_BYTES runs of zeros, which stay holes (f was sized already)."""
    a = np.frombuffer(data, np.uint8)
    whole = len(a) // PIECE_BYTES
    nonzero = a[:whole * PIECE_BYTES].reshape(whole, PIECE_BYTES).any(axis=1).tolist() + [True]
    run = None   # the first piece of the run of pieces to write
    for k, keep in enumerate(nonzero):
        if keep and run is None:
            run = k
        if (not keep or k == whole) and run is not None:
            begin, stop = run * PIECE_BYTES, len(a) if k == whole else k * PIECE_BYTES
            if stop > begin:
                os.pwrite(f.fileno(), memoryview(a[begin:stop]), offset + begin)
            run = None


def upload(path: Path, loc: Location, policy: RetryPolicy, advice: str) -> None:
    """A local file to loc whole: a reader sees the object complete or not at all (an interrupted upload leaves
    nothing under loc's name); checked against the local size once there."""
    fs, size = filesystem(loc), os.path.getsize(path)

    def put() -> None:
        if loc.protocol in ATOMIC_PUT:
            fs.put_file(str(path), loc.url)
        else:
            tmp = f"{loc.url}.part{os.getpid()}"
            fs.put_file(str(path), tmp)
            fs.mv(tmp, loc.url)
        found = fs.info(loc.url)["size"]
        if found != size:
            raise Incomplete(f"{found} bytes arrived of {size}")
    retrying(put, str(loc), policy, advice)


def put_bytes(data: bytes, loc: Location, policy: RetryPolicy, advice: str) -> None:
    """Small bytes (a manifest) to loc whole, replacing what is there in one step."""
    fs = filesystem(loc)

    def put() -> None:
        if loc.protocol in ATOMIC_PUT:
            fs.pipe_file(loc.url, data)
        else:
            tmp = f"{loc.url}.part{os.getpid()}"
            fs.pipe_file(tmp, data)
            fs.mv(tmp, loc.url)
    retrying(put, str(loc), policy, advice)


def get_bytes(loc: Location, policy: RetryPolicy, advice: str) -> bytes:
    return retrying(lambda: filesystem(loc).cat_file(loc.url), str(loc), policy, advice)
