"""The --out directory a build works in: its lock, what in it is ours, and what a build removes from it.

Nothing of the user's is lost: a manifest.json that no build of ours wrote is refused, not overwritten; only
names a build writes (plan.OWN_FILE) are ever deleted from CACHE/data; a failed build removes its unfinished
temp files, and a failed first build the directories and lock file it created, where nothing else is in them.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from east_cache.errors import BuildError, cache_command
from east_cache.ingest.files import open_regular
from east_cache.atomic import made_folders
from east_cache.store.format import DATA_DIR, IMAGE_HASHES, MANIFEST, QUADS_SUFFIX
from east_cache.store.formats import FILE_FORMATS
from east_cache.store.manifest import data_path
from east_cache.build.plan import CORRUPT_MARKER, OWN_FILE, TMP_SUFFIX, Plan, temp_names, tmp_name
from east_cache.store.sidecar import quads_path

LOCK = ".lock"
# Keys every manifest a build of ours wrote has had: a manifest.json without them is someone else's file.
# what a build writes in --out (inputs.refuse_overwrite): no input may lie there
BUILD_WRITES = (MANIFEST, LOCK, CORRUPT_MARKER, IMAGE_HASHES, DATA_DIR, f"{DATA_DIR}/*")
OWN_MANIFEST_KEYS = ("format_version", "build_fingerprint")


@contextmanager
def owned_out(out: Path):
    """--out (and data/) created where missing, a foreign manifest refused, the lock held, for the build inside.
    On an error or Ctrl-C, what this created is removed again where it is empty (a first build that failed)."""
    with made_folders(out / DATA_DIR) as made:
        refuse_foreign_manifest(out)
        with build_lock(out, remove_on_error=not (out / LOCK).exists() or out in made):
            yield


def corrupt_files(out: Path) -> set[str]:
    """The files `verify` found bad (CORRUPT_MARKER), for this build to redo."""
    marker = out / CORRUPT_MARKER
    if not (marker.exists() or marker.is_symlink()):
        return set()
    try:
        with open_regular(marker) as f:
            names = json.loads(f.read())
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return set(names)
    except (OSError, ValueError):   # ValueError: not JSON, not UTF-8, not a regular file
        pass
    raise BuildError(f"{marker}: the list of bad files that `verify` writes is damaged; delete it and run "
                     f"`{cache_command('verify')} {out}` again, then build")


def build_holder(out: Path) -> str | None:
    """The pid of the build that holds out's lock, or None when no build is writing there."""
    try:
        fd = os.open(out / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: taken only when no build holds it
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)
    return None


@contextmanager
def build_lock(out: Path, remove_on_error: bool = False):
    """One build per cache directory; the kernel drops the lock if the process dies. remove_on_error: a build
    that fails deletes the lock file it created (unlinked while still held, so no other build takes it)."""
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BuildError(f"{out}: another build (pid {holder}) is writing this cache. Wait for it to finish, "
                             f"or build into another --out.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        except BaseException:
            if remove_on_error:
                (out / LOCK).unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)


def refuse_foreign_manifest(out: Path) -> None:
    """A manifest.json in --out that no build of ours wrote is someone's file: it is not ours to overwrite. One that
    cannot be read beside our lock or data files is a damaged cache of ours, which the build replaces."""
    path = out / MANIFEST
    if not (path.exists() or path.is_symlink()):
        return
    try:
        with open_regular(path) as f:   # not a FIFO's read, which would wait forever
            why = foreign_manifest(f.read())
    except (OSError, ValueError) as e:   # ValueError: not UTF-8, not a regular file
        why = f"it cannot be read as a cache manifest: {e}"
    if why and not _holds_our_files(out):
        raise BuildError(f"{out}: holds a {MANIFEST} that no build of this tool wrote ({why}); it is left as it is. "
                         f"Build into another --out, or delete {path} if it is a damaged cache of ours.")


def foreign_manifest(data: bytes | str) -> str | None:
    """Why a manifest.json's content is no build's of ours (not JSON, or without OWN_MANIFEST_KEYS); None if it is."""
    try:
        doc = json.loads(data)
    except ValueError as e:   # not JSON, not UTF-8
        return f"it cannot be read as a cache manifest: {e}"
    if not isinstance(doc, dict) or not all(k in doc for k in OWN_MANIFEST_KEYS):
        return f"it lacks {' and '.join(OWN_MANIFEST_KEYS)}"
    return None


def _holds_our_files(out: Path) -> bool:
    """A lock file or data files of ours beside a damaged manifest: a cache of ours, which a build repairs."""
    data = out / DATA_DIR
    return (out / LOCK).exists() or (data.is_dir() and any(OWN_FILE.fullmatch(p.name) for p in data.iterdir()))


def remove_temp_files(out: Path, plan: Plan, keep: set[str] = frozenset()) -> None:
    """The preallocated temp files of a build that failed, and their sidecars' (gigabytes, of no use), but for the
    names in keep (staging files with finished rows, and their journals: journal.py)."""
    for f in plan.to_write:
        sidecar = quads_path(data_path(out, f.name))
        for p in (*(data_path(out, n) for n in temp_names(f.name)), sidecar.with_name(tmp_name(sidecar.name))):
            if p.name not in keep:
                _remove(p)


def remove_other_temp_files(out: Path, keep: set[str]) -> None:
    """Before a build writes: the temp files that earlier builds left in data/ (a killed build's, the staging
    files of an interrupted build of other samples), but for the names in keep, which this build goes on with.
    Their space is free for this build then, not only after its commit."""
    for p in (out / DATA_DIR).iterdir():
        if OWN_FILE.fullmatch(p.name) and _temp(p.name) and p.name not in keep:
            _remove(p)


def _temp(name: str) -> bool:
    return name.endswith((TMP_SUFFIX, tmp_name(QUADS_SUFFIX).removeprefix(QUADS_SUFFIX)))


def _remove(p: Path) -> None:
    try:
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    except OSError:   # a failing disk: the next build collects them by name
        pass


def collect_garbage(out: Path, keep: set[str]) -> int:
    """After the commit: delete data files no manifest names (old versions, leftovers of killed builds).
    Only names a build writes are candidates: whatever else lies in the directory is not ours to delete."""
    keep = keep | {quads_path(data_path(out, name)).name for name in keep}
    removed = 0
    for p in (out / DATA_DIR).iterdir():
        if p.name in keep or not OWN_FILE.fullmatch(p.name):
            continue
        if p.is_dir():  # a multi-part file (a zarr group), or its temp version
            shutil.rmtree(p)
        else:
            p.unlink()
        removed += p.suffix[1:] in FILE_FORMATS
    marker = out / CORRUPT_MARKER
    if marker.exists():
        marker.unlink()
    return removed
