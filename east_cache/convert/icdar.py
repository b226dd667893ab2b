"""ICDAR 2015 / SROIE and ICDAR 2013: one text file of words per image, one word per line.

Also the per-image text-file machinery that polygons.py shares: which image a gt file belongs to,
and its lines, numbered, decoded as UTF-8 with or without a byte-order mark.
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from east_cache.convert.rules import (
    ILLEGIBLE_TEXT,
    Page,
    Problems,
    Source,
    Word,
    clip,
    image_index,
    pairs,
    parse_numbers,
)
from east_cache.errors import DataError

GT_PREFIXES = ("poly_gt_", "gt_")   # gt_img_1.txt -> img_1.jpg (ICDAR), poly_gt_img1.txt -> img1.jpg (Total-Text)
ANNOTATION_SUFFIX = ".txt"
QUAD_FIELDS = 8                     # x1,y1,...,x4,y4

Lines = list[tuple[int, str]]       # (line number from 1, text without its line break), blank lines left out
ParseFile = Callable[[Path, Lines, Problems], list[Word]]


def per_file_pages(source: Source, problems: Problems, parse: ParseFile) -> Iterator[Page]:
    """One Page per annotation file of SRC (a folder of .txt files, or one file); images are looked up
    by the file's stem, without a gt_ prefix, in --images (default: the annotations' folder)."""
    files = annotation_files(source.path)
    folder = source.images or (source.path if source.path.is_dir() else source.path.parent)
    index = image_index(folder)
    for path in files:
        image = _image_for(path, index, folder, problems)
        if image is not None:
            yield Page(image, str(path), parse(path, numbered_lines(path, problems), problems))


def annotation_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    files = sorted(p for p in src.iterdir() if p.suffix.lower() == ANNOTATION_SUFFIX and p.is_file())
    if not files:
        raise DataError(f"{src}: no {ANNOTATION_SUFFIX} annotation files in this folder; give the folder of gt files")
    return files


def _image_for(path: Path, index: dict, folder: Path, problems: Problems) -> Path | None:
    stems = [path.stem] + [path.stem[len(p):] for p in GT_PREFIXES if path.stem.startswith(p)]
    for stem in stems:
        found = index.get(stem, [])
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            problems.bad(str(path), f"several images match it in {folder}: {', '.join(p.name for p in found)}; "
                                    f"keep one", image=True)
            return None
    problems.bad(str(path), f"no image {' or '.join(s + '.*' for s in stems)} in {folder}; "
                            f"pass --images DIR where the images are", image=True)
    return None


def numbered_lines(path: Path, problems: Problems) -> Lines:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror}); check the path and its permissions") from None
    raw = raw.removeprefix(codecs.BOM_UTF8)
    lines = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            problems.bad(f"{path}:{n}", f"not UTF-8 text ({e.reason} at byte {e.start} of the line); save the file as UTF-8")
            continue
        if text.strip():
            lines.append((n, text))
    return lines


def read_icdar2015(source: Source, problems: Problems) -> Iterator[Page]:
    return per_file_pages(source, problems, _icdar2015_file)


def _icdar2015_file(path: Path, lines: Lines, problems: Problems) -> list[Word]:
    words = []
    for n, text in lines:
        # The transcription is everything after the 8th comma: it may hold commas itself.
        fields = text.split(",", QUAD_FIELDS)
        coords = parse_numbers(fields[:QUAD_FIELDS]) if len(fields) >= QUAD_FIELDS else None
        if coords is None:
            problems.bad(f"{path}:{n}", f"{clip(text)!r} is not x1,y1,x2,y2,x3,y3,x4,y4,transcription")
            continue
        label = fields[QUAD_FIELDS].strip() if len(fields) > QUAD_FIELDS else ""
        words.append(Word(pairs(coords), label, label == ILLEGIBLE_TEXT))
    return words


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_SEP = r"(?:\s*,\s*|\s+)"
_BOX_LINE = re.compile(rf"^\s*({_NUM}){_SEP}({_NUM}){_SEP}({_NUM}){_SEP}({_NUM})(?:{_SEP}(.*?))?\s*$")


def read_icdar2013(source: Source, problems: Problems) -> Iterator[Page]:
    return per_file_pages(source, problems, _icdar2013_file)


def _icdar2013_file(path: Path, lines: Lines, problems: Problems) -> list[Word]:
    words = []
    for n, text in lines:
        m = _BOX_LINE.match(text)
        if m is None:
            problems.bad(f"{path}:{n}", f'{clip(text)!r} is not xmin ymin xmax ymax "text" (spaces or commas)')
            continue
        x0, y0, x1, y1 = (float(v) for v in m.group(1, 2, 3, 4))
        if not (x1 > x0 and y1 > y0):
            problems.bad(f"{path}:{n}", f"box {clip(text)!r} is empty: xmax must exceed xmin and ymax exceed ymin")
            continue
        label = _unquote(m.group(5) or "")
        words.append(Word([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], label, label == ILLEGIBLE_TEXT))
    return words


def _unquote(text: str) -> str:
    """"text" -> text, with \\" and \\\\ inside the quotes read as " and \\."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r'\\(["\\])', r"\1", text[1:-1])
    return text

