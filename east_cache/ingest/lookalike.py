"""Which other annotation format a folder that is no UFO dataset root looks like, so that the error that says so
can give the `convert` command that makes one of it.

A look, not a parse: the first bytes of a few files in the folder and in its subfolders (one level down), each
matched against the layout that a reader in convert/ expects (`--from` names as convert.FORMATS has them; a test
runs every command this gives). Nothing outside the folder is read, and only regular files.
"""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from east_cache.errors import CacheHint
from east_cache.ingest.files import open_regular
from east_cache.ingest.imageio import IMAGE_EXTENSIONS

PEEK_BYTES = 1 << 16   # of a file: its first line, or the top of a JSON document
PEEK_FILES = 8         # files of a suffix looked at in each folder
SUBFOLDERS = 32        # subfolders of the root looked into
COMMAND = CacheHint("{command} convert")
DEFAULT_SPLIT = "train"   # convert's --split default

_NUM = r"\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)\s*"
_QUAD_LINE = re.compile(rf"^(?:{_NUM},){{8}}")                      # x1,y1,...,x4,y4,text
_BOX_LINE = re.compile(rf"^{_NUM}(?:,|\s){_NUM}(?:,|\s){_NUM}(?:,|\s){_NUM}(?:,|\s)*(\".*\")?\s*$")
_POLYGON_LINE = re.compile(rf"^(?:{_NUM},)+(?:{_NUM})?(?:####.*)?$")   # x1,y1,...,xn,yn[,]####text


@dataclass(frozen=True)
class Lookalike:
    fmt: str                    # convert's --from
    title: str                  # what the folder looks like, in words
    src: Path                   # convert's SRC
    images: Path | None = None  # --images, where the images are not where the reader looks by default

    def command(self, out: Path, split: str = DEFAULT_SPLIT) -> str:
        """The convert command that writes out/ufo/{split}.json and out/images/."""
        images = f" --images {shlex.quote(str(self.images))}" if self.images else ""
        split = f" --split {shlex.quote(split)}" if split != DEFAULT_SPLIT else ""
        return (f"{COMMAND} --from {self.fmt} {shlex.quote(str(self.src))}{images} --out {shlex.quote(str(out))}"
                f"{split}")


def looks_like(root: Path, split: str = DEFAULT_SPLIT) -> Lookalike | None:
    """The format of convert/ that the folder root (no UFO root) looks like, or None. Of several subfolders that
    look like one, a subfolder named like the split comes first (CORD's train/, dev/, test/)."""
    root = Path(root)
    if not root.is_dir():
        return None
    subfolders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())[:SUBFOLDERS]
    folders = [root] + sorted(subfolders, key=lambda p: p.name != split)
    for folder in folders:
        found = _cord(folder) or _json_file(folder, root) or _text_files(folder, root)
        if found is not None:
            return found
    return None


def _cord(folder: Path) -> Lookalike | None:
    """CORD's split folder: json/NAME.json (valid_line) beside image/."""
    if (folder / "json").is_dir() and any('"valid_line"' in _peek(p) for p in _files(folder / "json", ".json")):
        return Lookalike("cord", "a CORD split folder (json/ and image/)", folder)
    return None


def _json_file(folder: Path, root: Path) -> Lookalike | None:
    """One JSON file for the whole set: MMOCR's text detection (image paths relative to its folder), COCO-Text
    (bare file names)."""
    for path in _files(folder, ".json"):
        head = _peek(path)
        if '"data_list"' in head:
            return Lookalike("mmocr", f"an MMOCR text-detection file ({path.name})", path)
        if '"anns"' in head and ('"imgs"' in head or '"legibility"' in head):
            images = None if _has_images(folder) else _image_folder(root, folder)
            return Lookalike("cocotext", f"a COCO-Text file ({path.name})", path, images)
    for path in _files(folder, ".txt"):   # WildReceipt: train.txt, test.txt of JSON lines
        if _wildreceipt_line(_first_line(path)):
            return Lookalike("wildreceipt", f"a WildReceipt file of JSON lines ({path.name})", path)
    return None


def _text_files(folder: Path, root: Path) -> Lookalike | None:
    """A text file per image: ICDAR 2015 / SROIE, ICDAR 2013, Total-Text, CTW1500-style polygons."""
    lines = [(p, _first_line(p)) for p in _files(folder, ".txt")]
    lines = [(p, line) for p, line in lines if line]
    if not lines:
        return None
    path, line = lines[0]
    images = None if _has_images(folder) else _image_folder(root, folder)
    if line.lstrip().startswith("x:"):
        return Lookalike("totaltext", "Total-Text text files (poly_gt_NAME.txt)", folder, images)
    if "####" in line and _POLYGON_LINE.match(line):
        return Lookalike("polygon", "CTW1500-style polygon text files (NAME.txt)", folder, images)
    if _QUAD_LINE.match(line):
        if path.stem.startswith("gt_") or not _has_images(folder):
            return Lookalike("icdar2015", "ICDAR 2015 text files (gt_NAME.txt)", folder, images)
        return Lookalike("sroie", "SROIE text files (NAME.txt beside NAME.jpg)", folder, images)
    if _BOX_LINE.match(line):
        return Lookalike("icdar2013", "ICDAR 2013 text files (gt_NAME.txt)", folder, images)
    return None


def _wildreceipt_line(line: str) -> bool:
    try:
        item = json.loads(line)
    except ValueError:
        return False
    return isinstance(item, dict) and "file_name" in item and "annotations" in item


def _files(folder: Path, suffix: str) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix.lower() == suffix and p.is_file()
                      and not p.is_symlink())[:PEEK_FILES]
    except OSError:
        return []


def _images(folder: Path) -> Iterator[Path]:
    try:
        yield from (p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    except OSError:
        return


def _has_images(folder: Path) -> bool:
    return next(_images(folder), None) is not None


def _image_folder(root: Path, annotations: Path) -> Path | None:
    """The folder beside the annotations (the root, or one of its subfolders) that holds the most images."""
    candidates = [root] + sorted(p for p in root.iterdir() if p.is_dir() and p != annotations)[:SUBFOLDERS]
    counts = [(sum(1 for _ in _images(p)), p) for p in candidates]
    best = max(counts, key=lambda c: c[0], default=(0, None))
    return best[1] if best[0] else None


def _peek(path: Path) -> str:
    try:
        with open_regular(path) as f:
            return f.read(PEEK_BYTES).decode("utf-8", errors="replace").removeprefix("\ufeff")
    except (OSError, ValueError):   # ValueError: files.NotAllowed, a file that is not a regular one
        return ""


def _first_line(path: Path) -> str:
    return next((line.strip() for line in _peek(path).splitlines() if line.strip()), "")
