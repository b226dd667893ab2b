"""Score UFO predictions against UFO ground truth: `east-cache evaluate` (`python -m preprocess evaluate`), its
flags (add_arguments) and the command (run).

Ground-truth words become cared-for or don't-care exactly as a build decides (east_cache.ingest.ufo:
illegible, an ignore tag, not a quad, smaller than min_area; degenerate or malformed words are dropped).
None of those rules looks at pixels or at the frame size, so scoring reads the two JSON files only.
Metric `rect` is the competition scorer (east_cache.evaluate.deteval_rect), `poly` the polygon-area DetEval
(east_cache.evaluate.deteval); both are totalled the same way (east_cache.evaluate.deteval_rect.totals).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from east_cache.bounds import NON_NEGATIVE, flag_number
from east_cache.ingest.objects import source_path
from east_cache.location import flag_location
from east_cache.evaluate import deteval, deteval_rect
from east_cache.evaluate.compare import compare, table
from east_cache.config import DEFAULT_IGNORE_TAGS, BuildConfig
from east_cache.errors import CacheHint, DataError, UsageError
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.ingest import ufo
# PREDICTED_BY, and a pseudo-label file's marks: a --gt with them is refused
from east_cache.ingest.pseudolabels import PROVENANCE, PSEUDO_TAG, is_pseudo
from east_cache.ingest.ufofile import PREDICTED_BY, predicted_word, read_entries
from east_cache.atomic import write_atomic

METRICS = ("rect", "poly")
MATCH_KINDS = ("one-to-one", "one-to-many", "many-to-one")
SHOW_UNKNOWN = 5        # names of unknown prediction images quoted in the error
LEGIBILITY = "illegibility"   # a ground-truth word's flag, which no prediction carries
SWAP_HINT = CacheHint("{command} evaluate --gt ROOT/ufo/SPLIT.json --pred PREDICTIONS.json")


class Words(NamedTuple):
    """One image's words or detections, in the image's pixel frame."""
    points: np.ndarray      # float64 (P, 2): every polygon's vertices, concatenated
    offsets: np.ndarray     # int64 (N + 1,): polygon k is points[offsets[k]:offsets[k + 1]]
    care: np.ndarray        # bool (N,): counted in recall (gt); always True for detections

    @classmethod
    def from_quads(cls, quads) -> Words:
        q = np.asarray(quads, np.float64).reshape(-1, 4, 2)
        return cls(q.reshape(-1, 2), np.arange(len(q) + 1, dtype=np.int64) * 4, np.ones(len(q), bool))

    @classmethod
    def from_record(cls, rec: ufo.ImageRecord) -> Words:
        return cls(np.asarray(rec.points, np.float64), np.asarray(rec.offsets, np.int64), rec.reason == ufo.CARE)


NO_WORDS = Words(np.zeros((0, 2)), np.zeros(1, np.int64), np.zeros(0, bool))


def _stated_frame(entry: dict) -> tuple[int, int] | None:
    """(img_w, img_h) where the entry states them, so that words far outside the frame are dropped as the build
    drops them; None (no such rule) where it does not: scoring reads no image."""
    w, h = entry.get("img_w"), entry.get("img_h")
    return (int(w), int(h)) if ufo.positive_int(w) and ufo.positive_int(h) else None


class WordInfo(NamedTuple):
    """What load_ground_truth keeps of an image beside its Words, for `review`."""
    frame: tuple[int, int] | None       # (img_w, img_h) where the entry states them
    tags: tuple[tuple[str, ...], ...]   # each kept word's tags, in Words order


def load_ground_truth(json_path, cfg: BuildConfig, notes: list[str] | None = None,
                      info: dict[str, WordInfo] | None = None) -> dict[str, Words]:
    """{image name: its words} of a UFO file, each word cared-for or don't-care by the build's rules. A file
    east-predict wrote is refused, and so is one of pseudo-labels (`pseudo` wrote it, or an image of it carries the
    pseudo tag): a model scored against its own predictions gets hmean 1. notes, when given, gets a line for what
    ground truth states and this file does not (image sizes, legibility flags); info, when given, each image's
    WordInfo."""
    json_path, out, top = source_path(json_path), {}, {}
    summary = ufo.IngestSummary()
    sized = flagged = 0
    for name, entry in read_entries(json_path, top):
        refuse_predictions(json_path, top, name, entry)
        where, words = f"{json_path}: image {name!r}", entry.get("words") or {}
        frame = _stated_frame(entry)
        sized += frame is not None
        flagged += any(isinstance(w, dict) and LEGIBILITY in w for w in words.values())
        parsed = [(k, ufo.parse_word(words[k], k, where, cfg, summary, frame))
                  for k in sorted(words, key=ufo.word_id_key)]
        kept = [p for _, p in parsed if p is not None]
        if info is not None:
            info[name] = WordInfo(frame, tuple(ufo.word_tags(words[k]) for k, p in parsed if p is not None))
        out[name] = Words(np.array([xy for p, _ in kept for xy in p], np.float64).reshape(-1, 2),
                          np.cumsum([0] + [len(p) for p, _ in kept]).astype(np.int64),
                          np.array([r == ufo.CARE for _, r in kept], bool))
    refuse_predictions(json_path, top)
    if notes is not None:
        notes += gaps(json_path, len(out), sized, flagged)
    return out


def refuse_predictions(json_path: Path, top: dict, name: str | None = None, entry: dict | None = None) -> None:
    """A --gt that is predictions (PREDICTED_BY) or pseudo-labels (their file's PROVENANCE member, wherever the file
    has it: the check runs at every image and after the last; or an image tagged PSEUDO_TAG) is refused."""
    if PREDICTED_BY in top:
        raise DataError(f"--gt {json_path}: this is a predictions file (east-predict wrote it: it has "
                        f"\"{PREDICTED_BY}\"), not ground truth; the order is {SWAP_HINT}")
    marked = PROVENANCE in top
    if marked or (entry is not None and is_pseudo(entry)):
        why = f"it has \"{PROVENANCE}\"" if marked else f"image {name!r} has the tag \"{PSEUDO_TAG}\""
        raise DataError(f"--gt {json_path}: these are pseudo-labels ({why}: a model's predictions that `pseudo` kept), "
                        f"not ground truth: scored against them a model meets its own predictions; pass the "
                        f"annotated split, e.g. ROOT/ufo/val.json")


def gaps(json_path: Path, images: int, sized: int, flagged: int) -> list[str]:
    """What a ground-truth file lacks that ground truth has, as warnings."""
    found = []
    if sized < images:
        found.append(f"--gt {json_path}: {images - sized} of {images} images state no img_w / img_h, so their words "
                     f"far outside the image are not dropped as a build drops them")
    if images and not flagged:
        found.append(f"--gt {json_path}: no image has a word with an \"{LEGIBILITY}\" flag, so every word counts "
                     f"as legible; is this ground truth? ({SWAP_HINT})")
    return found


def load_predictions(json_path, gt_names, scores: dict[str, np.ndarray] | None = None) -> dict[str, Words]:
    """{image name: detections} of a UFO predictions file. Every image must be in gt_names (None: any); a file
    whose words carry legibility flags is ground truth, refused unless it is marked as predictions. scores, when
    given, gets each image's float64 (K,) word score of its detections, NaN where a word has none."""
    json_path, out, top = source_path(json_path), {}, {}
    for name, entry in read_entries(json_path, top):
        words, polygons, found = entry.get("words") or {}, [], []
        for word_id in sorted(words, key=ufo.word_id_key):
            word = words[word_id]
            if isinstance(word, dict) and LEGIBILITY in word and PREDICTED_BY not in top:
                raise DataError(f"--pred {json_path}: looks like ground truth (image {name!r}, word {word_id!r} has "
                                f"an \"{LEGIBILITY}\" flag, which predictions do not have); the order is "
                                f"{SWAP_HINT}")
            w = predicted_word(word, f"{json_path}: image {name!r}, word {word_id!r}")
            polygons.append(w.points)
            found.append(float("nan") if w.score is None else w.score)
        if scores is not None:
            scores[name] = np.array(found, np.float64)
        out[name] = Words(np.array([xy for p in polygons for xy in p], np.float64).reshape(-1, 2),
                          np.cumsum([0] + [len(p) for p in polygons]).astype(np.int64), np.ones(len(polygons), bool))
    unknown = sorted(set(out) - set(gt_names)) if gt_names is not None else []
    if unknown:
        more = f" and {len(unknown) - SHOW_UNKNOWN} more" if len(unknown) > SHOW_UNKNOWN else ""
        raise DataError(f"{json_path}: predictions for image(s) not in the ground truth: "
                        f"{', '.join(map(repr, unknown[:SHOW_UNKNOWN]))}{more}; predict on the same split as the "
                        f"--gt file, or remove those entries")
    return out


