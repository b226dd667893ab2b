"""`east-cache review`: where a model fails, image by image, as a static page that opens from disk.

Ground truth and predictions are read and matched exactly as `east-cache evaluate` scores them (scoring.py: the
build's word rules, the competition's rect DetEval); each image's matches (ImageCounts.matches) and the
detections rule 0 drops (deteval_rect.counted_detections) say which word is matched, missed (a cared-for word no
prediction matched), false (a counted prediction that matched nothing) or don't care. Writes into --out:

    index.html          the page: images worst first by DetEval hmean, sort and filters, the summary; plain JS,
                        its data inline, nothing fetched from anywhere
    images/NNNNN_*.png  each image at --size px on its long side, its words drawn over it, a legend below (.jpg
                        with --format jpg: a few times smaller, its thin lines a little blurred)
    thumbs/NNNNN_*.jpg  the same at THUMB_SIDE px for the page's list, loaded as they scroll into view
    .east-cache-review  the list of the files this review wrote: the next review deletes those, and only those
                        (a folder that holds other files needs --force, and keeps them)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from east_cache.bounds import MAX_PROCESSES, Bound, flag_number
from east_cache.config import BuildConfig
from east_cache.errors import DataError, UsageError
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.ingest.files import NotAllowed, contained, open_regular
from east_cache.ingest.imageio import oriented_size
from east_cache.evaluate import deteval_rect, review_draw as rd, scoring
from east_cache.evaluate.review_page import write_page
from east_cache.progress import Progress
from east_cache.atomic import write_atomic, writing

EPILOG = """example:
  east-predict --checkpoint runs/east/best.pt --data data/receipts --split val --out val_pred.json
  east-cache review --gt data/receipts/ufo/val.json --pred val_pred.json --images data/receipts/images \\
      --out review/
  then open review/index.html in a browser (from disk: no server)"""
DESCRIPTION = """Match predictions to ground truth as `evaluate` scores them (rect DetEval) and write a static
page that opens from disk: the images worst first by hmean, each drawn with its matched, missed
and false words, sortable and filtered by word tag and by score, above a summary of the misses."""
MARKER = ".east-cache-review"
PAGE = "index.html"
PICTURES, THUMBS = "images", "thumbs"
WRITES = (PAGE, MARKER, PICTURES, f"{PICTURES}/*", THUMBS, f"{THUMBS}/*")   # what --out gets (refuse_overwrite)
DEFAULT_SIDE = 1024     # px, long side of an image's picture: a 12 MP photo is decoded and drawn at about 1/4
THUMB_SIDE = 320        # px, long side of a thumbnail in the page's list
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
PNG_OPTIONS = {"compress_level": 1}   # zlib's fastest: on noisy photos higher levels save little, slowly
JPEG_OPTIONS = {"quality": 92}
FORMATS = ("png", "jpg")
NAME_CHARS = 60         # of an image's name kept in its picture's file name (after its index)


def register(sub) -> None:
    """The `review` subcommand on the east-cache parser's subparsers."""
    p = sub.add_parser("review", help="a static HTML page of where predictions fail, worst images first, with a "
                                      "PNG per image", epilog=EPILOG, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gt", type=Path, required=True, help="ground truth: a UFO file such as ROOT/ufo/val.json")
    p.add_argument("--pred", type=Path, required=True,
                   help="predictions: UFO JSON as east-predict writes it; a word's \"score\" field, where present, "
                        "feeds the page's score filter")
    p.add_argument("--images", type=Path, required=True, help="the folder holding the --gt images, e.g. ROOT/images")
    p.add_argument("--out", type=Path, required=True,
                   help="folder to write the page into (made if missing; a previous review there is replaced)")
    p.add_argument("--force", action="store_true",
                   help="write into an existing folder that holds other files (they are kept) (default: off)")
    p.add_argument("--size", type=flag_number(Bound(least=1, note="px")), default=DEFAULT_SIDE,
                   help="long side of each image's picture, px (default: %(default)s; smaller images stay as they are)")
    p.add_argument("--format", choices=FORMATS, default="png",
                   help="of each image's picture: png, exact colours and lines; jpg, a few times smaller "
                        "(default: %(default)s)")
    p.add_argument("--jobs", type=flag_number(Bound(least=0, most=MAX_PROCESSES, note="0: one per core")), default=0,
                   help="images drawn at once (default: 0, one per core)")
    p.add_argument("--skip-bad", action="store_true",
                   help="draw the words of a missing or unreadable image on a grey page instead of stopping "
                        "(default: off)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (default: off)")
    scoring.add_care_flags(p)   # which words are don't-care, as `evaluate` takes them


def check_out(out: Path, inputs: list[Input], force: bool) -> set[str]:
    """Refuse, before any work, an --out that is a file or cannot be written, a file written there that is an input
    or a link to one, or a folder holding one (inputs.refuse_overwrite), and, without force, a folder with files
    no review wrote. Returns what the last review there wrote (its marker's list; nothing for another folder)."""
    check_output(out, "--out", folder=True)
    refuse_overwrite("--out", out, inputs, WRITES)
    own = written_before(out)
    others = [p for p in sorted(out.rglob("*")) if not p.is_dir() and p.relative_to(out).as_posix() not in own
              and p.name != MARKER] if out.is_dir() else []
    if others and not force:
        raise UsageError(f"--out {out}: the folder holds files that no review wrote ({others[0]}"
                         f"{f' and {len(others) - 1} more' if len(others) > 1 else ''}); pass a new or empty folder, "
                         f"or --force to write into it (its other files are kept)")
    return own


def written_before(out: Path) -> set[str]:
    """The files the marker says a review wrote in out (index.html, images/NAME, thumbs/NAME, paths relative to
    out; any other entry is ignored, so a marker edited by hand can delete nothing else); nothing where there is
    no marker, or one that cannot be read."""
    try:
        with open_regular(out / MARKER) as f:
            files = json.loads(f.read()).get("files", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {f for f in files if isinstance(f, str) and (f == PAGE or own_picture(f))}


def own_picture(rel: str) -> bool:
    folder, _, name = rel.partition("/")
    return folder in (PICTURES, THUMBS) and bool(name) and "/" not in name and not name.startswith(".")


def classify(gt: scoring.Words, det: scoring.Words) -> tuple:
    """(ImageCounts, gt states, detection states) of one image, by the competition's rect DetEval."""
    counts = scoring.score_image(gt, det, "rect")
    gt_state = np.where(gt.care, rd.GT_MISSED, rd.GT_DONT_CARE).astype(np.uint8)
    rects = [deteval_rect.enclosing_rects(w.points, w.offsets) for w in (gt, det)]
    det_state = np.where(deteval_rect.counted_detections(rects[0], gt.care, rects[1]), rd.DET_FALSE,
                         rd.DET_IGNORED).astype(np.uint8)
    for _, gts, dets in counts.matches:
        gt_state[list(gts)] = rd.GT_MATCHED
        det_state[list(dets)] = rd.DET_MATCHED
    return counts, gt_state, det_state


def word_shapes(w: scoring.Words) -> tuple[np.ndarray, np.ndarray]:
    """(height px, reading angle degrees in [-180, 180)) of each word: the mean length of its 2nd and 4th
    edges, the direction of its first edge (UFO: from the top-left vertex along the text). NaN for a word that
    is no quad (only don't-care words can be)."""
    n = len(w.care)
    heights, angles = np.full(n, np.nan), np.full(n, np.nan)
    quad = np.flatnonzero(np.diff(w.offsets) == 4)
    if len(quad):
        q = w.points[w.offsets[quad][:, None] + np.arange(4)]
        heights[quad] = (np.linalg.norm(q[:, 2] - q[:, 1], axis=1) + np.linalg.norm(q[:, 0] - q[:, 3], axis=1)) / 2
        d = q[:, 1] - q[:, 0]
        angles[quad] = (np.degrees(np.arctan2(d[:, 1], d[:, 0])) + 180) % 360 - 180
    return heights, angles


def picture_name(index: int, name: str) -> str:
    return f"{index:05d}_{SAFE_NAME.sub('_', Path(name).stem)[:NAME_CHARS]}"


def image_path(folder: Path, name: str, skip_bad: bool) -> Path:
    try:
        path = contained(folder, name)
    except NotAllowed as e:
        raise DataError(f"--gt image {name!r}: refused: {e}; fix the name in the UFO file") from None
    if not path.is_file() and not skip_bad:
        raise DataError(f"--gt image {name!r}: not found at {str(path)!r}; give --images the folder that holds the "
                        f"--gt images, or pass --skip-bad to draw its words on a blank page")
    return path


def draw_one(item: dict, a: argparse.Namespace, has_scores: bool) -> dict:
    """Decode, draw and write one image's picture and thumbnail; the item's page record gets their sizes."""
    pic, path, frame = item.pop("drawing"), item.pop("path"), item.pop("frame")
    if frame is None:
        try:
            frame = oriented_size(path)[:2]
        except (ValueError, OSError):
            if not a.skip_bad:
                raise
            frame = tuple(np.ceil(np.nanmax(np.concatenate([pic.gt_points, pic.det_points, [[1, 1]]]), 0)).astype(int))
    image, k, note = rd.page_pixels(path, frame, a.size, a.skip_bad)
    thumb = rd.thumbnail(image, pic, k, THUMB_SIDE)
    rd.save_jpeg(a.out / item["thumb"], thumb)
    drawn = rd.draw_words(image, pic, k, 2, has_scores)
    head = f"{item['name']}: {frame[0]}x{frame[1]} px, drawn at {k:.2f}x" + (f"; {note}" if note else "")
    line = f"DetEval (rect): precision {item['p']:.3f}  recall {item['r']:.3f}  hmean {item['h']:.3f}"
    figure = rd.with_legend(drawn, head, line, rd.counts_of(pic))
    with writing(a.out / item["picture"], "wb", "--out", sync=False) as f:   # the page is made again by a review
        figure.save(f, **({"format": "PNG", **PNG_OPTIONS} if a.format == "png" else {"format": "JPEG", **JPEG_OPTIONS}))
    item.update(size=[image.shape[1], image.shape[0]], tsize=[thumb.shape[1], thumb.shape[0]], note=note)
    return item


def page_items(gt, pred, scores, info, picture_format: str = "png") -> list[dict]:
    """One record per gt image, worst hmean first, with what draw_one needs."""
    items = []
    for name, words in gt.items():
        det = pred.get(name, scoring.NO_WORDS)
        s = scores.get(name, np.zeros(0))
        counts, gt_state, det_state = classify(words, det)
        pic = rd.Picture(words.points, words.offsets, gt_state, det.points, det.offsets, det_state, s)
        tags: dict[str, list[int]] = {}
        for word_tags, state in zip(info[name].tags, gt_state):
            for t in set(word_tags):
                tags.setdefault(t, [0, 0])
                tags[t][0] += 1
                tags[t][1] += int(state == rd.GT_MISSED)
        false_scores = s[(det_state == rd.DET_FALSE) & np.isfinite(s)]
        heights, angles = word_shapes(words)
        items.append({"name": name, "p": counts.precision, "r": counts.recall, "h": counts.hmean,
                      **rd.counts_of(pic), "tags": tags,
                      "false_max": float(false_scores.max()) if len(false_scores) else None,
                      "shapes": (heights[words.care], angles[words.care], gt_state[words.care] == rd.GT_MISSED),
                      "drawing": pic, "frame": info[name].frame})
    items.sort(key=lambda it: (it["h"], it["r"], it["name"]))
    for k, it in enumerate(items):
        base = picture_name(k, it["name"])
        it["picture"], it["thumb"] = f"{PICTURES}/{base}.{picture_format}", f"{THUMBS}/{base}.jpg"
    return items


def prepare(out: Path, own: set[str], items: list[dict]) -> None:
    """The last review's files go (a new set may hold other images), and only they; a file of another's under a
    name this review writes is refused before anything is deleted."""
    names = [PAGE] + [it[k] for it in items for k in ("picture", "thumb")]
    taken = next((n for n in names if n not in own and os.path.lexists(out / n)), None)
    if taken is not None:
        raise UsageError(f"--out {out}: {out / taken} is no review's file and this review would write it; move it, "
                         f"or pass another --out")
    for rel in own:
        if os.path.islink(out / rel) or (out / rel).is_file():
            (out / rel).unlink()
    for sub in (PICTURES, THUMBS):
        (out / sub).mkdir(parents=True, exist_ok=True)


def run(a: argparse.Namespace) -> int:
    """`review`: check the flags and --out, read and match, list what it writes in the marker, draw every image
    (threads: OpenCV and PIL release the GIL), write the page."""
    own = check_out(a.out, [Input("the ground truth --gt", a.gt), Input("the predictions --pred", a.pred),
                            Input("the images --images", a.images, tree=True)], a.force)
    if not a.images.is_dir():
        raise UsageError(f"--images {a.images}: not a folder; give the folder that holds the --gt images")
    rules = BuildConfig(ignore_tags=tuple(t.strip() for t in a.ignore_tags.split(",") if t.strip()),
                        min_area=a.min_area, drop_area=a.drop_area, fit_polygons=a.fit_polygons)
    info, scores, notes = {}, {}, []
    gt = scoring.load_ground_truth(a.gt, rules, notes, info)
    pred = scoring.load_predictions(a.pred, gt, scores)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    result = scoring.score(gt, pred, "rect")
    has_scores = any(np.isfinite(s).any() for s in scores.values())
    items = page_items(gt, pred, scores, info, a.format)
    for it in items:
        it["path"] = image_path(a.images, it["name"], a.skip_bad)
    prepare(a.out, own, items)
    wrote = [PAGE] + [it[k] for it in items for k in ("picture", "thumb")]
    # listed before they are written: a review that fails half way leaves files the next one deletes
    write_atomic(a.out / MARKER, json.dumps({"page": PAGE, "files": wrote}) + "\n")
    jobs = a.jobs if a.jobs > 0 else (os.cpu_count() or 1)
    with Progress(len(items), "images", quiet=a.quiet, desc="review") as bar, ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(lambda it: draw_one(it, a, has_scores), items):
            bar.update()
    page = write_page(a.out / PAGE, items, result, has_scores, {"gt": str(a.gt), "pred": str(a.pred)})
    print(f"{page}: {len(items)} images, rect DetEval precision {result['precision']:.4f} recall "
          f"{result['recall']:.4f} hmean {result['hmean']:.4f}; open it in a browser")
    return 0
