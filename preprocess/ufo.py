"""UFO JSON annotations in: one ImageRecord per image, every word kept as a positive or a don't-care."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Why a word is (not) a positive. Everything but CARE becomes a don't-care region (ROI = 0).
CARE = 0            # legible quad: drawn in score and geometry
ILLEGIBLE = 1       # "illegibility": true
IGNORE_TAG = 2      # carries one of BuildConfig.ignore_tags
NOT_QUAD = 3        # polygon with other than 4 points (and fit_polygons is off)
SMALL = 4           # area under BuildConfig.min_area
REASONS = {CARE: "legible", ILLEGIBLE: "illegible", IGNORE_TAG: "ignore tag", NOT_QUAD: "not a quad", SMALL: "small"}


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
