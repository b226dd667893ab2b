"""The locks of a local cache folder, shared by every process of the machine that reads through it.

Per file (a data file with its sidecar, named by its stem), in FOLDER/locks/:
- STEM.fetch, held exclusive by the one process that downloads the file: the others wait on it, then find the
  file in place. A temp file whose fetch lock nobody holds was left by a downloader that died.
- STEM.pin, held shared while a reader needs the file (the batches about to be read); eviction deletes a file
  only under this lock taken exclusive without waiting, so never a pinned one. Its mtime is the file's last use.
And FOLDER/locks/space.lock, exclusive while one process counts the folder's bytes, evicts and reserves room.

These are flock(2) locks: the kernel drops them when their holder dies. Each process keeps one descriptor per
pinned file, counted; a forked child closes the descriptors it inherited at once (the parent's pins stay the
parent's: closing a copy releases nothing, unlocking one would).
"""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path

LOCKS_DIR = "locks"
SPACE_LOCK = "space.lock"


class Pins:
    """This process's pins, by lock file path: [descriptor, count]."""

    def __init__(self):
        self.held: dict[Path, list[int]] = {}
        self.lock = threading.Lock()

    def drop_inherited(self) -> None:
        for fd, _ in self.held.values():
            os.close(fd)
        self.held, self.lock = {}, threading.Lock()


PINS = Pins()
os.register_at_fork(after_in_child=PINS.drop_inherited)


class FolderLocks:
    def __init__(self, folder: Path):
        self.dir = Path(folder) / LOCKS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.paths: dict[tuple[str, str], Path] = {}   # (stem, kind) -> its lock file (pinned every epoch)

    def path(self, stem: str, kind: str) -> Path:
        path = self.paths.get((stem, kind))
        if path is None:
            path = self.paths[stem, kind] = self.dir / f"{stem}.{kind}"
        return path

    def pin(self, stem: str) -> None:
        """Hold stem's pin (shared) until as many unpin calls; marks it used now."""
        path = self.path(stem, "pin")
        with PINS.lock:
            held = PINS.held.get(path)
            if held is None:
                fd = _open(path)
                fcntl.flock(fd, fcntl.LOCK_SH)   # waits only while an evictor deletes the file: a moment
                held = PINS.held[path] = [fd, 0]
            held[1] += 1
        os.utime(path)

    def unpin(self, stem: str) -> None:
        path = self.path(stem, "pin")
        with PINS.lock:
            held = PINS.held.get(path)
            if held is None:
                return
            held[1] -= 1
            if held[1] == 0:
                os.close(held[0])   # closing the only descriptor releases the lock
                del PINS.held[path]

    def pinned_here(self, stem: str) -> bool:
        return self.path(stem, "pin") in PINS.held

    @contextmanager
    def fetching(self, stem: str):
        """stem's fetch lock, exclusive: waits while another process or thread downloads the file."""
        fd = _open(self.path(stem, "fetch"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def fetch_abandoned(self, stem: str) -> bool:
        """No process downloads stem now (its temp files, if any, are a dead downloader's)."""
        return _try_exclusive(self.path(stem, "fetch"), lambda: None)

    def evict(self, stem: str, delete) -> bool:
        """delete() under stem's pin lock taken exclusive without waiting; False (nothing done) while it is pinned."""
        return _try_exclusive(self.path(stem, "pin"), delete)

    def last_use(self, stem: str) -> float:
        try:
            return os.stat(self.path(stem, "pin")).st_mtime
        except FileNotFoundError:
            return 0.0

    @contextmanager
    def space(self):
        fd = _open(self.dir / SPACE_LOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _try_exclusive(path: Path, action) -> bool:
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        action()
        return True
    finally:
        os.close(fd)
