"""A UFO file as it is written, both ways: its image entries and other top-level members exactly as the file has
them (ufo.py reads a build's words out of them; the commands that write UFO files keep every field), and the
text of a UFO file. convert, split, pseudo and evaluate read and write UFO files through here.
"""
from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from typing import NamedTuple

from east_cache.bounds import MAX_COORDINATE
from east_cache.errors import DataError
from east_cache.ingest import jsonstream, ufo
from east_cache.ingest.files import open_regular
from east_cache.ingest.objects import source_path

# The top-level member east-predict writes beside "images": what made the predictions. Ground truth has none;
# `evaluate` refuses a --gt that has it.
PREDICTED_BY = "predicted_by"
# A predicted word's confidence in [0, 1], a member of its word entry beside "points" that east-predict writes
# and UFO readers ignore (a build reads points, illegibility and tags): `pseudo` keeps words by it.
WORD_SCORE = "score"


MIN_POINTS = 3   # a predicted word is a polygon: at least three vertices (east-predict writes quads)


class PredictedWord(NamedTuple):
    """A predicted word as every command reads it (predicted_word)."""
    points: list[tuple[float, float]]   # its vertices, image px, each finite
    score: float | None                  # its WORD_SCORE in [0, 1], None where it has none


def word_score(word, where: str) -> float | None:
    """A predicted word's WORD_SCORE, None where it has none; a DataError naming `where` (the file, image and word)
    where it is not a finite number in [0, 1] (east-predict's scores are sigmoid outputs)."""
    value = word.get(WORD_SCORE) if isinstance(word, dict) else None
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise DataError(f"{where}: \"{WORD_SCORE}\" must be a finite number in [0, 1], not {value!r}; fix the "
                        f"prediction or delete the field")
    return float(value)


def predicted_word(word, where: str) -> PredictedWord:
    """One word of a predictions file, checked as `evaluate`, `review` and `pseudo` all read it: "points" a list of
    at least MIN_POINTS [x, y] pairs of finite numbers within +-bounds.MAX_COORDINATE px (a quad, or a polygon as
    models other than EAST predict and the build takes), "score" (word_score) finite in [0, 1] where present; anything else is a DataError naming
    `where` (the file, the image and the word)."""
    points = ufo.parse_points(word.get("points")) if isinstance(word, dict) else None
    if points is None or len(points) < MIN_POINTS:
        raise DataError(f"{where}: \"points\" must be a list of at least {MIN_POINTS} [x, y] pairs of finite "
                        f"numbers; fix the prediction")
    far = next((v for p in points for v in p if abs(v) > MAX_COORDINATE), None)
    if far is not None:   # areas of such quads overflow: the word would vanish from a fusion without a word
        raise DataError(f"{where}: \"points\" holds {far:g}, beyond the {MAX_COORDINATE:g} px a prediction's "
                        f"coordinates may reach; fix the prediction")
    return PredictedWord(points, word_score(word, where))


def read_entries(json_path, rest: dict | None = None) -> Iterator[tuple[str, dict]]:
    """(name, entry) of every image of a UFO file, in file order, each entry as written and each name once; the
    file's other top-level members go into rest, when given, as they are met. A file the build cannot read fails
    with the build's own error (ufo.read_images)."""
    json_path, seen = source_path(json_path), set()
    for name, entry in _members(json_path, rest):
        if name in seen:
            raise DataError(f"{json_path}: image {name!r} has two entries; merge them into one or delete one")
        seen.add(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("words") or {}, dict):
            raise DataError(f'{json_path}: image {name!r}: expected {{"words": {{"1": {{"points": ...}}, ...}}}}; '
                            f"fix the entry")
        yield name, entry


def _members(json_path, rest: dict | None):
    try:
        with io.TextIOWrapper(open_regular(json_path), encoding="utf-8-sig") as f:
            yield from jsonstream.members(f, "images", rest=rest)
    except (ValueError, OSError) as e:   # invalid JSON, not UTF-8, no "images", not a regular file, unreadable
        for _ in ufo.read_images(json_path):   # raises the build's own error for this fault
            pass
        raise e


def ufo_text(entries: dict, top: dict | None = None) -> str:
    """{top members..., "images": {...}}, top's members first (a reader streaming the file meets them before the
    images), one line per image header and per word: readable, diffable, and a tenth of what indent= makes of
    point lists. ASCII escapes keep the file free of the locale's encoding."""
    return file_text([entry_text(name, entry) for name, entry in entries.items()], top)


def entry_text(name: str, entry: dict) -> str:
    """One image's member of a UFO file's "images" as ufo_text writes it (a file written several times over, as
    the folds of a split are, joins each image's text made once)."""
    words = entry.get("words")
    if not isinstance(words, dict):   # an entry without words: as it is
        return f"  {_one(name)}: {_one(entry)}"
    head = _one({k: v for k, v in entry.items() if k != "words"})[:-1]
    head = "{" if head == "{" else head + ", "
    lines = ",\n".join(f"    {_one(k)}: {_one(w)}" for k, w in words.items())
    return f'  {_one(name)}: {head}"words": {{' + (f"\n{lines}\n  }}}}" if lines else "}}")


def file_text(images: list[str], top: dict | None = None) -> str:
    """A UFO file of images' entry_text and the top-level members top, written first."""
    members = "".join(f"{_one(k)}: {_one(v)},\n" for k, v in (top or {}).items())
    return "{" + members + '"images": {\n' + ",\n".join(images) + "\n}}\n"


def _one(value) -> str:
    return json.dumps(value, separators=(", ", ": "))
