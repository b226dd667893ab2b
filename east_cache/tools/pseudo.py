"""`east-cache pseudo`: a predictions file (east-predict's, with a score per word) as a UFO training root of
pseudo-labels, ROOT/ufo/SPLIT.json and ROOT/images/, which a build mixes with real data as any root (--data
REAL --data ROOT).

A word whose score is at least --care-score is legible; one at least --min-score but below --care-score is
illegible (a don't-care region: neither text nor background in training); one below --min-score is dropped.
An image left without words is left out. The file and each image are marked (ingest/pseudolabels.py), so that
the build's plan and `info` say how many images are pseudo-labels. No torch: predictions are read as JSON.

Predictions are read by ufofile.predicted_word, the reader `evaluate` and `review` use: a word of fewer than 3
finite points, or whose score is missing or not a finite number in [0, 1], stops the command with an error naming
the image and the word. A polygon (more than 4 points, as models other than EAST predict) is kept as it is, as the
UFO files it writes and the build take it (a don't-care region there unless --fit-polygons). A kept word's points
outside its image are clipped to the image (its frame, EXIF upright: the frame east-predict predicted in); a word
whose area is then below the build's --drop-area default is dropped as degenerate. Both are counted in the
summary.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from east_cache.bounds import Bound, flag_number
from east_cache.convert.writer import IMAGES_DIR, check_output, ufo_path, write_root
from east_cache.errors import DataError, UsageError, stderr_line
from east_cache.inputs import Input, refuse_overwrite
from east_cache.ingest.files import NotAllowed, contained, regular_stat
from east_cache.ingest.imageio import oriented_size
from east_cache.ingest.pseudolabels import PROVENANCE, PSEUDO_TAG
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import signed_area
from east_cache.ingest.ufofile import PREDICTED_BY, WORD_SCORE, predicted_word, read_entries
from east_cache.progress import Progress

DEFAULT_SPLIT = "train"      # the split a build reads by default: `build --data REAL --data ROOT` mixes them
SCORE = Bound(integer=False, least=0, most=1)   # a threshold on a word's score
MIN_SCORE = 0.8              # east-predict's default --score-thresh: every word it writes is kept
CARE_SCORE = 0.95            # legible from here; below, a don't-care region
PROGRAM = "east-cache pseudo"
RERUN = "east-predict --checkpoint CKPT --images DIR --out PRED.json"
DESCRIPTION = ("Turn a predictions file into a UFO training root of pseudo-labels: words scored at least "
               "--care-score legible, those at least --min-score illegible (don't-care), the rest dropped; the file "
               "and its images marked as pseudo-labels, which the build and `info` report.")
EPILOG = """example:
  east-predict --checkpoint runs/fold0/best.pt --images data/unlabelled --out unlabelled.json
  east-cache pseudo --pred unlabelled.json --images data/unlabelled --out data/pseudo
  east-cache build --data data/receipts --data data/pseudo --out cache/receipts
  east-train --cache cache/receipts --split train0 --repeat pseudo=0.5 --val-data data/receipts --val-split val0"""


def register(sub) -> None:
    """The `pseudo` subcommand on the east-cache parser's subparsers."""
    p = sub.add_parser("pseudo", help="predictions (with word scores) to a UFO root of pseudo-labels for --data",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pred", type=Path, required=True, metavar="PRED.json",
                   help="predictions file that east-predict wrote (each word with its \"score\")")
    p.add_argument("--images", type=Path, required=True, metavar="DIR", help="the folder of the predicted images")
    p.add_argument("--out", type=Path, required=True, metavar="ROOT",
                   help="dataset root to write: ROOT/ufo/SPLIT.json and ROOT/images/")
    p.add_argument("--split", default=DEFAULT_SPLIT,
                   help=f"the split name of the UFO file, as the build's --split will name it (default: "
                        f"{DEFAULT_SPLIT})")
    p.add_argument("--min-score", type=flag_number(SCORE), default=MIN_SCORE, metavar="X",
                   help=f"words scored below X are dropped (default {MIN_SCORE}, east-predict's --score-thresh)")
    p.add_argument("--care-score", type=flag_number(SCORE), default=CARE_SCORE, metavar="Y",
                   help=f"words scored at least Y are legible; those between X and Y illegible, don't-care "
                        f"(default {CARE_SCORE})")
    p.add_argument("--copy", action="store_true", help="copy the images into ROOT/images (default: symbolic links)")
    p.add_argument("--force", action="store_true", help="replace ROOT/ufo/SPLIT.json (never the predictions file)")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.set_defaults(func=run)


