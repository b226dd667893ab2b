"""RecordReader: a cache's records and their words as stored, read in whichever process asks.

Nothing is trusted unchecked: opening a cache validates the manifest and every file's header and size
(store/integrity.py), so a damaged cache is refused with one error naming the file and the repair, not met
mid-epoch. Files are opened lazily in whichever process reads them (DataLoader or loader workers included): a
process forked from one that had them open opens its own, and no open map or reader is pickled. A file opened
before a rebuild replaces it keeps its old contents (its memory map holds the old inode); one first opened after
the manifest was replaced stops the run with a message saying so.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from east_cache.errors import CacheError
from east_cache.store.fingerprint import build_fingerprint
from east_cache.store.format import MANIFEST
from east_cache.store.integrity import check_files
from east_cache.store.manifest import Manifest, data_path, repair_hint, update_command
from east_cache.store.sidecar import load_sidecar, row_quads
from east_cache.store.stale import check_stale


class StaleCacheError(CacheError):
    """The source data changed since the cache was built."""


class RecordReader:
    """The records of the cache at cache_dir: record(i, variant) is image i's (images in name order) variant as
    stored, located by the store's layout; stored_quads its words. in_memory: every data file is read into RAM
    once (forked processes share it copy-on-write); check_stale: a cache whose source changed since its build, or
    that other sample code made, is refused (StaleCacheError)."""

    def __init__(self, cache_dir, in_memory: bool = False, check_stale: bool = True):
        self.cache_dir = Path(cache_dir)
        self._stamp = _manifest_stamp(self.cache_dir)
        self.manifest = Manifest.load(self.cache_dir)
        check_files(self.manifest, self.cache_dir)
        if check_stale:
            _raise_if_stale(self.cache_dir, self.manifest)
        self.config = self.manifest.config
        self.fingerprint = self.manifest.build_fingerprint
        self.names = sorted(self.manifest.images)
        self.files = [f.name for f in self.manifest.files]
        self.spec = self.manifest.spec
        self.dtype = self.spec.dtype
        self.layout = self.manifest.layout
        self._format = self.manifest.format
        self._records: list = [None] * len(self.files)   # per file, once opened in this process
        self._sidecars: dict[int, dict] = {}
        self._pid = os.getpid()   # the process that opened _records
        if in_memory:
            self._records = [self._format.open(self.path(f), self.spec, in_memory=True) for f in range(len(self.files))]

    def locate(self, i: int, variant: int) -> tuple[int, int]:
        """(file index, row) of image i's variant."""
        return self.layout.locate(i, variant)

    def record(self, i: int, variant: int):
        """Image i's variant as stored: a structured record, its fields by name (rec["image"]), rec.tobytes()
        its bytes."""
        f, r = self.locate(i, variant)
        return self.file_records(f)[r]

    def stored_quads(self, i: int, variant: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (P, 2) float32, offsets (N + 1,) int64, care (N,) uint8) of image i's variant as its sidecar row
        holds them: a crop's words in crop px, a page's in page px."""
        f, r = self.locate(i, variant)
        return row_quads(self.sidecar(f), r)

    def file_records(self, f: int):
        """File f's records ([row] a record, [a:b] an array of them): a memory map, a format's reader, or an
        array read whole (in_memory). Opened on first use in this process."""
        if self._pid != os.getpid():  # forked: open our own maps rather than share the parent's
            self._records, self._pid = self._closed(), os.getpid()
        records = self._records[f]
        if records is None:
            records = self._records[f] = self._opened(f, lambda: self._format.open(self.path(f), self.spec))
        return records

    def sidecar(self, f: int) -> dict:
        """File f's sidecar arrays (store/sidecar.py: its rows' words), loaded on first use in this process."""
        if f not in self._sidecars:
            self._sidecars[f] = self._opened(f, lambda: load_sidecar(self.path(f), self.manifest.files[f].rows))
        return self._sidecars[f]

    def path(self, f: int) -> Path:
        return data_path(self.cache_dir, self.files[f])

    def open_files(self) -> dict[int, str]:
        """The files this process holds open, by index: "ram" (read whole, in_memory) or "lazy" (a memory map or
        a reader). A pickled reader carries only its "ram" files."""
        return {f: "ram" if type(m) is np.ndarray else "lazy" for f, m in enumerate(self._records) if m is not None}

    def _opened(self, f: int, open_it):
        """open_it(), or a CacheError that says what happened to file f since the cache was opened and checked."""
        try:
            return open_it()
        except (OSError, ValueError, EOFError) as e:   # CacheError is a ValueError
            if _manifest_stamp(self.cache_dir) != self._stamp:
                raise CacheError(f"{self.cache_dir}: the cache was rebuilt while this run read it ({self.files[f]} "
                                 f"is no longer what its manifest said); start the run again") from None
            raise CacheError(f"{self.cache_dir}: data file {self.files[f]}: {e}. "
                             f"{repair_hint(self.cache_dir, self.manifest)}") from None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_records"], state["_sidecars"] = self._closed(), {}
        return state

    def _closed(self) -> list:
        """Loaded (in_memory) arrays stay; memory maps and readers are reopened by whoever uses them next."""
        return [m if type(m) is np.ndarray else None for m in self._records]


def _manifest_stamp(cache_dir: Path) -> tuple | None:
    """Which manifest file is in place: a rebuild renames a new one over it."""
    try:
        st = os.stat(cache_dir / MANIFEST)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _raise_if_stale(cache_dir: Path, manifest: Manifest) -> None:
    if manifest.build_fingerprint != build_fingerprint(manifest.config):
        raise StaleCacheError(f"{cache_dir}: its build fingerprint is not the one its config gives with this code: "
                              f"it was made by other sample-making code or another cache format, or its manifest "
                              f"was edited, so its samples are not what this code makes. Rebuild it with: "
                              f"{update_command(manifest, cache_dir)}, or pass --rebuild to train.py")
    st = check_stale(manifest)
    if st.stale:
        raise StaleCacheError(f"{cache_dir}: the cache is stale: {st.describe()}. Update it with: "
                              f"{update_command(manifest, cache_dir)} (only changed images are redone), "
                              f"or pass --rebuild to train.py")
