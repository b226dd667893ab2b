"""ROOT/images/ and ROOT/ufo/{split}.json of a converted set, written so that a failure loses nothing.

Every clash is found before anything is written; images are placed first (each under a temp name,
then renamed), and the UFO file last, atomically: a UFO file never names an image that is not there.
"""
from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from east_cache.errors import DataError, UsageError
from east_cache.ingest.ufofile import ufo_text
from east_cache.atomic import replacing, write_atomic

IMAGES_DIR = "images"
UFO_DIR = "ufo"


def ufo_path(out: Path, split: str) -> Path:
    return Path(out) / UFO_DIR / f"{split}.json"


def check_output(out: Path, split: str, force: bool) -> None:
    """Refuse to replace an existing UFO file without --force, before any work is done."""
    path = ufo_path(out, split)
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; pass --force to replace it, or choose another --out or --split")
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is a file; give a folder (it will hold ufo/ and images/)")


def check_prefix(prefix: str) -> None:
    if any(c in prefix for c in "/\\\0") or prefix.startswith("."):
        raise UsageError(f"--prefix {prefix!r}: a prefix is the start of a file name; use no '/', '\\' or a leading '.'")


def write_root(out: Path, split: str, entries: dict, sources: dict[str, Path], copy: bool, force: bool,
               top: dict | None = None) -> None:
    """entries: UFO image entries by output name; sources: the image file of each name; top: the UFO file's
    top-level members other than "images", written first."""
    folder = Path(out) / IMAGES_DIR
    todo = _images_to_place(folder, sources, force)
    folder.mkdir(parents=True, exist_ok=True)
    for name in todo:
        _place(sources[name], folder / name, copy)
    path = ufo_path(out, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ufo_text(entries, top))


def _images_to_place(folder: Path, sources: dict[str, Path], force: bool) -> list[str]:
    """Names whose file is not already in place; an other file under the same name is an error."""
    todo, clashes = [], []
    for name, src in sources.items():
        dst = folder / name
        if not os.path.lexists(dst):
            todo.append(name)
        elif not _same_image(dst, src):
            (todo if force else clashes).append(name)
    if clashes:
        first = folder / clashes[0]
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        raise DataError(f"{first} already exists and is not {sources[clashes[0]]}{more}; nothing was written. "
                        f"Convert into another --out (one root per source set or split), give this set's names "
                        f"a --prefix, or pass --force to replace those images")
    return todo


def _same_image(dst: Path, src: Path) -> bool:
    try:
        return os.path.samefile(dst, src) or (dst.is_file() and filecmp.cmp(dst, src, shallow=False))
    except OSError:   # a dangling link: not the same
        return False


def _place(src: Path, dst: Path, copy: bool) -> None:
    with replacing(dst, hide=True, sync=False) as tmp:   # an image of a set: made again by converting again
        if copy:
            shutil.copy2(src, tmp)
        else:
            os.symlink(src.resolve(), tmp)