def check_request(a: argparse.Namespace) -> None:
    """Every refusal before any work: thresholds, inputs, and outputs that would replace or land in an input."""
    if not a.split or any(c in a.split for c in "/\\\0") or a.split.startswith("."):
        raise UsageError(f"--split {a.split!r}: a split is a plain name such as train (it names ufo/SPLIT.json)")
    if a.min_score > a.care_score:
        raise UsageError(f"--min-score {a.min_score} and --care-score {a.care_score}: give 0 <= min <= care <= 1")
    if not a.pred.is_file():
        raise UsageError(f"--pred {a.pred}: no such file; give the predictions file east-predict wrote ({RERUN})")
    if not a.images.is_dir():
        raise UsageError(f"--images {a.images}: not a folder; give the folder of the predicted images")
    refuse_overwrite("--out", a.out, [Input("the predictions --pred", a.pred),
                                      Input("the images --images", a.images, tree=True)],
                     (ufo_path(".", a.split).as_posix(), IMAGES_DIR))
    check_output(a.out, a.split, a.force)


def pseudo_entry(entry: dict, size: tuple[int, int], min_score: float, care_score: float, where: str,
                 counts: Counter) -> dict:
    """The UFO entry of one predicted image: its kept words, each legible by its score, clipped to the image
    (counts["clipped"]), the degenerate ones left out (counts["degenerate"]), the image tagged."""
    words, (w, h), least = {}, size, BuildConfig().drop_area
    for word_id, word in (entry.get("words") or {}).items():
        at = f"{where}, word {word_id!r}"
        p = predicted_word(word, at)
        if p.score is None:
            raise DataError(f"{at}: no \"{WORD_SCORE}\" (a number) in the word: these predictions carry no word "
                            f"scores; predict again with this version, `{RERUN}`")
        if p.score < min_score:
            continue
        points = [(min(max(x, 0.0), w), min(max(y, 0.0), h)) for x, y in p.points]
        if abs(signed_area(points)) < least:
            counts["degenerate"] += 1
            continue
        kept = {**word, "illegibility": p.score < care_score, "tags": []}
        if points != p.points:
            counts["clipped"] += 1
            kept["points"] = [[x, y] for x, y in points]
        words[word_id] = kept
    return {"img_w": size[0], "img_h": size[1], "words": words, "tags": [PSEUDO_TAG]}


def image_file(folder: Path, name: str, where: str) -> Path:
    try:
        path = contained(folder, name)
        regular_stat(path)
    except NotAllowed as e:
        raise DataError(f"{where}: refused: {e}") from None
    except OSError:
        raise DataError(f"{where}: no image file {folder / name}; give the --images folder that was predicted") \
            from None
    return path


def run(a: argparse.Namespace) -> int:
    check_request(a)
    top, entries, sources, empty, counts, fixed, predicted = {}, {}, {}, 0, [0, 0], Counter(), 0
    with Progress(None, "img", quiet=a.quiet, desc="pseudo-labels") as bar:
        for name, entry in read_entries(a.pred, top):
            where = f"{a.pred}: image {name!r}"
            path = image_file(a.images, name, where)
            w, h, _ = oriented_size(path)   # the EXIF-upright frame east-predict's points are in
            e = pseudo_entry(entry, (w, h), a.min_score, a.care_score, where, fixed)
            predicted += len(entry.get("words") or {})
            bar.update()
            if not e["words"]:
                empty += 1
                continue
            entries[name], sources[name] = e, path
            counts[0] += sum(not word["illegibility"] for word in e["words"].values())
            counts[1] += sum(word["illegibility"] for word in e["words"].values())
    provenance = {"program": PROGRAM, "predictions": str(a.pred.resolve()), "images": str(a.images.resolve()),
                  "min_score": a.min_score, "care_score": a.care_score, PREDICTED_BY: top.get(PREDICTED_BY)}
    write_root(a.out, a.split, entries, sources, a.copy, a.force, {PROVENANCE: provenance})
    if not a.quiet:
        print(f"{ufo_path(a.out, a.split)}: {len(entries)} images of pseudo-labels, {counts[0]} legible words "
              f"(score >= {a.care_score}), {counts[1]} don't-care (>= {a.min_score}); {fixed['clipped']} word(s) "
              f"clipped to their image, {fixed['degenerate']} degenerate word(s) (area < "
              f"{BuildConfig().drop_area:g} px^2 inside the image) dropped; {empty} image(s) without a kept word left "
              f"out; images {'copied' if a.copy else 'linked'} into {a.out / IMAGES_DIR}; mix them "
              f"in with `build --data ROOT --data {a.out} --split {a.split}`", file=sys.stderr)
    if not entries:
        stderr_line(f"warning: {ufo_path(a.out, a.split)}: 0 images of pseudo-labels: {no_word(a, predicted)}")
    return 0


def no_word(a: argparse.Namespace, predicted: int) -> str:
    """Why pseudo kept no image, and what to run instead, from the count of predicted words."""
    if not predicted:
        return (f"{a.pred} holds no predicted word; predict again with a checkpoint trained longer (east-predict's "
                f"warning says whether a lower --score-thresh would find words)")
    return (f"none of its {predicted} predicted word(s) scored at least --min-score {a.min_score}; run pseudo again "
            f"with a lower --min-score")
