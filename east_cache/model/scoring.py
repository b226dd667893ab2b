"""Score UFO predictions against UFO ground truth: `python -m preprocess evaluate`.

Ground-truth words become cared-for or don't-care exactly as a build decides (east_cache.ingest.ufo:
illegible, an ignore tag, not a quad, smaller than min_area; degenerate or malformed words are dropped).
None of those rules looks at pixels or at the frame size, so scoring reads the two JSON files only.
Metric `rect` is the competition scorer (east_cache.model.deteval_rect), `poly` the polygon-area DetEval
(east_cache.model.deteval); both are totalled the same way (east_cache.model.deteval_rect.totals).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import NamedTuple

import numpy as np

from east_cache.ingest.objects import source_path
from east_cache.model import deteval, deteval_rect
from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest import ufo
from east_cache.store.atomic import write_atomic

METRICS = ("rect", "poly")
MATCH_KINDS = ("one-to-one", "one-to-many", "many-to-one")
MIN_POINTS = 3          # a detection is a polygon: at least three vertices
SHOW_UNKNOWN = 5        # names of unknown prediction images quoted in the error


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


def _read(json_path: Path):
    """(name, entry) of every image of a UFO file, each name once."""
    seen = set()
    for name, entry in ufo.read_images(json_path):   # the build's reader: same errors for the same faults
        if name in seen:
            raise DataError(f"{json_path}: image {name!r} has two entries; merge them into one or delete one")
        seen.add(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("words") or {}, dict):
            raise DataError(f'{json_path}: image {name!r}: expected {{"words": {{"1": {{"points": ...}}, ...}}}}; '
                            f"fix the entry")
        yield name, entry


def _stated_frame(entry: dict) -> tuple[int, int] | None:
    """(img_w, img_h) where the entry states them, so that words far outside the frame are dropped as the build
    drops them; None (no such rule) where it does not: scoring reads no image."""
    w, h = entry.get("img_w"), entry.get("img_h")
    return (int(w), int(h)) if ufo.positive_int(w) and ufo.positive_int(h) else None


def load_ground_truth(json_path, cfg: BuildConfig) -> dict[str, Words]:
    """{image name: its words} of a UFO file, each word cared-for or don't-care by the build's rules."""
    json_path, out = source_path(json_path), {}
    summary = ufo.IngestSummary()
    for name, entry in _read(json_path):
        where, words = f"{json_path}: image {name!r}", entry.get("words") or {}
        frame = _stated_frame(entry)
        kept = [ufo.parse_word(words[k], k, where, cfg, summary, frame) for k in sorted(words, key=ufo.word_id_key)]
        kept = [k for k in kept if k is not None]
        out[name] = Words(np.array([xy for p, _ in kept for xy in p], np.float64).reshape(-1, 2),
                          np.cumsum([0] + [len(p) for p, _ in kept]).astype(np.int64),
                          np.array([r == ufo.CARE for _, r in kept], bool))
    return out


def load_predictions(json_path, gt_names) -> dict[str, Words]:
    """{image name: detections} of a UFO predictions file. Every image must be in gt_names."""
    json_path, out = source_path(json_path), {}
    for name, entry in _read(json_path):
        words, polygons = entry.get("words") or {}, []
        for word_id in sorted(words, key=ufo.word_id_key):
            word = words[word_id]
            points = ufo.parse_points(word.get("points")) if isinstance(word, dict) else None
            if points is None or len(points) < MIN_POINTS:
                raise DataError(f"{json_path}: image {name!r}, word {word_id!r}: \"points\" must be a list of at least "
                                f"{MIN_POINTS} [x, y] pairs of finite numbers; fix the prediction")
            polygons.append(points)
        out[name] = Words(np.array([xy for p in polygons for xy in p], np.float64).reshape(-1, 2),
                          np.cumsum([0] + [len(p) for p in polygons]).astype(np.int64), np.ones(len(polygons), bool))
    unknown = sorted(set(out) - set(gt_names))
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