def score_image(gt: Words, det: Words, metric: str = "rect") -> deteval.ImageCounts:
    """Match counts of one image's detections against its words."""
    if metric == "rect":
        return deteval_rect.evaluate_image(deteval_rect.enclosing_rects(gt.points, gt.offsets), gt.care,
                                           deteval_rect.enclosing_rects(det.points, det.offsets))
    if metric == "poly":
        # gt_quads fits a quad to any other polygon, as it does for a cache's don't-care words (OpenCV: float32)
        det_quads, _ = deteval.gt_quads(det.points.astype(np.float32), det.offsets, det.care)
        return deteval.evaluate_image(*deteval.gt_quads(gt.points.astype(np.float32), gt.offsets, gt.care), det_quads)
    raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")


def score(gt: dict[str, Words], pred: dict[str, Words], metric: str = "rect") -> dict:
    """totals() over the gt images (one without predictions has no detections), with per_image
    {name: ImageCounts}, gt_dont_care and detections (every detection, kept or not)."""
    per_image = {name: score_image(words, pred.get(name, NO_WORDS), metric) for name, words in sorted(gt.items())}
    return {**deteval_rect.totals(per_image.values()), "metric": metric, "images": len(gt), "per_image": per_image,
            "gt_dont_care": sum(int((~w.care).sum()) for w in gt.values()),
            "detections": sum(len(pred.get(name, NO_WORDS).care) for name in gt)}


