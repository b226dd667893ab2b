"""What every converter shares: a page and its words, point order, frame size, safe names, bad input.

Readers yield Pages with words as the source gives them; run.py applies these rules to every format
alike, so that illegible words, point order and image sizes come out the same whatever the source.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from PIL import Image

from east_cache.errors import DataError
from east_cache.ingest.imageio import IMAGE_EXTENSIONS, oriented_size

# The build's own orientation test, so that "clockwise" means the same on both sides.
from east_cache.ingest.ufo import signed_area

ILLEGIBLE_TEXT = "###"     # the ICDAR convention for "do not care", used by most formats
SHOW_BAD = 5               # bad lines / images named in the summary; the rest are counted


@dataclass
class Word:
    points: list[tuple[float, float]]   # polygon vertices in source order, image pixels (y down)
    text: str                           # transcription; "" when the source has none
    illegible: bool                     # the source marks it illegible / ignore / don't care


@dataclass
class Page:
    image: Path                         # the source image file
    where: str                          # the annotation it comes from, for messages
    words: list[Word]
    size: tuple[int, int] | None = None  # (width, height) the source states, or None


@dataclass
class Source:
    path: Path                          # SRC as given on the command line
    images: Path | None = None          # --images: where image names are looked up (default per format)
    subset: str | None = None           # --subset: which set of a multi-set file to keep (COCO-Text "set")


@dataclass
class Summary:
    images: int = 0                     # images written
    words: int = 0                      # words written, legible and illegible
    illegible: int = 0
    fixed: int = 0                      # counter-clockwise polygons written clockwise
    polygons: int = 0                   # words with more than 4 points (the build's polygon rules apply)
    stored_layout: int = 0              # stated sizes that match the stored pixels, not the EXIF-rotated ones
    in_place: bool = False              # --images is ROOT/images itself: the images stayed as they are
    bad_lines: list[tuple[str, str]] = field(default_factory=list)    # (file:line or file, why), --skip-bad
    bad_images: list[tuple[str, str]] = field(default_factory=list)   # (annotation or image, why), --skip-bad


class Problems:
    """A bad line or image stops the conversion, or with --skip-bad is recorded and left out."""

    def __init__(self, summary: Summary, skip_bad: bool):
        self.summary, self.skip_bad = summary, skip_bad

    def bad(self, where: str, why: str, image: bool = False) -> None:
        if not self.skip_bad:
            what = "leave the image out" if image else "skip it"
            raise DataError(f"{where}: {why}; fix it, or pass --skip-bad to {what} and go on")
        (self.summary.bad_images if image else self.summary.bad_lines).append((where, why))


def orient(points: list, trusted_start: bool) -> tuple[list, bool]:
    """(points clockwise on screen, whether they were counter-clockwise). A counter-clockwise polygon
    is reversed whole: sources that run counter-clockwise (WildReceipt) count in a y-up frame, where
    their first point is the bottom-left, and the reversal starts the top line left to right again.
    Quads then start at their top-left unless the source's clockwise order is trusted to carry the
    reading direction (ICDAR 2015's vertical words start where their reading starts)."""
    ccw = signed_area(points) < 0
    if ccw:
        points = points[::-1]
    if len(points) == 4 and (ccw or not trusted_start):
        points = start_top_left(points)
    return points, ccw


def start_top_left(quad: list) -> list:
    """The clockwise quad rotated to start at the vertex whose next edge runs most nearly left to
    right: the top-left corner of text within 45 degrees of horizontal."""
    def rightward(i: int) -> float:
        (x0, y0), (x1, y1) = quad[i], quad[(i + 1) % 4]
        length = math.hypot(x1 - x0, y1 - y0)
        return (x1 - x0) / length if length > 0 else -math.inf
    start = max(range(4), key=rightward)
    return quad[start:] + quad[:start]


def parse_numbers(fields) -> list[float] | None:
    """Finite numbers from text fields, or None when one is not."""
    try:
        values = [float(f) for f in fields]
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def json_numbers(values) -> list[float] | None:
    """Finite numbers from a JSON list (no strings, booleans or nulls), or None."""
    if not isinstance(values, list) or not all(type(v) in (int, float) for v in values):
        return None
    try:
        floats = [float(v) for v in values]
    except OverflowError:   # an integer too large for a float
        return None
    return floats if all(math.isfinite(v) for v in floats) else None


def pairs(flat: list[float]) -> list[tuple[float, float]]:
    return list(zip(flat[0::2], flat[1::2]))


def polygon_problem(points: list) -> str | None:
    """Why these points cannot be a word, or None."""
    if len(points) < 3:
        return f"{len(points)} point(s); a word needs at least 3"
    return None


def relative_name(name) -> PurePosixPath:
    """A source's image path as a relative path that cannot leave the folder it is relative to;
    ValueError saying why not."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"image file name {name!r} is missing or not text")
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"image path {name!r} leaves the image folder; only paths relative to it are read "
                         f"(pass --images DIR and write the names relative to it)")
    return path


def load_json(path: Path):
    """A whole JSON file (UTF-8, with or without a byte-order mark); errors name the line and column."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}; fix the file there") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror}); check the path and its permissions") from None


def image_index(folder: Path) -> dict[str, list[Path]]:
    """Image files of a folder by stem (not recursive); a stem may have several extensions."""
    index: dict[str, list[Path]] = {}
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file():
            index.setdefault(p.stem, []).append(p)
    return index


def frame_size(path: Path, stated: tuple[int, int] | None, where: str, summary: Summary) -> tuple[int, int]:
    """(img_w, img_h) for the UFO entry, with the build's frame rule: the EXIF-oriented header size,
    or a stated size when it is that or the stored layout's size. Any other stated size is an error."""
    w, h, _ = oriented_size(path)
    if stated is None or tuple(stated) == (w, h):
        return w, h
    with Image.open(path) as im:   # readable: oriented_size just opened it
        stored = im.size
    if tuple(stated) == stored:
        summary.stored_layout += 1
        return stored
    shown = f"{w}x{h}" if stored == (w, h) else f"{w}x{h} after its EXIF orientation, {stored[0]}x{stored[1]} stored"
    raise DataError(f"{where}: the source says image {path.name} is {stated[0]}x{stated[1]}, but the file is {shown}; "
                    f"the points may not match the pixels: fix the stated size or the image, "
                    f"or pass --skip-bad to leave it out")


def stated_size(w, h) -> tuple[int, int] | None:
    """The (width, height) a source states, None when it states none; ValueError when it is not
    two positive whole numbers."""
    if w is None and h is None:
        return None
    values = json_numbers([w, h])
    if values is None or not all(v > 0 and v.is_integer() for v in values):
        raise ValueError(f"stated image size {w!r} x {h!r} is not two positive whole numbers")
    return int(values[0]), int(values[1])


def image_at(folder: Path, name) -> Path:
    """The image file a source names relative to `folder`; ValueError when it is not there."""
    path = folder / relative_name(name)
    if not path.is_file():
        raise ValueError(f"image file not found at {path}; pass --images DIR where the images are")
    return path


def clip(text: str, keep: int = 80) -> str:
    """A source line shortened for a message."""
    return text if len(text) <= keep else text[:keep] + "..."
