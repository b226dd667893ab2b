"""Durable writes: a file's bytes on disk before its name says it is there.

A reader sees the old file or the new one, never half of one: write under a temp name, fsync,
rename, fsync the directory.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def replacing(path, tmp_suffix: str | None = None) -> Iterator[Path]:
    """Yields a temp path beside path to write; then fsync it, rename it over path, fsync the directory. On any
    error (a full disk, an interrupt) the temp file is removed and the old file stands. tmp_suffix: default
    .tmpPID, so that two processes never write the same temp file."""
    path = Path(path)
    tmp = path.with_name(path.name + (tmp_suffix or f".tmp{os.getpid()}"))
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_atomic(path: Path, content: str | bytes) -> None:
    """content (text, or bytes) as path's new content, durably and atomically (replacing): a link at path is
    replaced, never written through."""
    with replacing(path) as tmp:
        tmp.write_bytes(content) if isinstance(content, bytes) else tmp.write_text(content)


@contextmanager
def made_folders(*paths: Path) -> Iterator[list[Path]]:
    """Each path made with its missing parents; yields what was made. On an error or Ctrl-C inside, that is removed
    again where it is empty, deepest first (rmdir leaves a folder that holds anything): a command that failed
    leaves no empty folders behind."""
    made: list[Path] = []
    for path in map(Path, paths):
        made += [p for p in (path, *path.parents) if not p.exists() and p not in made]
        path.mkdir(parents=True, exist_ok=True)
    try:
        yield made
    except BaseException:
        for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass
        raise
