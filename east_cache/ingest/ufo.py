"""UFO JSON annotations in: one ImageRecord per image, every word kept as a positive or a don't-care."""
from __future__ import annotations

import hashlib
import io
import json
import math
import shlex
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError, cache_command
from east_cache.inputs import Input
from east_cache.ingest import jsonstream
from east_cache.ingest.files import NotAllowed, contained, open_regular, regular_stat
from east_cache.ingest.objects import listed, source_path
from east_cache.ingest.imageio import oriented_size
from east_cache.ingest.lookalike import looks_like

# Why a word is (not) a positive. Everything but CARE becomes a don't-care region (ROI = 0).
CARE = 0            # legible quad: drawn in score and geometry
ILLEGIBLE = 1       # "illegibility": true
IGNORE_TAG = 2      # carries one of BuildConfig.ignore_tags
NOT_QUAD = 3        # polygon with other than 4 points (and fit_polygons is off)
SMALL = 4           # area under BuildConfig.min_area
REASONS = {CARE: "legible", ILLEGIBLE: "illegible", IGNORE_TAG: "ignore tag", NOT_QUAD: "not a quad", SMALL: "small"}

# A word with a point farther outside its frame than this many frame widths (heights) is not a word of this
# image: a typo or a unit mix-up (1e30 would otherwise count as a legible word covering every crop).
FAR_OUTSIDE = 1.0
MAX_FRAME_SIDE = 1 << 17   # px; an img_w or img_h above this is no page or photo, but a mistake


@dataclass(frozen=True)
class ImageRecord:
    """One source image and its words, in the annotation frame (img_w x img_h pixels)."""
    name: str                 # key in the UFO "images" object (file name)
    path: str                 # image file resolved on disk
    source: str               # UFO JSON file it came from
    width: int                # img_w: width of the frame the points refer to
    height: int               # img_h
    points: np.ndarray        # float32 (P, 2): all words' vertices, concatenated
    offsets: np.ndarray       # int64 (N + 1): word k is points[offsets[k]:offsets[k + 1]]
    reason: np.ndarray        # uint8 (N,): CARE or why the word is a don't-care region
    fingerprint: str          # hash of the annotation entry's canonical JSON

    @property
    def n_words(self) -> int:
        return len(self.reason)



def find_split(data_dir, split: str, data_flag: str = "--data", split_flag: str = "--split") -> tuple[Path, Path]:
    """(UFO JSON, image folder) of a split: DATA/ufo/{split}.json and DATA/images/ or else DATA/img/{split}/. DATA
    may be a URL (objects.py): it is listed now, and its files are ObjectPaths. The flags that gave DATA and the
    split, for the error when there is no such split (missing_split)."""
    data_dir = listed(source_path(data_dir))
    if not split or "/" in split or "\0" in split or split.startswith("."):
        raise DataError(f"--split {split!r}: a split is a plain name such as train or val (it names ufo/SPLIT.json)")
    json_path = data_dir / "ufo" / f"{split}.json"
    try:
        regular_stat(json_path)
    except NotAllowed as e:
        raise DataError(f"{json_path}: {e}; the UFO file must be a regular file") from None
    except OSError:
        raise DataError(missing_split(data_dir, split, json_path, data_flag, split_flag)) from None
    tried = (data_dir / "images", data_dir / "img" / split)
    for folder in tried:
        if folder.is_dir():
            return json_path, folder
    raise DataError(f"{data_dir}: no image folder for split {split!r}; tried {tried[0]} and {tried[1]}")


def dataset_inputs(root, flag: str) -> list[Input]:
    """What a command reading the data set root at `flag` must never write over (inputs.refuse_overwrite): the root
    itself, its annotations (ufo/) and its image folders (images/, img/). Nothing for a URL."""
    if root is None or "://" in str(root):
        return []
    root = Path(root)
    return [Input(f"the data set {flag}", root), Input(f"the annotations of {flag}", root / "ufo", tree=True),
            *(Input(f"the images of {flag}", root / d, tree=True) for d in ("images", "img"))]


def missing_split(data_dir, split: str, json_path, data_flag: str, split_flag: str) -> str:
    """Why DATA has no ufo/{split}.json, in one line: the splits it holds; or, where it holds none, the format of
    convert/ it looks like and the command that makes a UFO root of it (a local folder only)."""
    line = (f"{json_path}: UFO file not found; pass the dataset root that holds ufo/{split}.json, or choose another "
            f"{split_flag}")
    if not isinstance(data_dir, Path):
        return line
    held = sorted(p.stem for p in (data_dir / "ufo").glob("*.json")) if (data_dir / "ufo").is_dir() else []
    if held:
        return f"{line}; the splits there: {', '.join(held)}"
    other = looks_like(data_dir, split)
    if other is None:
        return line
    out = data_dir.with_name(data_dir.name + "-ufo")
    return (f"{data_dir}: not a UFO dataset root (no ufo/{split}.json); it looks like {other.title}: convert it with "
            f"`{other.command(out, split)}`, then pass {data_flag} {shlex.quote(str(out))}")


