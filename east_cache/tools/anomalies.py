"""Annotation anomalies of one UFO image entry, and its words' sizes and angles, for `east-cache check`.

Which word the build keeps as legible, makes don't-care or drops is ingest/ufo.py's rule (parse_word), applied
here as the build applies it; this module adds the geometry that rule lets through: words that stick out of the
image, slivers, quads whose edges cross, and a frame size that disagrees with the file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from east_cache.config import BuildConfig
from east_cache.ingest.ufo import (
    SMALL,
    IngestSummary,
    parse_points,
    parse_word,
    positive_int,
    signed_area,
    word_id_key,
)

# What `check` reports, in the order it reports them, with what the build does about each.
KINDS = {
    "unreadable": "the build stops on it (or leaves it out with --skip-bad)",
    "size": "img_w/img_h match neither the file's stored nor its EXIF-turned size: the build stretches it",
    "no words": "an image without a word to learn: all background",
    "invalid": "points missing or not numbers: dropped",
    "outside": "a point outside the image: kept, clipped by the crop (dropped when a frame size or more out)",
    "degenerate": "near-zero area or a sliver under a pixel wide: dropped, or a legible word with no inside",
    "self-crossing": "edges that cross (a bow tie): its area and box are wrong",
    "polygon": "not 4 points: don't-care unless --fit-polygons",
    "small": "area under --min-area: don't-care",
}
OUTSIDE_PX = 1.0        # px a point may lie outside the frame (a click on the border) before it counts as outside
SLIVER_PX = 1.0         # px; a word whose min-area rectangle is thinner than this has no inside to learn


@dataclass(frozen=True)
class Found:
    kind: str            # a key of KINDS
    word: str            # the word id, "" for the image itself
    detail: str


@dataclass
class WordShapes:
    """Kept words' sizes and angles, in the annotation frame."""
    heights: list[float]   # px, the short side of each word's minimum-area rectangle
    angles: list[float]    # degrees in [-180, 180): the direction of each quad's first edge (its reading direction)


def frame_problem(entry: dict, stored: tuple[int, int], upright: tuple[int, int]) -> Found | None:
    """img_w x img_h against the file: the build accepts the stored size or the size EXIF orientation shows."""
    w, h = entry.get("img_w"), entry.get("img_h")
    if w is None or h is None or not (positive_int(w) and positive_int(h)):
        return None   # the header's size is used (missing), or ingest refuses the entry (reported as unreadable)
    if (int(w), int(h)) in (tuple(stored), tuple(upright)):
        return None
    turned = f" (EXIF-turned {upright[0]}x{upright[1]})" if tuple(upright) != tuple(stored) else ""
    return Found("size", "", f"img_w x img_h {int(w)}x{int(h)}, the file {stored[0]}x{stored[1]}{turned}")


def entry_anomalies(entry: dict, frame: tuple[int, int], cfg: BuildConfig, shapes: WordShapes) -> list[Found]:
    """The anomalies of one image entry (a dict the build would accept) in its frame (w, h); its kept words'
    sizes and angles are added to shapes."""
    words = entry.get("words") or {}
    found, kept = [], 0
    for wid in sorted(words, key=word_id_key):
        problems, shape = word_anomalies(words[wid], wid, frame, cfg)
        found += problems
        if shape is not None:
            kept += 1
            shapes.heights.append(shape[0])
            if shape[1] is not None:
                shapes.angles.append(shape[1])
    if not kept:
        found.append(Found("no words", "", f"all {len(words)} word(s) dropped" if words else "no words"))
    return found


def word_anomalies(word, wid: str, frame: tuple[int, int], cfg: BuildConfig) -> tuple[list[Found], tuple | None]:
    """(anomalies of one word, (height px, angle degrees or None) when the build keeps it, else None)."""
    summary = IngestSummary()
    kept = parse_word(word, wid, "", cfg, summary, frame)
    if kept is None:
        if summary.dropped_invalid:
            return [Found("invalid", wid, "points missing, malformed or not finite numbers")], None
        if summary.dropped_far:
            return [Found("outside", wid, f"a point a frame size or more outside {frame[0]}x{frame[1]}: dropped")], None
        return [Found("degenerate", wid, "fewer than 3 points or an area under --drop-area: dropped")], None
    points, reason = kept
    raw = parse_points(word.get("points"))
    found = []
    out = [(x, y) for x, y in raw if not (-OUTSIDE_PX <= x <= frame[0] + OUTSIDE_PX
                                          and -OUTSIDE_PX <= y <= frame[1] + OUTSIDE_PX)]
    if out:
        found.append(Found("outside", wid, f"point ({out[0][0]:g}, {out[0][1]:g}) outside {frame[0]}x{frame[1]}"))
    height, long_side = rect_sides(points)
    if height < SLIVER_PX:
        found.append(Found("degenerate", wid, f"{long_side:.0f} x {height:.2f} px"))
    if self_crossing(raw):
        found.append(Found("self-crossing", wid, f"{len(raw)} points whose edges cross"))
    if len(raw) != 4:
        found.append(Found("polygon", wid, f"{len(raw)} points"))
    if reason == SMALL:
        found.append(Found("small", wid, f"area {abs(signed_area(points)):.1f} px^2 < --min-area {cfg.min_area:g}"))
    angle = None
    if len(points) == 4:
        (x0, y0), (x1, y1) = points[0], points[1]
        angle = (math.degrees(math.atan2(y1 - y0, x1 - x0)) + 180) % 360 - 180
    return found, (height, angle)


def rect_sides(points) -> tuple[float, float]:
    """(short, long) side of the polygon's minimum-area rectangle, px."""
    import cv2
    (_, _), (w, h), _ = cv2.minAreaRect(np.asarray(points, np.float32))
    return min(w, h), max(w, h)


def self_crossing(points) -> bool:
    """Whether two edges of the closed polygon that share no vertex cross (touching counts too)."""
    n = len(points)
    edges = [(points[k], points[(k + 1) % n]) for k in range(n)]
    return n >= 4 and any(_segments_meet(*edges[a], *edges[b])
                          for a in range(n) for b in range(a + 2, n) if not (a == 0 and b == n - 1))


def _segments_meet(p, q, r, s) -> bool:
    def side(a, b, c):
        v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return (v > 0) - (v < 0)

    def within(a, b, c):   # c on the line through a, b: between them?
        return min(a[0], b[0]) <= c[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= c[1] <= max(a[1], b[1])

    d1, d2, d3, d4 = side(r, s, p), side(r, s, q), side(p, q, r), side(p, q, s)
    if d1 * d2 < 0 and d3 * d4 < 0:
        return True
    return ((d1 == 0 and within(r, s, p)) or (d2 == 0 and within(r, s, q)) or (d3 == 0 and within(p, q, r))
            or (d4 == 0 and within(p, q, s)))
