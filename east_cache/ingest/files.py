"""Which files a build may open: names from an annotation file stay in their folder, and only regular files.

A UFO file is data, often made by someone else, and its image names are paths relative to the image
folder. A name is refused, before anything is opened, unless it is a relative path of plain parts: not
absolute, no "..", no control character (NUL, newline, escape), nothing that is not UTF-8. ".." is refused
even where the path it spells stays inside: the kernel resolves "link/.." through the link's target.

Symlinks are the user's doing, not the annotation file's: people assemble data sets from links (an image
folder that is a link, images linked from another disk), so a link inside the image folder is followed
wherever it points, provided it ends at a regular file. Anything else (a FIFO, a device, a directory,
a dangling link) is refused, and a file is opened with O_NONBLOCK and checked with fstat before a byte is
read, so that a FIFO swapped in after the check cannot stall a build either.

A data set at a URL has no links nor FIFOs: its objects are read whole through objects.py, by the same calls.
"""
from __future__ import annotations

import io
import os
import stat
import unicodedata
from pathlib import Path, PurePosixPath

from east_cache.ingest.objects import ObjectPath, is_url, source_path

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class NotAllowed(ValueError):
    """A name or a file a build must not open; the message says why, without the caller's context."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a path inside the image folder, or None when it can."""
    if not isinstance(name, str) or not name:
        return "the name is empty"
    control = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if control is not None:   # NUL can name no file; a newline or an escape would garble every message naming it
        return f"the name holds a control character (U+{ord(control):04X})"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "the name holds a lone surrogate (\\ud800-\\udfff), which no file name can hold"
    parts = PurePosixPath(name)
    if parts.is_absolute():
        return "the name is an absolute path; names are relative to the image folder"
    if ".." in parts.parts:
        return "the name holds '..'; names may not leave the image folder"
    return None


def contained(folder, name: str) -> Path | ObjectPath:
    """folder / name, once name_problem has nothing against it."""
    why = name_problem(name)
    if why:
        raise NotAllowed(why)
    return source_path(folder) / name


def kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def regular_stat(path) -> os.stat_result | dict:
    """os.stat of a regular file (links followed); NotAllowed for anything else, OSError when it is missing. An
    object at a URL: its listed details."""
    if is_url(path):
        return source_path(path).info()
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotAllowed(f"{kind(st.st_mode)}, not an image file")
    return st


def open_regular(path) -> io.BufferedReader | io.BytesIO:
    """A regular file opened for reading; NotAllowed, before any read, for anything else.
    O_NONBLOCK makes opening a FIFO return at once (no writer needed) and changes nothing for a regular file.
    An object at a URL is read whole."""
    if is_url(path):
        return source_path(path).open()
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAllowed(f"{kind(mode)}, not a file that can be read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