@dataclass
class IngestSummary:
    """What ingest kept, dropped and skipped. words = kept words = legible + ... + small."""
    images: int = 0                 # images kept
    words: int = 0                  # words kept, as positives or don't-care regions
    legible: int = 0                # one count per reason code
    illegible: int = 0
    ignore_tag: int = 0
    not_quad: int = 0
    small: int = 0
    fitted: int = 0                 # 5+ point polygons replaced by their minimum-area rectangle
    dropped_degenerate: int = 0     # area under drop_area, or fewer than 3 points
    dropped_invalid: int = 0        # NaN / inf / non-numeric / malformed points
    dropped_far: int = 0            # a point more than FAR_OUTSIDE frame sizes outside the frame
    exif_applied: int = 0           # ingest: frame sizes read from an EXIF-transposed header; a build
                                    # replaces it with the images whose decode applied the orientation
    bad: list[tuple[str, str]] = field(default_factory=list)   # (image name, reason), skipped with skip_bad
    warnings: list[str] = field(default_factory=list)

    def count(self, reason: int) -> None:
        self.words += 1
        name = _REASON_FIELDS[reason]
        setattr(self, name, getattr(self, name) + 1)

    def merge(self, other: "IngestSummary") -> "IngestSummary":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bad"] = [list(b) for b in self.bad]
        return d


_REASON_FIELDS = {CARE: "legible", ILLEGIBLE: "illegible", IGNORE_TAG: "ignore_tag", NOT_QUAD: "not_quad", SMALL: "small"}


def load_splits(data_dirs: list, split: str, cfg: BuildConfig, skip_bad: bool = False) -> tuple[list[ImageRecord], IngestSummary]:
    """Every data dir's split, merged and sorted by image name. Names must be unique across dirs."""
    records, total, seen = [], IngestSummary(), {}
    for data_dir in data_dirs:
        json_path, image_dir = find_split(data_dir, split)
        recs, summary = load_ufo(json_path, image_dir, cfg, skip_bad)
        for name in [r.name for r in recs] + [b[0] for b in summary.bad]:
            if name in seen:
                raise DataError(f"image {name!r} appears in both {seen[name]} and {json_path}; image names must be "
                                f"unique across data dirs: convert one set again with `{cache_command('convert')} "
                                f"--prefix NAME_ ...` (into its own --out), rename the file in one of them, "
                                f"or drop one data dir")
            seen[name] = json_path
        records += recs
        total.merge(summary)
    records.sort(key=lambda r: r.name)
    return records, total


def load_ufo(json_path, image_dir, cfg: BuildConfig, skip_bad: bool = False) -> tuple[list[ImageRecord], IngestSummary]:
    """One ImageRecord per image of a UFO file, sorted by name. Reads no pixels: a missing file is
    found with os.stat, and image headers are read only for entries without img_w/img_h. The file is
    decoded one image entry at a time, so what stays in memory is the compact records."""
    json_path, image_dir = source_path(json_path), source_path(image_dir)
    summary, records, seen = IngestSummary(), [], set()
    for name, entry in read_images(json_path):
        if name in seen:
            raise DataError(f"{json_path}: image {name!r} has two entries in the \"images\" object; "
                            f"merge them into one or delete one")
        seen.add(name)
        try:
            records.append(_image(name, entry, json_path, image_dir, cfg, summary))
        except DataError as e:
            if not skip_bad:
                raise
            summary.bad.append((name, str(e)))
            continue
        summary.images += 1
    records.sort(key=lambda r: r.name)
    summary.bad.sort()
    return records, summary


