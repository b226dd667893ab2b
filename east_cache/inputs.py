"""What a command reads, which nothing it writes may be: its inputs, declared and checked before any work.

Each command names its inputs (Input: a file, or a folder tree and the files of it the command reads) and checks
its outputs against them up front (check_output: a path it can write; refuse_overwrite: no output is an input, or
replaces one, or writes through a link to one, by path and by file identity). The inputs it checked are declared
for the running command (declare_inputs, into errors.CommandInputs), and the one door (atomic.py) checks every file
written against them again, as it is written.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from east_cache.errors import CommandInputs, UsageError


def check_output(path: Path, flag: str, folder: bool) -> None:
    """Refuse, before any slow work, an output path that cannot be written: a folder (folder=True) where a file
    is, a file where a folder is, anything under a file, or a path whose nearest existing folder cannot be
    written."""
    path = Path(path)
    want = "the path of a folder (it is made if missing)" if folder else "the path of a file to write"
    if path.exists() and path.is_dir() != folder:
        raise UsageError(f"{flag} {path}: {'a file' if folder else 'a folder'} is there; pass {want}")
    existing = nearest_existing(path)
    if existing != path and not existing.is_dir():
        raise UsageError(f"{flag} {path}: {existing} is a file, so nothing can be made inside it; pass {want}")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"{flag} {path}: {existing} cannot be written (permission denied); pass {want} where "
                         f"you can write")


def nearest_existing(path: Path) -> Path:
    """path itself if it exists, else its nearest folder above that does (the root at worst)."""
    return path if path.exists() else next(p for p in path.parents if p.exists() or p == p.parent)


@dataclass(frozen=True)
class Input:
    """A command's input that none of its outputs may be, replace or write through. what: how an error names it
    ("the ground truth --gt"); path: a local path (a URL is skipped: outputs are local); tree: a folder whose files
    are inputs (an image folder, a cache's data/), so an existing file below it is one too; reads: for a tree, the
    glob patterns (relative to it) of the files the command reads, where it reads only some (convert reads the
    annotation files at a source folder's top, not a root converted into it earlier)."""
    what: str
    path: object
    tree: bool = False
    reads: tuple[str, ...] = ("**/*",)


def refuse_overwrite(flag: str, out, inputs, writes: tuple[str, ...] | None = None) -> None:
    """The one rule for what a command writes, checked before any work: UsageError naming the flag, the path and
    the input where a path the command writes is one of `inputs` or would replace or write through one: the same
    resolved path, or the same file by (st_dev, st_ino), so a symbolic or a hard link to an input is refused.
    out: a file; or, with writes, a folder and the names (glob patterns, "data/*") the command writes there: no
    file it writes may be an input, nor may a folder it writes (whole) hold one. The folder itself may be or lie
    in an input folder: a new file beside the inputs overwrites nothing. The inputs become the command's declared
    ones (declare_inputs), against which every file it writes is checked again as it is written."""
    out = Path(out)
    inputs = [i for i in inputs if i.path is not None and "://" not in str(i.path)]
    declare_inputs(inputs)
    targets = [out] if writes is None else [t for name in writes for t in written(out, name)]
    for inp in inputs:
        real_in, files = Path(inp.path).resolve(), InputFiles(Path(inp.path), inp.tree, inp.reads)
        clash = next((t for t in targets if clashes(t, real_in, files)), None)
        if clash is None:
            continue
        if clash == out:
            what = f"a file of {inp.what}" if inp.tree and out.resolve() != real_in else inp.what
            raise UsageError(f"{flag} {out}: that is {what} ({inp.path}), or a link to it; writing it would "
                             f"destroy it: pass another {flag}")
        real_clash = clash.resolve()
        held = ("holds" if real_in.is_relative_to(real_clash) and real_in != real_clash else
                "is a file of" if inp.tree and real_clash != real_in else "is")
        raise UsageError(f"{flag} {out}: this command would write {clash}, which {held} {inp.what} ({inp.path}), or "
                         f"a link to it; pass another {flag}")


def written(out: Path, name: str) -> list[Path]:
    """The paths a folder output's name stands for: the name itself, or the existing matches of a pattern."""
    return sorted(out.glob(name)) if any(c in name for c in "*?[") else [out / name]


class InputFiles:
    """The files of an input (the file, or the files of a tree its patterns match) by identity (st_dev, st_ino): the
    same file under any path, a hard link, a link, a bind mount. Listed once, when an existing output first asks."""

    def __init__(self, path: Path, tree: bool, reads: tuple[str, ...] = ("**/*",)):
        self.path, self.tree, self.reads = path, tree, reads
        self._ids: set[tuple[int, int]] | None = None

    def holds(self, st: os.stat_result) -> bool:
        """Whether the existing file of status st is one of the input's files."""
        if self._ids is None:
            files = [p for pattern in self.reads for p in self.path.glob(pattern)] if self.tree else [self.path]
            self._ids = set()
            for p in files:
                try:
                    found = os.stat(p)
                except OSError:   # gone, or a dangling link: no file to protect
                    continue
                if stat.S_ISREG(found.st_mode):
                    self._ids.add((found.st_dev, found.st_ino))
        return (st.st_dev, st.st_ino) in self._ids


def clashes(target: Path, real_in: Path, files: InputFiles) -> bool:
    """Whether writing target would replace the input (its path or its file), hold it (a folder written whole), or
    replace or write through a file of an input tree."""
    real_t = target.resolve()
    if real_t == real_in or (real_in.is_relative_to(real_t) and target.is_dir()):
        return True
    if not target.exists() or target.is_dir():
        return False   # a new file can be no input; a folder written into is checked by the files it gets
    every = files.tree and files.reads == ("**/*",)
    return (every and real_t.is_relative_to(real_in)) or files.holds(target.stat())


def declare_inputs(inputs) -> None:
    """The running command reads these Inputs (refuse_overwrite declares those it checks): no file it writes may be
    one of them or write through one."""
    if (scope := CommandInputs.current()) is not None:
        scope.inputs += [(i, Path(i.path).resolve(), InputFiles(Path(i.path), i.tree, i.reads)) for i in inputs
                         if i.path is not None and "://" not in str(i.path)]