def match_counts(per_image) -> dict[str, int]:
    """How many matches of each kind ImageCounts hold."""
    kinds = [kind for counts in per_image for kind, _, _ in counts.matches]
    return {kind: kinds.count(kind) for kind in MATCH_KINDS}


def report(result: dict) -> str:
    """The console summary of score()."""
    m = match_counts(result["per_image"].values())
    lines = ((f"{result['metric']} DetEval over {result['images']} images: precision {result['precision']:.4f}  "
             f"recall {result['recall']:.4f}  hmean {result['hmean']:.4f}"),
             (f"words: {result['gt_care']} cared-for, {result['gt_dont_care']} don't-care; detections: "
             f"{result['detections']}, {result['det_care']} counted "
             f"({result['detections'] - result['det_care']} on don't-care words)"),
             (f"matches: {m['one-to-one']} one-to-one, {m['one-to-many']} splits, {m['many-to-one']} merges; "
             f"credits: recall {result['recall_accum']:.2f}, precision {result['precision_accum']:.2f}"))
    return "\n".join(lines)


CSV_FIELDS = ("image", "gt_care", "det_counted", "recall_credit", "precision_credit", "precision", "recall", "hmean",
              "one_to_one", "splits", "merges")   # the last three count MATCH_KINDS


def write_per_image(path, result: dict) -> None:
    """One CSV row per gt image (ratios 0 where their denominator is 0), written atomically."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for name, c in result["per_image"].items():
        t, m = deteval_rect.totals([c]), match_counts([c])
        w.writerow([name, c.gt_care, c.det_care, f"{c.recall_accum:.4f}", f"{c.precision_accum:.4f}",
                    *(f"{t[k]:.4f}" for k in ("precision", "recall", "hmean")), *(m[k] for k in MATCH_KINDS)])
    write_atomic(Path(path), buf.getvalue())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gt", type=flag_location, required=True,
                   help="ground truth: a UFO file such as ROOT/ufo/val.json (a path or a URL)")
    p.add_argument("--pred", type=flag_location, required=True, action="append",
                   help='predictions: UFO JSON {"images": {name: {"words": {"1": {"points": [[x, y], ...]}}}}}; '
                        "a gt image missing from it has no detections. Give --pred once per file to compare "
                        "several (folds, an ensemble): one table, a row per file")
    p.add_argument("--metric", choices=METRICS, default="rect",
                   help="rect: DetEval on enclosing axis-aligned rectangles, as the UFO competition scores; "
                        "poly: DetEval on polygon areas (default: rect)")
    p.add_argument("--per-image", type=Path, metavar="CSV",
                   help="also write one CSV row of counts and scores per image (default: none)")
    p.add_argument("--json", action="store_true", help="print the totals as one JSON object")
    add_care_flags(p)


def add_care_flags(p: argparse.ArgumentParser) -> None:
    """Which ground-truth words are don't-care: the build's rules and defaults (give the flags the cache was built
    with); evaluate's and review's."""
    d = BuildConfig()
    p.add_argument("--ignore-tags", default=",".join(DEFAULT_IGNORE_TAGS),
                   help="comma-separated word tags that make a don't-care word (default: %(default)s)")
    p.add_argument("--min-area", type=flag_number(NON_NEGATIVE), default=d.min_area,
                   help="px^2; smaller words are don't-care (default: %(default)s)")
    p.add_argument("--drop-area", type=flag_number(NON_NEGATIVE), default=d.drop_area,
                   help="px^2; smaller words are dropped (default: %(default)s)")
    p.add_argument("--fit-polygons", action="store_true",
                   help="fit words with 5+ points to a min-area quad instead of making them don't-care "
                        "(default: off)")


def run(a: argparse.Namespace) -> int:
    """`evaluate`: the totals printed (and the per-image CSV written) for the flags add_arguments declared."""
    rules = BuildConfig(ignore_tags=tuple(t.strip() for t in a.ignore_tags.split(",") if t.strip()),
                        min_area=a.min_area, drop_area=a.drop_area, fit_polygons=a.fit_polygons)
    if a.per_image:
        if len(a.pred) > 1:
            raise UsageError(f"--per-image {a.per_image}: writes one predictions file's rows; give one --pred with it")
        check_output(a.per_image, "--per-image", folder=False)
        refuse_overwrite("--per-image", a.per_image, [Input("the ground truth --gt", a.gt),
                                                      Input("the predictions --pred", a.pred[0])])
    notes = []
    gt = load_ground_truth(a.gt, rules, notes)
    if len(a.pred) > 1:
        return compare_files(a, gt, notes)
    result = score(gt, load_predictions(a.pred[0], gt), a.metric)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    if a.per_image:
        write_per_image(a.per_image, result)
    print(json.dumps({k: v for k, v in result.items() if k != "per_image"}) if a.json else report(result))
    return 0


def compare_files(a: argparse.Namespace, gt: dict[str, Words], notes: list[str]) -> int:
    """`evaluate` with several --pred: one table (or, with --json, one object), a row per file (compare.py)."""
    rows = compare([score(gt, load_predictions(p, gt), a.metric) for p in a.pred])
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    print(json.dumps({"files": [{"pred": str(p), **r} for p, r in zip(a.pred, rows)]}) if a.json
          else table(rows, a.pred))
    return 0
