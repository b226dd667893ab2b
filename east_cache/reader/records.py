"""RecordReader: a cache's records and their words as stored, read in whichever process asks.

Nothing is trusted unchecked: opening a cache validates the manifest and every file's header and size
(store/integrity.py), so a damaged cache is refused with one error naming the file and the repair, not met
mid-epoch. Files are opened lazily in whichever process reads them (DataLoader or loader workers included): a
process forked from one that had them open opens its own, and no open map or reader is pickled. A file opened
before a rebuild replaces it keeps its old contents (its memory map holds the old inode); one first opened after
the manifest was replaced stops the run with a message saying so.

A cache at a URL is read through a local cache folder (store/remote/local_cache.py): its manifest is fetched when
it is opened, and each data file is downloaded (checked, renamed into place) before this process first opens it;
after that it is read as any cache is. Such a cache is checked against this code (its build fingerprint), not
against its source, which the machines that read it seldom hold.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from east_cache.errors import CacheError
from east_cache.location import Location
from east_cache.build.fingerprint import build_fingerprint
from east_cache.store.format import MANIFEST
from east_cache.store.integrity import check_files
from east_cache.store.manifest import Manifest, data_path, repair_hint, update_command
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
from east_cache.store.sidecar import load_sidecar, row_quads
from east_cache.build.stale import check_stale


class StaleCacheError(CacheError):
    """The source data changed since the cache was built."""


class RecordReader:
    """The records of the cache at cache_dir (a folder, or a URL such as s3://bucket/prefix): record(i, variant) is
    image i's (images in name order) variant as stored, located by the store's layout; stored_quads its words.
    in_memory: every data file is read into RAM once (forked processes share it copy-on-write); check_stale: a
    cache whose source changed since its build, or that other sample code made, is refused (StaleCacheError).
    local: how a cache at a URL is kept on this machine (its folder and size limit; defaults where None)."""

    def __init__(self, cache_dir, in_memory: bool = False, check_stale: bool = True,
                 local: LocalCacheSettings | None = None):
        where = Location.parse(cache_dir)
        self.remote = LocalCache(where, local or LocalCacheSettings()) if where.remote else None
        self.cache_dir = self.remote.local_dir if self.remote else Path(cache_dir)
        self.where = str(where) if self.remote else str(self.cache_dir)   # the cache as messages name it
        self._stamp = _manifest_stamp(self.cache_dir)
        self.manifest = self.remote.manifest if self.remote else Manifest.load(self.cache_dir)
        if self.remote is None:   # a downloaded file is checked before it is renamed into place instead
            check_files(self.manifest, self.cache_dir)
        if check_stale:
            _raise_if_stale(self.where, self.manifest, source=self.remote is None)
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
        self.reading: list[int] | None = None   # the files this process reads (a node's share); None: all
        self._limited = self.remote is not None and self.remote.settings.limit_bytes > 0
        if in_memory:
            self._records = [self._open(f, in_memory=True) for f in range(len(self.files))]

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
        array read whole (in_memory). Opened on first use in this process. From a local cache folder with a limit,
        a file evicted since is opened anew, and opening a file drops the maps of the others evicted meanwhile, so
        that the maps of this process hold little disk space beyond the limit."""
        if self._pid != os.getpid():  # forked: open our own maps rather than share the parent's
            self._records, self._pid = self._closed(), os.getpid()
        records = self._records[f]
        if records is None or self._limited and self._evicted(f):
            if self._limited:   # a new file comes in as others go: drop the maps of the ones that went
                for g in [g for g in range(len(self._records)) if g != f and self._evicted(g)]:
                    self._records[g] = None
            records = self._records[f] = self._opened(f, lambda: self._open(f))
        return records

    def _evicted(self, f: int) -> bool:
        """Whether file f is mapped here but gone from the local cache folder (its map holds disk space the
        limit no longer counts)."""
        records = self._records[f]
        return records is not None and type(records) is not np.ndarray and not os.path.lexists(self.path(f))

    def sidecar(self, f: int) -> dict:
        """File f's sidecar arrays (store/sidecar.py: its rows' words), loaded on first use in this process."""
        if f not in self._sidecars:
            self._sidecars[f] = self._opened(f, lambda: self._load_sidecar(f))
        return self._sidecars[f]

    def path(self, f: int) -> Path:
        return data_path(self.cache_dir, self.files[f])

    def data_bytes(self) -> int:
        """Bytes the data files take on this machine's disk: their blocks (page files are sparse); of a cache at a
        URL, their stored sizes (what they take once downloaded, at the most)."""
        if self.remote is not None:
            return sum(self.remote.units[name].bytes for name in self.files)
        return sum(os.stat(self.path(f)).st_blocks * 512 for f in range(len(self.files)))

    def files_read(self) -> list[int] | range:
        """The files this process reads: a node's share (reading), else all."""
        return range(len(self.files)) if self.reading is None else self.reading

    def _open(self, f: int, in_memory: bool = False):
        if self.remote is None:
            return self._format.open(self.path(f), self.spec, in_memory)
        name = self.files[f]
        with self.remote.pinned([name]) as (path,):
            records = self._format.open(path, self.spec, in_memory)
        return records if in_memory or self._format.mapped else PinnedRecords(records, self.remote, name)

    def _load_sidecar(self, f: int) -> dict:
        if self.remote is None:
            return load_sidecar(self.path(f), self.manifest.files[f].rows, self.manifest.files[f].checksum)
        with self.remote.sidecar(self.files[f]):
            return load_sidecar(self.path(f), self.manifest.files[f].rows, self.manifest.files[f].checksum)

    def open_files(self) -> dict[int, str]:
        """The files this process holds open, by index: "ram" (read whole, in_memory) or "lazy" (a memory map or
        a reader). A pickled reader carries only its "ram" files."""
        return {f: "ram" if type(m) is np.ndarray else "lazy" for f, m in enumerate(self._records) if m is not None}

    def _opened(self, f: int, open_it):
        """open_it(), or a CacheError that says what happened to file f since the cache was opened and checked."""
        try:
            return open_it()
        except CacheError:   # the local cache's, which says what happened
            raise
        except (OSError, ValueError, EOFError) as e:
            if self.remote.rebuilt() if self.remote else _manifest_stamp(self.cache_dir) != self._stamp:
                raise CacheError(f"{self.where}: the cache was rebuilt while this run read it ({self.files[f]} "
                                 f"is no longer what its manifest said); start the run again") from None
            raise CacheError(f"{self.where}: data file {self.files[f]}: {e}. "
                             f"{repair_hint(self.where, self.manifest)}") from None

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


class PinnedRecords:
    """The records of a file read by name at every access (a zarr group: a read opens its shard files) in a local
    cache folder: each access pins the file (fetched again where it was evicted since)."""

    def __init__(self, records, cache: LocalCache, name: str):
        self.records, self.cache, self.name = records, cache, name

    def __len__(self) -> int:
        return len(self.records)

    def __getattr__(self, attr):
        if attr == "records":   # not set yet (a copy being made)
            raise AttributeError(attr)
        return getattr(self.records, attr)

    def __getitem__(self, key):
        with self.cache.pinned([self.name]):
            return self.records[key]


def _raise_if_stale(cache_dir, manifest: Manifest, source: bool = True) -> None:
    """StaleCacheError for a cache made by other sample code; and, with source, one whose source changed since (a
    cache at a URL: not checked against its source, which --rebuild does not update either)."""
    rebuild = ", or pass --rebuild to train.py" if source else ""
    if manifest.build_fingerprint != build_fingerprint(manifest.config):
        raise StaleCacheError(f"{cache_dir}: its build fingerprint is not the one its config gives with this code: "
                              f"it was made by other sample-making code or another cache format, or its manifest "
                              f"was edited, so its samples are not what this code makes. Rebuild it with: "
                              f"{update_command(manifest, cache_dir)}{rebuild}")
    st = check_stale(manifest) if source else None
    if st is not None and st.stale:
        raise StaleCacheError(f"{cache_dir}: the cache is stale: {st.describe()}. Update it with: "
                              f"{update_command(manifest, cache_dir)} (only changed images are redone), "
                              f"or pass --rebuild to train.py")
