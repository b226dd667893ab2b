"""COCO-Text: one JSON with "imgs" and "anns" (bbox [x, y, w, h] and/or mask [x1, y1, ...], legibility).

The file holds several sets (each image's "set": train, val); --subset picks one and defaults to the
output --split, "all" keeps every image. Images without text are kept, as pages without words.
"""
from __future__ import annotations

from collections.abc import Iterator

from east_cache.convert.rules import (
    Page,
    Problems,
    Source,
    Word,
    image_at,
    json_numbers,
    load_json,
    pairs,
    polygon_problem,
    stated_size,
)
from east_cache.errors import DataError

ALL_SETS = "all"
ILLEGIBLE = "illegible"   # COCO-Text legibility values: "legible", "illegible"
BBOX_NUMBERS = 4          # x, y, width, height


def read_cocotext(source: Source, problems: Problems) -> Iterator[Page]:
    data = load_json(source.path)
    imgs, anns = (_records(data.get(k)) if isinstance(data, dict) else None for k in ("imgs", "anns"))
    if imgs is None or anns is None:
        raise DataError(f'{source.path}: needs "imgs" and "anns" at the top level, as COCO-Text does '
                        f'({{"imgs": {{"ID": {{"file_name", "width", "height", "set"}}}}, "anns": {{...}}}})')
    known = set(imgs)
    imgs = _keep_subset(imgs, source)
    by_image = _words_by_image(anns, imgs, known, str(source.path), problems)
    folder = source.images or source.path.parent
    for key, img in imgs.items():
        where = f"{source.path}: imgs[{key}]"
        try:
            if not isinstance(img, dict):
                raise TypeError("the entry is not an object")
            image = image_at(folder, img.get("file_name"))
            size = stated_size(img.get("width"), img.get("height"))
        except (TypeError, ValueError) as e:
            problems.bad(where, str(e), image=True)
            continue
        yield Page(image, f"{where} ({img['file_name']})", by_image.get(key, []), size)


def _records(value) -> dict | None:
    """COCO-Text keeps records in objects keyed by id; a list of records with "id" is read the same."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, list):
        return {str(v.get("id") if isinstance(v, dict) else i): v for i, v in enumerate(value)}
    return None


def _keep_subset(imgs: dict, source: Source) -> dict:
    wanted = source.subset
    if wanted == ALL_SETS:
        return imgs
    sets = {img.get("set") for img in imgs.values() if isinstance(img, dict)} - {None}
    if not sets:
        return imgs
    kept = {k: img for k, img in imgs.items() if isinstance(img, dict) and img.get("set") == wanted}
    if not kept:
        raise DataError(f"{source.path}: no image has \"set\": {wanted!r} (the file has {', '.join(sorted(map(str, sets)))}); "
                        f"pass --subset NAME, or --subset {ALL_SETS}")
    return kept


def _words_by_image(anns: dict, imgs: dict, known: set, where: str, problems: Problems) -> dict[str, list[Word]]:
    words: dict[str, list[Word]] = {}
    for key, ann in anns.items():
        if not isinstance(ann, dict):
            problems.bad(f"{where}: anns[{key}]", "the annotation is not an object")
            continue
        image = str(ann.get("image_id"))
        if image not in known:
            problems.bad(f"{where}: anns[{key}]", f"image_id {ann.get('image_id')!r} is not in \"imgs\"")
            continue
        if image not in imgs:
            continue   # an image of a set --subset leaves out
        points = _points(ann)
        why = 'needs "mask" [x1, y1, x2, y2, ...] or "bbox" [x, y, width, height]' if points is None \
            else polygon_problem(points)
        if why:
            problems.bad(f"{where}: anns[{key}] (image {image})", why)
            continue
        text = ann.get("utf8_string")
        words.setdefault(image, []).append(
            Word(points, text if isinstance(text, str) else "", ann.get("legibility") == ILLEGIBLE))
    return words


def _points(ann: dict) -> list | None:
    mask = json_numbers(ann.get("mask"))
    if mask and len(mask) % 2 == 0:
        return pairs(mask)
    box = json_numbers(ann.get("bbox"))
    if box is None or len(box) != BBOX_NUMBERS:
        return None
    x, y, w, h = box
    return [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