def read_images(json_path: Path) -> Iterator[tuple[str, object]]:
    """(image name, entry) of each member of the file's "images" object, in file order."""
    try:
        with io.TextIOWrapper(open_regular(json_path), encoding="utf-8-sig") as f:
            yield from jsonstream.members(f, "images")
    except jsonstream.JSONError as e:
        raise DataError(f"{json_path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}; fix the file there") from None
    except jsonstream.NotAnObject:
        raise DataError(f'{json_path}: no "images" object at the top level; a UFO file reads '
                        f'{{"images": {{"file_name": {{"img_w": ..., "img_h": ..., "words": {{...}}}}}}}}') from None
    except UnicodeDecodeError:
        raise DataError(f"{json_path}: not UTF-8 text ({_decode_error(json_path)}); save it as UTF-8") from None
    except NotAllowed as e:
        raise DataError(f"{json_path}: {e}; the UFO file must be a regular file") from None
    except OSError as e:
        raise DataError(f"{json_path}: cannot read the file ({e.strerror}); check the path and its permissions") from None


def _decode_error(json_path: Path) -> str:
    """Where the file stops being UTF-8, in bytes from its start (a piecewise read knows only the piece)."""
    try:
        json_path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return f"{e.reason} at byte {e.start}"
    return "a decoding error"


def _image(name: str, entry, json_path: Path, image_dir: Path, cfg: BuildConfig, summary: IngestSummary) -> ImageRecord:
    where = f"{json_path}: image {name!r}"
    path = _image_file(image_dir, name, where)
    if not isinstance(entry, dict):
        raise DataError(f"{where}: the entry is not an object; fix it, or pass --skip-bad to leave the image out")
    words = entry.get("words") or {}
    if not isinstance(words, dict):
        raise DataError(f'{where}: "words" is not an object keyed by word id; fix it, or pass --skip-bad')
    _refuse_repeated_keys(entry, words, where)
    width, height = _frame_size(entry, path, where, summary)
    # Word order follows the ids, not the JSON key order, so the record depends only on what the
    # fingerprint (sorted keys) sees.
    kept = [parse_word(words[k], k, where, cfg, summary, (width, height)) for k in sorted(words, key=word_id_key)]
    kept = [k for k in kept if k is not None]
    points = np.array([xy for p, _ in kept for xy in p], np.float32).reshape(-1, 2)
    return ImageRecord(name=name, path=str(path), source=str(json_path), width=width, height=height,
                       points=points,
                       offsets=np.cumsum([0] + [len(p) for p, _ in kept]).astype(np.int64),
                       reason=np.array([r for _, r in kept], np.uint8), fingerprint=_fingerprint(entry, where))


def _image_file(image_dir: Path, name: str, where: str) -> Path:
    """The image's path, after the name is found to stay in the image folder and the file to be a regular one
    (files.py says why and how links are treated); nothing is opened."""
    try:
        path = contained(image_dir, name)
        regular_stat(path)
    except NotAllowed as e:
        raise DataError(f"{where}: refused: {e}; fix the name in the UFO file, or pass --skip-bad to leave the "
                        f"image out") from None
    except OSError:
        raise DataError(f"{where}: image file not found at {str(path)!r}; fix the image folder or the file name, "
                        f"or pass --skip-bad to leave the image out") from None
    return path


def _refuse_repeated_keys(entry: dict, words: dict, where: str) -> None:
    """JSON decoders keep the last of two equal keys: two words with one id would be merged without a word."""
    twice = jsonstream.repeated_keys(words)
    if twice:
        raise DataError(f'{where}: word id(s) {", ".join(map(repr, twice))} appear more than once in "words"; '
                        f"give each word its own id, or pass --skip-bad to leave the image out")
    for owner, obj in [("the entry", entry)] + [(f"word {k!r}", w) for k, w in words.items()]:
        twice = jsonstream.repeated_keys(obj)
        if twice:
            raise DataError(f"{where}: {owner} names key(s) {', '.join(map(repr, twice))} more than once; keep one "
                            f"of each, or pass --skip-bad to leave the image out")


def _frame_size(entry: dict, path: Path, where: str, summary: IngestSummary) -> tuple[int, int]:
    w, h = entry.get("img_w"), entry.get("img_h")
    if w is None or h is None:
        w, h, transposed = oriented_size(path)
        summary.exif_applied += transposed
        summary.warnings.append(f"{where}: no img_w/img_h; using the image header's size {w}x{h}")
        return w, h
    if not (positive_int(w) and positive_int(h)) or max(w, h) > MAX_FRAME_SIDE:
        raise DataError(f"{where}: img_w/img_h ({w!r}, {h!r}) must be positive integers up to {MAX_FRAME_SIDE}; "
                        f"fix them, or delete both to read the size from the image")
    return int(w), int(h)


