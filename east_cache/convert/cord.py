"""CORD (receipts): one JSON per image, valid_line -> words -> quad {x1, y1, ..., x4, y4}.

SRC is a split folder holding json/ and image/ (CORD's layout), or the json folder itself; images are
looked up by the JSON file's stem in --images (default: image/ beside json/). `is_key` marks a key
word for parsing, not legibility, and is not used; `dontcare` regions become illegible words.
"""
from __future__ import annotations

from collections.abc import Iterator

from east_cache.convert.rules import (
    Page,
    Problems,
    Source,
    Word,
    image_index,
    json_numbers,
    load_json,
    pairs,
    stated_size,
)
from east_cache.errors import DataError

JSON_DIR, IMAGE_DIR = "json", "image"
QUAD_KEYS = ("x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4")   # top-left first, clockwise


def read_cord(source: Source, problems: Problems) -> Iterator[Page]:
    json_dir = source.path / JSON_DIR if (source.path / JSON_DIR).is_dir() else source.path
    files = sorted(json_dir.glob("*.json")) if json_dir.is_dir() else []
    if not files:
        raise DataError(f"{source.path}: no CORD json files (in {json_dir}); give the split folder that holds "
                        f"{JSON_DIR}/ and {IMAGE_DIR}/")
    folder = source.images or json_dir.parent / IMAGE_DIR
    if not folder.is_dir():
        raise DataError(f"{folder}: no image folder; pass --images DIR where the receipt images are")
    index = image_index(folder)
    for path in files:
        found = index.get(path.stem, [])
        try:
            if len(found) != 1:
                raise ValueError(f"{len(found)} images named {path.stem}.* in {folder}; one is needed")
            data = load_json(path)
            if not isinstance(data, dict):
                raise TypeError("the file is not a JSON object")
            meta = data.get("meta")
            size = meta.get("image_size") if isinstance(meta, dict) else None
            size = stated_size(size.get("width"), size.get("height")) if isinstance(size, dict) else None
        except (TypeError, ValueError) as e:   # DataError from load_json included: it names the file itself
            problems.bad(str(path), str(e).removeprefix(f"{path}: "), image=True)
            continue
        yield Page(found[0], str(path), _words(data, str(path), problems), size)


def _words(data: dict, where: str, problems: Problems) -> list[Word]:
    words = []
    for key, illegible in (("valid_line", False), ("dontcare", True)):
        lines = data.get(key) or []
        for i, line in enumerate(lines if isinstance(lines, list) else [lines]):
            # A dontcare region may be a line with words, like valid_line, or a bare quad.
            items = line.get("words") if isinstance(line, dict) and "words" in line else [line]
            for k, word in enumerate(items if isinstance(items, list) else [items]):
                w = _word(word, illegible)
                if w is None:
                    problems.bad(f"{where}: {key}[{i}].words[{k}]", f"needs \"quad\": {{{', '.join(QUAD_KEYS)}}} "
                                                                     f"with a number each")
                else:
                    words.append(w)
    return words


def _word(word, illegible: bool) -> Word | None:
    quad = word.get("quad") if isinstance(word, dict) else None
    values = json_numbers([quad.get(k) for k in QUAD_KEYS]) if isinstance(quad, dict) else None
    if values is None:
        return None
    text = word.get("text")
    return Word(pairs(values), text if isinstance(text, str) else "", illegible)
