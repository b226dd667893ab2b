"""The MMOCR family: MMOCR's text-detection JSON, and WildReceipt's JSON lines (distributed with MMOCR).

Image paths in both are relative to the annotation file's folder (MMOCR's data_root), or to --images.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

from east_cache.convert.icdar import numbered_lines
from east_cache.convert.rules import (
    ILLEGIBLE_TEXT,
    Page,
    Problems,
    Source,
    Word,
    clip,
    image_at,
    json_numbers,
    load_json,
    pairs,
    polygon_problem,
    stated_size,
)
from east_cache.errors import DataError

BBOX_NUMBERS = 4      # MMOCR bbox: x1, y1, x2, y2
QUAD_NUMBERS = 8      # WildReceipt box: x1, y1, ..., x4, y4


def read_mmocr(source: Source, problems: Problems) -> Iterator[Page]:
    """{"metainfo": {...}, "data_list": [{"img_path", "height", "width", "instances": [{"polygon",
    "bbox", "ignore", "text"?}]}]}: a polygon when there is one, else the bbox."""
    data = load_json(source.path)
    items = data.get("data_list") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise DataError(f'{source.path}: no "data_list" list at the top level; an MMOCR text-detection file reads '
                        f'{{"metainfo": {{...}}, "data_list": [{{"img_path": ..., "instances": [...]}}]}}')
    folder = source.images or source.path.parent
    for i, item in enumerate(items):
        where = f"{source.path}: data_list[{i}]"
        try:
            image, size, instances = _entry(item, folder, "img_path", "instances")
        except (TypeError, ValueError) as e:
            problems.bad(where, str(e), image=True)
            continue
        where = f"{where} ({item['img_path']})"
        words = [_mmocr_word(inst, f"{where}, instance {k}", problems) for k, inst in enumerate(instances)]
        yield Page(image, where, [w for w in words if w is not None], size)


def _entry(item, folder, name_key: str, words_key: str):
    """(image path, stated size, list of word objects) of one image entry of an MMOCR-style file (its image under
    name_key, width, height, its words under words_key); TypeError or ValueError names what is wrong."""
    if not isinstance(item, dict):
        raise TypeError("the entry is not a JSON object")
    words = item.get(words_key) or []
    if not isinstance(words, list):
        raise TypeError(f'"{words_key}" is not a list')
    return image_at(folder, item.get(name_key)), stated_size(item.get("width"), item.get("height")), words


def _mmocr_word(inst, where: str, problems: Problems) -> Word | None:
    if not isinstance(inst, dict):
        problems.bad(where, "the instance is not an object")
        return None
    if inst.get("polygon") is not None:
        flat = json_numbers(inst["polygon"])
        points = pairs(flat) if flat is not None and len(flat) % 2 == 0 else None
    else:
        box = json_numbers(inst.get("bbox"))
        points = None
        if box is not None and len(box) == BBOX_NUMBERS:
            x0, y0, x1, y1 = box
            points = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    if points is None:
        problems.bad(where, 'needs "polygon" [x1, y1, x2, y2, ...] (an even count of numbers) or "bbox" [x1, y1, x2, y2]')
        return None
    if why := polygon_problem(points):
        problems.bad(where, why)
        return None
    text = inst.get("text")
    return Word(points, text if isinstance(text, str) else "", bool(inst.get("ignore", False)))


def read_wildreceipt(source: Source, problems: Problems) -> Iterator[Page]:
    """One JSON object per line: {"file_name", "height", "width", "annotations": [{"box": [8 numbers],
    "text", "label"}]}. Text "###" is illegible; "label" (the key-information class) is not used."""
    folder = source.images or source.path.parent
    for n, line in numbered_lines(source.path, problems):
        where = f"{source.path}:{n}"
        try:
            item = json.loads(line)
            image, size, anns = _entry(item, folder, "file_name", "annotations")
        except json.JSONDecodeError as e:
            problems.bad(where, f"invalid JSON at column {e.colno}: {e.msg} in {clip(line)!r}")
            continue
        except (TypeError, ValueError) as e:
            problems.bad(where, str(e), image=True)
            continue
        words = [_wildreceipt_word(a, f"{where}, annotation {k}", problems) for k, a in enumerate(anns)]
        yield Page(image, where, [w for w in words if w is not None], size)


def _wildreceipt_word(ann, where: str, problems: Problems) -> Word | None:
    box = json_numbers(ann.get("box")) if isinstance(ann, dict) else None
    if box is None or len(box) != QUAD_NUMBERS:
        problems.bad(where, 'needs "box": [x1, y1, x2, y2, x3, y3, x4, y4]')
        return None
    text = ann.get("text")
    text = text if isinstance(text, str) else ""
    return Word(pairs(box), text, text == ILLEGIBLE_TEXT)
