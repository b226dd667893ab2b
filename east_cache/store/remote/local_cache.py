"""A cache at a URL, read through a local cache folder that holds the same layout: FOLDER/manifest.json and
FOLDER/data/, which the reader opens as it opens any cache once the files it reads are there.

The manifest is fetched anew whenever the cache is opened, so a cache rebuilt at the same URL is noticed. Each
data file and its sidecar are downloaded whole on first use, under temp names reserved at their full size,
checked (the data file's header and size against the manifest's records; the sidecar's and a zarr group's
parts' content hashes against the manifest's), and renamed into place: a file under its final name is always
complete. Data file names carry a digest of their samples, so a local copy under a name the manifest gives is
that file; files the manifest does not name are evicted first. One process per machine downloads a file; the
others wait for it (locks.py). With a limit, least recently used files are evicted to make room, never a pinned
one; a reader that already mapped an evicted npy file keeps reading it (its map holds the inode).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from east_cache.errors import CacheError, RemoteError, UsageError, cache_command
from east_cache.location import Location, listing
from east_cache.retry import RetryPolicy
from east_cache.atomic import fsync_path, made_folders, publish, write_atomic
from east_cache.store.format import DATA_DIR, MANIFEST
from east_cache.store.manifest import FileEntry, Manifest, data_path, update_command
from east_cache.store.remote.locks import LOCKS_DIR, FolderLocks
from east_cache.store.remote.space import (
    TEMP_SUFFIX,
    check_limit,
    eviction_order,
    folder_bytes,
    parse_size,
    size_flag,
    size_text,
    stem,
    stems_present,
)
from east_cache.store.remote.transfer import BLOCK_BYTES, download, get_bytes
from east_cache.store.sidecar import quads_path

ROOM_POLL_S = 0.05   # first wait before looking again for room that pinned files hold; doubles up to 1 s
_OPEN = weakref.WeakSet()   # this process's LocalCaches, whose locks a forked child makes anew


class StoredDamage(RemoteError):
    """A stored file whose bytes fail the check against the manifest (`why`): damaged at the URL, not in transit."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def _renew_locks() -> None:   # a download thread of the parent may have held one at the fork
    for cache in list(_OPEN):
        cache._counting = threading.Lock()


os.register_at_fork(after_in_child=_renew_locks)


@dataclass(frozen=True)
class LocalCacheSettings:
    folder: Path | None = None      # the local cache folder; None: default_folder(url, root)
    root: Path | None = None        # where folder is None: the folder is ROOT/<hash of the URL>
    limit_bytes: int = 0            # most bytes its files may take (st_size); 0: no limit
    ahead: int = 4                  # files downloaded ahead of the reader (ahead.py)
    jobs: int = 4                   # downloads at once (ahead.py)
    room_wait_s: float = 600.0      # how long a download waits for pinned files to leave room, seconds
    block_bytes: int = BLOCK_BYTES  # bytes per ranged read
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def at_once(self) -> int:
        """Files a machine's readers may need at the same time: the ones fetched ahead, one being read, one more."""
        return self.ahead + 2


def add_local_cache_args(p, limit: bool = True) -> None:
    """The flags of the local cache folder that a cache at a URL is read through (argparse)."""
    p.add_argument("--local-cache", type=Path, metavar="DIR",
                   help="with a cache at a URL: where its files are downloaded, DIR/HASH of the URL, shared by the "
                        "processes of this machine (default: ~/.cache/east-cache)")
    if limit:
        p.add_argument("--local-cache-limit", metavar="SIZE", default="0", type=size_text,
                       help="with a cache at a URL: most bytes its local folder may hold, e.g. 20G; least recently "
                            "used files are deleted to make room (default: 0, no limit)")


def local_settings(root=None, limit: str | int = 0, **kw) -> LocalCacheSettings:
    """Settings from the flags --local-cache DIR (the root of the folders) and --local-cache-limit SIZE (the API's
    local_cache_limit, which its errors name)."""
    try:
        limit_bytes = parse_size(limit)
    except UsageError as e:
        raise UsageError(f"local_cache_limit={e}") from None
    return LocalCacheSettings(root=Path(root) if root else None, limit_bytes=limit_bytes, **kw)


