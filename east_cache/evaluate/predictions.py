"""A predictions file, both ways: written as east-predict writes it (to_ufo, write_predictions) and read back as
quads and scores (read_quads) for the commands that combine them (ensemble).

The file is UFO JSON marked as predictions: {"predicted_by": {"program": ..., ...}, "images": {name: {"words":
{"1": {"points": [[x, y] x 4], "score": s}, ...}}}}, s the word's confidence in [0, 1], which UFO readers ignore.
Coordinates are written to COORD_DECIMALS px, scores to SCORE_DECIMALS digits.
"""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from east_cache.evaluate.scoring import load_predictions
from east_cache.ingest.ufofile import PREDICTED_BY, WORD_SCORE
from east_cache.atomic import write_atomic

COORD_DECIMALS = 2            # px digits written per coordinate: far below any scorer's resolution
SCORE_DECIMALS = 4            # digits written per word score (a mean of map pixels' sigmoid outputs)

Results = dict[str, tuple[np.ndarray, np.ndarray]]   # {image name: (quads (K, 4, 2) float64 px, scores (K,))}


def to_ufo(results: Results, source: dict | None = None) -> dict:
    """The UFO submission format, marked as predictions: {"predicted_by": {"program": "east-predict", **source},
    "images": {name: {"words": {"1": {"points": [[x, y] x 4], "score": s}, ...}}}}, s the word's confidence
    (decode_maps), which UFO readers ignore; the mark comes first, so that a reader streaming the file meets it
    before the images. source may name another "program"."""
    def word(quad, s):
        return {"points": [[round(float(x), COORD_DECIMALS), round(float(y), COORD_DECIMALS)] for x, y in quad],
                WORD_SCORE: round(float(s), SCORE_DECIMALS)}
    return {PREDICTED_BY: {"program": "east-predict", **(source or {})},
            "images": {name: {"words": {str(k + 1): word(q, s) for k, (q, s) in enumerate(zip(quads, scores))}}
                       for name, (quads, scores) in results.items()}}


def write_predictions(path, results: Results, source: dict | None = None) -> None:
    """UFO JSON at path (to_ufo), written atomically: a reader sees the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(to_ufo(results, source)) + "\n")


def read_quads(json_path) -> Results:
    """{image name: (quads (K, 4, 2) float64, scores (K,) float64, NaN where a word has none)} of a predictions
    file, read and checked as `evaluate` reads --pred (scoring.load_predictions), words in id order. A polygon of
    another point count than four becomes its minimum-area rectangle."""
    scores: dict[str, np.ndarray] = {}
    words = load_predictions(json_path, None, scores)
    out = {}
    for name, w in words.items():
        quads = [w.points[a:b] if b - a == 4 else cv2.boxPoints(cv2.minAreaRect(w.points[a:b].astype(np.float32)))
                 for a, b in zip(w.offsets[:-1], w.offsets[1:])]
        out[name] = (np.array(quads, np.float64).reshape(-1, 4, 2), scores[name])
    return out
