"""File formats of data files, by name: adding one is a module here and a line in FORMATS."""
from __future__ import annotations

from pathlib import Path

from east_cache.store.formats.base import FileFormat, RecordWriter
from east_cache.store.formats.npy import NpyFormat
from east_cache.store.formats.zarr import ZarrFormat

FORMATS: dict[str, FileFormat] = {f.name: f for f in (NpyFormat(), ZarrFormat())}
FILE_FORMATS = tuple(FORMATS)   # npy, one memory-mappable array (fastest to read); zarr, compressed maps


def get_format(name: str) -> FileFormat:
    if name not in FORMATS:
        raise ValueError(f"file format {name!r} is not one of {', '.join(FILE_FORMATS)}")
    return FORMATS[name]


def format_of(path) -> FileFormat:
    """The format of a data file, from its name's suffix."""
    return get_format(Path(path).suffix.lstrip("."))


__all__ = ["FILE_FORMATS", "FORMATS", "FileFormat", "RecordWriter", "format_of", "get_format"]
