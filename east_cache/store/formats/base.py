"""The interface every file format implements: how one data file of records is written, read and checked.

A build preallocates a new file under its temp name, fills its rows through a RecordWriter (in place,
row by row, from many workers; or whole, by one worker, where `whole_file`), finishes it (durable on
disk), and renames it into place (`install`). A checksum covers the decoded records in row order, so
it is the same in every format; a format may add per-file checksums of its parts (`part_checksums`)
that verify compares without decoding. Readers get an array of records: [row] is a record, [a:b] an
array of records, each field by name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from east_cache.atomic import publish
from east_cache.store.fingerprint import record_crc, rows_checksum
from east_cache.store.format import RecordSpec


class RecordWriter(ABC):
    """The rows of one data file being written: fill `rows[r]` (or `rows[r][field]`), then finish()."""
    rows: object   # a structured array (or a memory map of one) of the file's records

    @abstractmethod
    def finish(self) -> None:
        """Make what was written durable (the writer syncs its own writes: on shared storage a parent's
        fsync does not reach a remote worker's)."""


class FileFormat(ABC):
    name: str = ""                           # the --format value and the data file suffix
    whole_file: bool = False                 # True: one call writes a whole file (it cannot be filled in place)
    strategies: tuple[str, ...] | None = None   # the strategies it can store; None: all
    mapped: bool = True   # what open returns holds the file open (a memory map): it reads on after the name is deleted

    def path_ok(self, path) -> bool:
        return Path(path).suffix == f".{self.name}"

    @abstractmethod
    def preallocate(self, path: Path, spec: RecordSpec, rows: int) -> None:
        """Reserve a new file's space under its temp name; a full disk raises OSError(ENOSPC) here."""

    @abstractmethod
    def writer(self, path: Path, spec: RecordSpec, rows: int) -> RecordWriter:
        """The writer of the (preallocated) temp file at path."""

    @abstractmethod
    def open(self, path, spec: RecordSpec, in_memory: bool = False):
        """A finished file's records, read-only; with in_memory, all read into RAM at once. A file whose records
        do not have spec's dtype raises CacheError naming it."""

    @abstractmethod
    def check(self, path, spec: RecordSpec, rows: int, nbytes: int | None = None) -> str | None:
        """What is wrong with a finished file, judged from its header or metadata and its size alone (no record is
        decoded, so a reader can afford it for every file when it opens a cache): records of another dtype (byte
        order included) or count, a truncated or unparsable file, a size other than nbytes (the manifest's, where
        it records one). None when it looks right."""

    @abstractmethod
    def stored_files(self, path) -> list[Path]:
        """The plain files a data file is made of (for sizes, page-cache control and checksums)."""

    def file_bytes(self, path) -> int | None:
        """The size in bytes of a finished file of one part, which the manifest records; None for several parts."""
        return None

    def disk_bytes(self, spec: RecordSpec, rows: int) -> int:
        """Bytes the file takes at the least, for the free-space check before a build."""
        return rows * spec.dtype.itemsize

    def check_writers(self, spec: RecordSpec, rows: int) -> None:
        """Refuse (BuildError) a build whose writers cannot hold what they must; rows: the largest file."""

    def checksum(self, path, spec: RecordSpec) -> str:
        """Recompute a file's checksum from its records (verify, resume)."""
        records = self.open(path, spec)
        return rows_checksum(record_crc(records[r:r + 1]) for r in range(len(records)))

    def part_checksums(self, path) -> dict[str, str] | None:
        """Checksums of the file's parts by relative path, or None where the file is one part."""
        return None

    def verify(self, path, spec: RecordSpec, checksum: str, parts: dict[str, str] | None) -> str | None:
        """What is wrong with a finished file, or None; checksum and parts as the manifest recorded them."""
        if parts is None:
            return None if self.checksum(path, spec) == checksum else "checksum mismatch (corrupt data)"
        found = self.part_checksums(path) or {}
        for name, recorded in sorted(parts.items()):
            if name not in found:
                return f"{name} missing"
            if found[name] != recorded:
                return f"{name}: checksum mismatch (corrupt data)"
        return None

    def install(self, tmp: Path, final: Path) -> None:
        """Rename a finished temp file into place, through the door (atomic.publish)."""
        publish(tmp, final)

    def remove(self, path: Path) -> None:
        Path(path).unlink()
