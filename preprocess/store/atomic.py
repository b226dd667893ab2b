"""Durable writes: a file's bytes on disk before its name says it is there.

A reader sees the old file or the new one, never half of one: write under a temp name, fsync,
rename, fsync the directory.
"""
from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path) -> None:
    """A file's data, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root) -> None:
    """Every file, then every directory, deepest first (a zarr group, written by a worker that syncs its own
    writes: on shared storage, a dask cluster's --out, the parent's fsync would not reach them)."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def write_atomic(path: Path, text: str) -> None:
    """temp file + fsync + rename + fsync of the directory: readers see the old or the new file, never half."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:   # a full disk, an interrupt: the old file stands, and no temp file is left behind
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