def positive_int(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v > 0 and v == int(v)


def word_id_key(word_id: str):
    """Numeric ids in numeric order ("2" before "10"), then the others."""
    numeric = word_id.isascii() and word_id.isdigit()
    return (0, int(word_id), word_id) if numeric else (1, 0, word_id)


def _fingerprint(entry: dict, where: str) -> str:
    try:
        blob = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:   # decodable, but too deep to encode again from this depth of the stack
        raise DataError(f"{where}: the entry nests arrays or objects hundreds of levels deep; a UFO entry needs 5. "
                        f"Fix it, or pass --skip-bad to leave the image out") from None
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def parse_word(word, word_id: str, where: str, cfg: BuildConfig, summary: IngestSummary,
          frame: tuple[int, int] | None = None):
    """(points [(x, y), ...] clockwise, reason) of one UFO word, or None when the word is dropped. Given its
    image's frame (w, h), a word with a point far outside it is dropped too."""
    points = parse_points(word.get("points")) if isinstance(word, dict) else None
    if points is None:
        summary.dropped_invalid += 1
        summary.warnings.append(f"{where}, word {word_id!r}: points missing, malformed, non-numeric or not finite; "
                                f"word dropped")
        return None
    if frame is not None and _far_outside(points, *frame):
        summary.dropped_far += 1
        summary.warnings.append(f"{where}, word {word_id!r}: a point lies more than {FAR_OUTSIDE:g} frame size(s) "
                                f"outside the {frame[0]}x{frame[1]} frame; word dropped")
        return None
    signed = signed_area(points)
    if len(points) < 3 or abs(signed) < cfg.drop_area:
        summary.dropped_degenerate += 1
        return None
    if signed < 0:   # counter-clockwise on screen: reverse, keeping the first vertex first
        points = points[:1] + points[:0:-1]
    reason = _reason(word, len(points), abs(signed), cfg)
    if reason == NOT_QUAD and cfg.fit_polygons and len(points) >= 5:
        points, reason = _fit_quad(points), (SMALL if abs(signed) < cfg.min_area else CARE)
        summary.fitted += 1
    summary.count(reason)
    return points, reason


def _far_outside(points: list, w: int, h: int) -> bool:
    return any(not (-FAR_OUTSIDE * w <= x <= (1 + FAR_OUTSIDE) * w and -FAR_OUTSIDE * h <= y <= (1 + FAR_OUTSIDE) * h)
               for x, y in points)


def _reason(word: dict, n_points: int, area: float, cfg: BuildConfig) -> int:
    """The first rule that applies, in the order ILLEGIBLE, IGNORE_TAG, NOT_QUAD, SMALL."""
    if _flag(word.get("illegibility")):
        return ILLEGIBLE
    if any(t in cfg.ignore_tags for t in word_tags(word)):
        return IGNORE_TAG
    if n_points != 4:
        return NOT_QUAD
    return SMALL if area < cfg.min_area else CARE


def word_tags(word: dict) -> tuple[str, ...]:
    """A word's "tags": a list of strings, or one string; anything else is no tag."""
    tags = word.get("tags")
    tags = (tags,) if isinstance(tags, str) else tags if isinstance(tags, list) else ()
    return tuple(t for t in tags if isinstance(t, str))


def _flag(v) -> bool:
    return v.strip().lower() in ("true", "1", "yes") if isinstance(v, str) else bool(v)


def parse_points(raw) -> list[tuple[float, float]] | None:
    """[(x, y), ...] of a UFO points list, or None unless every point is a pair of finite numbers."""
    if not isinstance(raw, list):
        return None
    try:   # type() excludes strings, null and booleans; unpacking fails on ragged points
        points = [(float(x), float(y)) for x, y in raw
                  if type(x) in _NUMBER and type(y) in _NUMBER and math.isfinite(x) and math.isfinite(y)]
    except (TypeError, ValueError, OverflowError):   # OverflowError: an int too large for a float
        return None
    return points if len(points) == len(raw) else None


_NUMBER = (int, float)


def signed_area(points: list) -> float:
    """Shoelace area; positive when the polygon runs clockwise on screen (image y axis points down)."""
    return 0.5 * sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(points, points[1:] + points[:1]))


def _fit_quad(polygon: list) -> list[tuple[float, float]]:
    """Minimum-area rectangle of a polygon, clockwise from the corner nearest its first vertex."""
    import cv2  # lazy: only fit_polygons needs it, and ingest should start fast
    box = cv2.boxPoints(cv2.minAreaRect(np.array(polygon, np.float32))).astype(np.float64)
    if signed_area(box.tolist()) < 0:
        box = box[::-1]
    box = np.roll(box, -int(np.argmin(((box - polygon[0]) ** 2).sum(axis=1))), axis=0)
    return [tuple(p) for p in box.tolist()]