def default_folder(loc: Location, root: Path | None = None) -> Path:
    """ROOT/<hash of the URL>; ROOT by default ~/.cache/east-cache ($XDG_CACHE_HOME where set)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "east-cache"
    return Path(root or base) / loc.key()


@dataclass
class Unit:
    """One data file with its sidecar, as stored at the URL: object paths relative to the cache, with sizes."""
    entry: FileEntry
    objects: dict[str, int]   # "data/X.npy", "data/X.quads.npz" or every "data/X.zarr/..." part -> bytes

    @property
    def bytes(self) -> int:
        return sum(self.objects.values())


class LocalCache:
    def __init__(self, location: Location, settings: LocalCacheSettings = LocalCacheSettings()):
        """Fetch the manifest into the folder (replacing an older one) and list the stored files' sizes; refuse a
        limit that cannot hold what readers need at once."""
        self.location, self.settings = location, settings
        self.folder = Path(settings.folder) if settings.folder else default_folder(location, settings.root)
        self.paths: dict[str, Path] = {}   # data file name -> its local path (asked for every file every epoch)
        self.downloaded_bytes = self.downloaded_files = 0   # by this process
        self._counting = threading.Lock()
        with made_folders(self.folder / DATA_DIR, self.folder / LOCKS_DIR):   # removed where it cannot be opened
            self.locks = FolderLocks(self.folder)
            _OPEN.add(self)
            for last_try in (False, True):   # a rebuild may replace the manifest between the fetch and the listing
                self.manifest_bytes = self._fetch_manifest()
                stored = listing(location.join(DATA_DIR))
                self.manifest = self._load_manifest()
                missing = [e.name for e in self.manifest.files if self._objects(e, stored) is None]
                if not missing:
                    break
                if last_try:
                    raise RemoteError(f"{location}: its manifest names {missing[0]}, which is not stored there "
                                      f"({len(missing)} missing): the cache is damaged or being rebuilt. "
                                      f"{self._advice('rebuild')}")
            self.units = {e.name: Unit(e, self._objects(e, stored)) for e in self.manifest.files}
            check_limit(settings.limit_bytes, [u.bytes for u in self.units.values()], settings.at_once, str(location))

    def __getstate__(self):   # a Dataset holding this goes to loader workers: locks are made again there
        state = self.__dict__.copy()
        del state["_counting"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._counting = threading.Lock()
        _OPEN.add(self)

    @property
    def local_dir(self) -> Path:
        """The folder to open as the cache (CacheDataset, Manifest.load): its data files arrive on ensure()."""
        return self.folder

    def path(self, name: str) -> Path:
        path = self.paths.get(name)
        if path is None:
            path = self.paths[name] = data_path(self.folder, name)
        return path

    def present(self, name: str) -> bool:
        """Renamed into place, so complete; the sidecar goes in first and out last, so the data file stands for both."""
        return os.path.lexists(self.path(name))

    def ensure(self, name: str) -> Path:
        """Data file `name` (and its sidecar) in the local folder, downloaded if missing (one process of the
        machine downloads, the others wait); its path. It may be evicted once no one pins it."""
        self.locks.pin(stem(name))
        try:
            return self._pinned_here(name)
        finally:
            self.locks.unpin(stem(name))

    def pin(self, name: str) -> Path:
        """ensure(name), and keep it from eviction until unpin(name) (calls are counted per process)."""
        self.locks.pin(stem(name))
        try:
            return self._pinned_here(name)
        except BaseException:
            self.locks.unpin(stem(name))
            raise

    def _pinned_here(self, name: str) -> Path:
        """Data file `name`'s local path, downloaded if missing; the caller holds its pin (no eviction meanwhile)."""
        if not self.present(name):
            with self.locks.fetching(stem(name)):
                if not self.present(name):
                    self._download(self.units[name])
        return self.path(name)

    def unpin(self, name: str) -> None:
        self.locks.unpin(stem(name))

    @contextmanager
    def pinned(self, names):
        """The files' local paths, kept from eviction inside the block (open a zarr file or a sidecar there)."""
        done = []
        try:
            for n in names:
                self.pin(n)
                done.append(n)
            yield [self.path(n) for n in names]
        finally:
            for n in done:
                self.unpin(n)

    @contextmanager
    def sidecar(self, name: str):
        """Data file `name`'s sidecar's local path, pinned inside the block (load it there): fetched alone where the
        data file is not there (the word tables of files not read yet are small)."""
        path = quads_path(self.path(name))
        self.locks.pin(stem(name))
        try:
            if not path.exists():
                with self.locks.fetching(stem(name)):
                    if not path.exists():
                        unit = self.units[name]
                        rel = self._sidecar_object(unit.entry)
                        self._download(unit, {rel: unit.objects[rel]})
            yield path
        finally:
            self.locks.unpin(stem(name))

    def discard(self, name: str) -> bool:
        """Delete the local copy of data file `name` and its sidecar (one `verify` found bad); False while it is
        pinned."""
        path = self.path(name)
        return self.locks.evict(stem(name), lambda: _delete([path, quads_path(path)]))

    def fetch_sidecars(self, names) -> None:
        """The sidecars of data files `names` fetched where missing, `jobs` at once (the word tables a reader needs
        before its first batch)."""
        def fetch(name: str) -> None:
            with self.sidecar(name):
                pass
        with ThreadPoolExecutor(max(1, self.settings.jobs)) as pool:
            list(pool.map(fetch, names))

    def rebuilt(self) -> bool:
        """Whether the manifest at the URL is no longer the one this cache was opened with."""
        try:
            return get_bytes(self.location.join(MANIFEST), self.settings.retry, "") != self.manifest_bytes
        except (RemoteError, FileNotFoundError):
            return True

    def _fetch_manifest(self) -> bytes:
        try:
            return get_bytes(self.location.join(MANIFEST), self.settings.retry, self._advice("read"))
        except FileNotFoundError:
            raise CacheError(f"{self.location}: no finished cache here ({MANIFEST} is missing). Build one with: "
                             f"{cache_command('build')} --data DIR --out {self.location}") from None

    def _load_manifest(self) -> Manifest:
        write_atomic(self.folder / MANIFEST, self.manifest_bytes.decode("utf-8", errors="replace"))
        try:
            return Manifest.load(self.folder)
        except CacheError as e:
            raise CacheError(f"{self.location}: {str(e).replace(str(self.folder), str(self.location))}") from None

    @staticmethod
    def _sidecar_object(e: FileEntry) -> str:
        return f"{DATA_DIR}/{quads_path(Path(e.name)).name}"

    def _objects(self, e: FileEntry, stored: dict[str, dict]) -> dict[str, int] | None:
        """The stored objects of a data file and its sidecar with their sizes, or None where any is missing."""
        data = f"{DATA_DIR}/{e.name}"
        parts = [data] if e.shards is None else [f"{data}/{p}" for p in e.shards]
        names = [self._sidecar_object(e), *parts]
        sizes = {n: stored.get(n.removeprefix(f"{DATA_DIR}/"), {}).get("size") for n in names}
        return None if None in sizes.values() else sizes

    def _advice(self, what: str) -> str:
        if what == "read":
            return "Check the URL, the credentials in the environment and the network, then start again"
        return f"Rebuild it with: {update_command(getattr(self, 'manifest', None), self.location)}"

    def _download(self, unit: Unit, parts: dict[str, int] | None = None) -> None:
        """Reserve, fetch, check, rename into place the unit's objects (`parts` of them where given; by default all
        but a sidecar fetched already); on any failure the temp files go and nothing is in place."""
        if parts is None:
            have = quads_path(self.path(unit.entry.name)).exists()   # pinned by the caller: it stays
            fetched = self._sidecar_object(unit.entry) if have else None
            parts = {rel: n for rel, n in unit.objects.items() if rel != fetched}
        tmp = {rel: self._temp_path(rel, unit.entry.name) for rel in parts}
        try:
            self._reserve(unit, parts, tmp)
            hashes = {rel: download(self.location.join(rel), tmp[rel], size, self.settings.retry,
                                    self._advice("read"), hashed=not rel.endswith(unit.entry.name),
                                    block=self.settings.block_bytes, on_bytes=self._count)
                      for rel, size in parts.items()}
            self._check(unit, hashes)
            self._install(unit, parts)
        except FileNotFoundError:   # listed at open, gone now: deleted by a rebuild, or by hand
            if self.rebuilt():
                raise CacheError(f"{self.location}: the cache was rebuilt while this run read it "
                                 f"({unit.entry.name} is no longer stored there); start the run again") from None
            raise RemoteError(f"{self.location}: data file {unit.entry.name} is no longer stored there, though the "
                              f"manifest names it: the cache is damaged. {self._advice('rebuild')}") from None
        finally:
            self._remove_temp(unit)
        with self._counting:
            self.downloaded_files += set(parts) != {self._sidecar_object(unit.entry)}

    def _count(self, n: int) -> None:
        with self._counting:
            self.downloaded_bytes += n

    def _temp_path(self, rel: str, name: str) -> Path:
        """data/X.npy -> FOLDER/data/X.npy.part; a zarr part data/X.zarr/p -> FOLDER/data/X.zarr.part/p."""
        rel_to_file = rel.removeprefix(f"{DATA_DIR}/")
        if rel_to_file.startswith(name + "/"):
            return self.path(name + TEMP_SUFFIX) / rel_to_file.removeprefix(name + "/")
        return self.path(rel_to_file + TEMP_SUFFIX)

    def _reserve(self, unit: Unit, parts: dict[str, int], tmp: dict[str, Path]) -> None:
        """Make room (evicting) and create the temp files at their full size, under the space lock."""
        waited, wait, need = 0.0, ROOM_POLL_S, sum(parts.values())
        while True:
            with self.locks.space():
                if self._make_room(need, keep=stem(unit.entry.name)):
                    for rel, path in tmp.items():
                        path.parent.mkdir(parents=True, exist_ok=True)
                        with open(path, "wb") as f:
                            f.truncate(parts[rel])
                    return
            if waited >= self.settings.room_wait_s:
                limit = self.settings.limit_bytes
                raise RemoteError(f"{self.folder}: --local-cache-limit {size_flag(limit)} leaves no room for "
                                  f"{unit.entry.name} ({size_flag(need)}): the files readers need now fill "
                                  f"it; pass a larger --local-cache-limit, or read with fewer workers")
            time.sleep(wait)
            waited, wait = waited + wait, min(1.0, wait * 2)

    def _make_room(self, need: int, keep: str) -> bool:
        """Whether need more bytes fit under the limit once abandoned temp files and then unpinned files (not
        named by the manifest first, then least recently used) are deleted as far as needed."""
        limit, data = self.settings.limit_bytes, self.folder / DATA_DIR
        if not limit:
            return True
        for p in data.iterdir():   # temp files of downloaders that died
            s = stem(p.name)
            if p.name.endswith(TEMP_SUFFIX) and s != keep and self.locks.fetch_abandoned(s):
                _delete([p])
        used = folder_bytes(data)
        if used + need <= limit:
            return True
        present = stems_present(data)
        wanted = {stem(n) for n in self.units}
        for s in eviction_order(present, wanted, self.locks.last_use):
            if s != keep and self.locks.evict(s, lambda s=s: _delete(present[s])):
                used = folder_bytes(data)
                if used + need <= limit:
                    return True
        return False

    def _check(self, unit: Unit, hashes: dict[str, str | None]) -> None:
        """The downloaded files against the manifest: sidecar and part hashes, the data file's header and size."""
        e, fmt = unit.entry, self.manifest.format
        sidecar = self._sidecar_object(e)
        expected = {sidecar: e.quads_checksum, **{f"{DATA_DIR}/{e.name}/{p}": h for p, h in (e.shards or {}).items()}}
        bad = next((rel for rel, h in expected.items() if rel in hashes and hashes[rel] != h), None)
        why = f"{bad} holds other bytes than the manifest's hash" if bad else None
        if why is None and set(hashes) != {sidecar}:   # the data file came too
            why = fmt.check(self.path(e.name + TEMP_SUFFIX), self.manifest.spec, e.rows)
        if why:
            raise StoredDamage(f"{self.location}: data file {e.name} as stored is damaged ({why}). "
                               f"{self._advice('rebuild')}", why)

    def _install(self, unit: Unit, parts: dict[str, int]) -> None:
        """Sidecar first, then the data file: a data file in place always has its sidecar."""
        name, sidecar_object = unit.entry.name, self._sidecar_object(unit.entry)
        sidecar = quads_path(self.path(name))
        if sidecar_object in parts:
            publish(sidecar.with_name(sidecar.name + TEMP_SUFFIX), sidecar)
        if set(parts) != {sidecar_object}:
            self.manifest.format.install(self.path(name + TEMP_SUFFIX), self.path(name))
        fsync_path(self.folder / DATA_DIR)

    def _remove_temp(self, unit: Unit) -> None:
        name = unit.entry.name
        sidecar = quads_path(self.path(name))
        _delete([self.path(name + TEMP_SUFFIX), sidecar.with_name(sidecar.name + TEMP_SUFFIX)])


def _delete(paths) -> None:
    for p in paths:
        try:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        except FileNotFoundError:
            pass
