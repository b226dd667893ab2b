"""The one door every file a command writes goes through, and durable writes.

A file is written under a temp name in its own folder, fsynced, then renamed over its name (os.replace) and the
folder fsynced: a reader sees the old file or the new one, never half of one, and a link at the name (symbolic, or
a hard link to another file) is replaced, never written through. Before it, the name is checked against the running
command's declared inputs (errors.CommandInputs: what inputs.py's refuse_overwrite and declare_inputs named), by path
and by file identity: no output is or replaces an input, even one the command's first check did not know of.

    replacing(path)      a temp path beside path to write (torch.save, np.savez, a library that wants a name)
    writing(path, mode)  the same as an open file ("w", "wb"): PIL's and matplotlib's save, json, csv
    write_atomic(path, content)   text or bytes, whole
    publish(tmp, path)   a temp file the caller made itself (a build's staged data file, a hard link, a symlink)
                         renamed over path, checked the same way
    Appender(path)       lines appended to a log of the command's own (log.jsonl, eval.jsonl): a link or a file of
                         several names at path is first replaced by a private copy of its bytes, said once

tests/test_one_door.py reads the package's source and fails on any other write outside this module and its
allow-list (each entry says why: a third-party library writing its own folder, a build's staging file, a lock).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from east_cache.errors import CommandInputs, UsageError, stderr_line


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


def refuse_input(path, flag: str = "") -> None:
    """A UsageError where the door, replacing the name path, would replace one of the running command's declared
    inputs: the input's own name, a file of an input folder, or the input's file under another name (a hard link).
    A symbolic link at path is replaced, not followed (whatever it points to stays as it was; the command's first
    check, refuse_overwrite, refused a link to an input already); a file this command wrote itself earlier is its
    own to replace. Outside a command, nothing is declared."""
    scope = CommandInputs.current()
    if scope is None:
        return
    path = Path(path)
    where = path.parent.resolve() / path.name   # the name itself, its last part not followed
    try:
        st = os.lstat(where)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        st = None   # a link (replaced, not followed), or no file: no input's file is replaced
    if st is not None and (st.st_dev, st.st_ino) in scope.wrote:
        return
    for inp, real_in, files in scope.inputs:
        every = files.tree and files.reads == ("**/*",)   # a folder all of whose files are read
        if where == real_in or (st is not None and ((every and where.is_relative_to(real_in)) or files.holds(st))):
            raise UsageError(f"{flag + ' ' if flag else ''}{path}: that is {inp.what} ({inp.path}), or a link to it; "
                             f"writing it would destroy it: write elsewhere")


def wrote(path) -> None:
    """The running command wrote the file at path: replacing it again later is replacing its own."""
    scope = CommandInputs.current()
    st = os.lstat(path) if scope is not None else None
    if st is not None and not stat.S_ISLNK(st.st_mode):   # a link written is not the file it points to
        scope.wrote.add((st.st_dev, st.st_ino))


def temp_name(path: Path, tmp_suffix: str | None = None, hide: bool = False) -> Path:
    """The temp file beside path that the door writes (default suffix .tmpPID: two processes never share one);
    hide: a name starting with a dot (in a folder whose files are listed as data, an image folder)."""
    return path.with_name(("." if hide else "") + path.name + (tmp_suffix or f".tmp{os.getpid()}"))


@contextmanager
def replacing(path, tmp_suffix: str | None = None, flag: str = "", hide: bool = False,
              sync: bool = True) -> Iterator[Path]:
    """Yields a temp path beside path to write, once path is checked against the command's inputs (refuse_input;
    flag: how an error names the output); then fsync it (sync: and the folder after), rename it over path. On any
    error (a full disk, an interrupt) the temp file is removed and the old file stands. tmp_suffix, hide: temp_name's."""
    path = Path(path)
    refuse_input(path, flag)
    tmp = temp_name(path, tmp_suffix, hide)
    tmp.unlink(missing_ok=True)   # a stale temp file, or a link someone left there: never written through
    try:
        yield tmp
        if sync:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_path(path.parent)
    wrote(path)


@contextmanager
def writing(path, mode: str = "w", flag: str = "", sync: bool = True, **kwargs) -> Iterator:
    """replacing's temp file opened (mode "w" or "wb"; kwargs: open's, such as encoding or newline): what a writer
    that takes a file object writes into (PIL's image.save(f, format=...), matplotlib's savefig(f, format=...))."""
    if set(mode) - set("wbt"):
        raise ValueError(f"writing(mode={mode!r}): a file is written whole, 'w' or 'wb'")
    with replacing(path, flag=flag, sync=sync) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def write_atomic(path, content: str | bytes, flag: str = "") -> None:
    """content (text, or bytes) as path's new content, durably and atomically (replacing): a link at path is
    replaced, never written through."""
    with writing(path, "wb" if isinstance(content, bytes) else "w", flag) as f:
        f.write(content)


def publish(tmp, path, flag: str = "") -> None:
    """A finished temp file the caller wrote itself (a build's staged data file, a hard link, a symbolic link),
    checked as replacing checks path, renamed over path; the folder fsynced. The caller syncs the file's data."""
    path = Path(path)
    refuse_input(path, flag)
    os.replace(tmp, path)
    fsync_path(path.parent)
    wrote(path)


class Appender:
    """Lines appended to a log file of the command's own (log.jsonl, eval.jsonl): before its first line, the name is
    checked against the command's inputs, and a symbolic link, a file with more than one name (a hard link) or
    anything but a regular file at it is replaced, through the door, by a private copy of the bytes it holds (a
    regular file's), said once on stderr, so that the appends never reach another file. Each line is appended
    without following a link (O_NOFOLLOW) and in one write."""

    def __init__(self, path, flag: str = ""):
        self.path, self.flag, self.checked = Path(path), flag, False

    def __call__(self, text: str) -> None:
        if not self.checked:
            refuse_input(self.path, self.flag)
            self.checked = True
        fd = self.own_fd()
        if fd is None:   # a link or a shared file at the name: made a file of our own, once
            self.privatise()
            fd = self.own_fd()
            if fd is None:
                raise UsageError(f"{self.path}: cannot be made a file of this command's own (something replaces it "
                                 f"as it is written); write elsewhere")
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def own_fd(self) -> int | None:
        """A descriptor appending to the regular file of one name at path (made if missing), else None."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                         0o644)
        except OSError:   # a symbolic link (ELOOP), or something that cannot be opened so
            return None
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        return None

    def privatise(self) -> None:
        """The file at path replaced by a copy of its own (the bytes a regular file holds there, else none)."""
        st = os.lstat(self.path)
        kind = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else f"a file of {st.st_nlink} names (a hard link)"
                if stat.S_ISREG(st.st_mode) else "not a regular file")
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{self.flag + ' ' if self.flag else ''}{self.path}: a folder is there; this command "
                             f"appends its records to a file of that name: move the folder away")
        try:
            target = os.stat(self.path)
            held = self.path.read_bytes() if stat.S_ISREG(target.st_mode) else b""
        except OSError:   # a dangling link
            held = b""
        with replacing(self.path, flag=self.flag) as tmp:
            tmp.write_bytes(held)
        stderr_line(f"note: {self.path} was {kind}; this command appends to a file of its own there (a copy of what "
                    f"it held), leaving the other file as it was")


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
