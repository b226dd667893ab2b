"""The pictures of `east-cache review`: each image at reduced size with its ground truth and predictions drawn
over it by how DetEval matched them (a picture with a legend strip, and a small JPEG for the page's list).

Colours (RGB) are chosen to stay apart for the common colour blindnesses: blue matched, red missed, orange false;
every outline has a dark halo so that it shows on light paper and on photos. Points are in the image's own pixel
frame (EXIF orientation applied where the frame says so, as east_cache.ingest.imageio decodes for a build), scaled
by one factor to the picture.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from east_cache.atomic import writing
from east_cache.ingest.imageio import decode_image

# What each ground-truth word and each prediction is, once matched (review.classify).
GT_MATCHED, GT_MISSED, GT_DONT_CARE = 0, 1, 2
DET_MATCHED, DET_FALSE, DET_IGNORED = 0, 1, 2
MATCHED_RGB = (30, 110, 255)        # a matched ground-truth word
MATCHED_DET_RGB = (150, 215, 255)   # the prediction(s) it matched, thinner
MISSED_RGB = (235, 25, 25)          # a cared-for word no prediction matched
FALSE_RGB = (255, 150, 0)           # a counted prediction that matched no word
DONT_CARE_RGB = (160, 160, 160)     # a don't-care word (illegible, ignore tag, small, not a quad): hatched
IGNORED_RGB = (205, 205, 205)       # a prediction dropped for lying on a don't-care word (neither helps nor hurts)
HALO_RGB = (0, 0, 0)
SMALL_WORD_PX = 10                  # px: a word whose box is narrower than this in the picture gets a thin outline
HALO_PX = 1                         # px the dark halo adds to an outline's width (anti-aliased: half each side)
FILL_ALPHA = 0.28                   # opacity of the fill of missed and false words and of don't-care regions
HATCH_STEP = 6                      # px between the diagonal lines over a don't-care word
PAGE_BACKGROUND = (96, 96, 96)      # the canvas of an image that could not be read (--skip-bad)
LEGEND = (("matched", MATCHED_RGB), ("missed", MISSED_RGB), ("false", FALSE_RGB), ("don't care", DONT_CARE_RGB),
          ("on don't care", IGNORED_RGB))
LINE_H = 14                         # px per text line of the legend strip
LEGEND_LINES = 3
MIN_FIGURE_W = 560                  # px: the legend strip needs this much, however narrow the image
SWATCH = 10                         # px, side of a legend colour square
SUBPIXEL = 2                        # bits of sub-pixel precision of the outlines (cv2 shift)
SCORE_FONT = 0.4                    # cv2 font scale of the score printed beside a false word
THUMB_QUALITY = 80                  # JPEG quality of the list's thumbnails


class Picture(NamedTuple):
    """One image's words, as review.classify found them, in its frame's px."""
    gt_points: np.ndarray       # (P, 2) float64
    gt_offsets: np.ndarray      # (N + 1,) int64
    gt_state: np.ndarray        # (N,) GT_*
    det_points: np.ndarray      # (Q, 2) float64
    det_offsets: np.ndarray     # (K + 1,) int64
    det_state: np.ndarray       # (K,) DET_*
    scores: np.ndarray          # (K,) float64, NaN where a prediction has no score


@lru_cache(maxsize=None)
def _font():
    return ImageFont.load_default()


def page_pixels(path, frame: tuple[int, int], side: int, skip_bad: bool) -> tuple[np.ndarray, float, str | None]:
    """(RGB uint8 (h, w, 3) of the frame scaled by k so that its long side is at most `side`, k, note). A JPEG is
    decoded at a reduced size (DCT scaling) first; an unreadable image is a grey canvas with skip_bad (else its
    DataError goes up)."""
    fw, fh = frame
    k = min(1.0, side / max(fw, fh))
    size = (max(1, round(fw * k)), max(1, round(fh * k)))
    try:
        decoded = decode_image(path, fw, fh, k)
    except Exception as e:   # noqa: BLE001 - a DataError (unreadable) or OSError (gone); others are ours
        if not skip_bad or not isinstance(e, (ValueError, OSError)):
            raise
        return np.full((size[1], size[0], 3), PAGE_BACKGROUND, np.uint8), k, f"not drawn: {e}"
    image = decoded.image
    if image.shape[:2] != size[::-1]:
        image = cv2.resize(np.ascontiguousarray(image), size, interpolation=cv2.INTER_AREA)
    notes = [n for n in (decoded.warning, "EXIF orientation applied" if decoded.exif_applied else None) if n]
    return np.array(image, order="C"), k, "; ".join(notes) or None   # a copy: decoded pixels may be read-only


def _polygons(points: np.ndarray, offsets: np.ndarray, k: float, which: np.ndarray) -> list[np.ndarray]:
    """The selected polygons in picture px, fixed-point with SUBPIXEL bits, for cv2."""
    return [np.rint(points[offsets[i]:offsets[i + 1]] * k * (1 << SUBPIXEL)).astype(np.int32)
            for i in np.flatnonzero(which)]


@lru_cache(maxsize=8)
def _hatch(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[:h, :w]
    return (xx + yy) % HATCH_STEP == 0


def _fill(image: np.ndarray, polygons: list, rgb, hatch: bool = False) -> None:
    if not polygons:
        return
    mask = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(mask, polygons, 1, cv2.LINE_8, shift=SUBPIXEL)
    inside = mask.astype(bool)
    image[inside] = (image[inside] * (1 - FILL_ALPHA) + np.array(rgb) * FILL_ALPHA).astype(np.uint8)
    if hatch:
        image[inside & _hatch(*image.shape[:2])] = rgb


def _outline(image: np.ndarray, polygons: list, rgb, thickness: int) -> None:
    """Each polygon outlined over a dark halo; one under SMALL_WORD_PX thin and without a halo, so that a thick
    line does not hide its text."""
    small = [min(np.ptp(p, axis=0)) < SMALL_WORD_PX << SUBPIXEL for p in polygons]
    for thin, group in ((True, [p for p, s in zip(polygons, small) if s]),
                        (False, [p for p, s in zip(polygons, small) if not s])):
        if group and not thin:
            cv2.polylines(image, group, True, HALO_RGB, thickness + HALO_PX, cv2.LINE_AA, shift=SUBPIXEL)
        if group:
            cv2.polylines(image, group, True, rgb, 1 if thin else thickness, cv2.LINE_AA, shift=SUBPIXEL)


def draw_words(image: np.ndarray, pic: Picture, k: float, thickness: int, scores: bool) -> np.ndarray:
    """The picture with pic's words drawn over it (in place): don't-care hatched, missed and false filled, then
    every outline, the important ones last; with scores, each false word's score beside it."""
    gt = lambda state: _polygons(pic.gt_points, pic.gt_offsets, k, pic.gt_state == state)  # noqa: E731
    det = lambda state: _polygons(pic.det_points, pic.det_offsets, k, pic.det_state == state)  # noqa: E731
    _fill(image, gt(GT_DONT_CARE), DONT_CARE_RGB, hatch=True)
    _fill(image, gt(GT_MISSED), MISSED_RGB)
    false = det(DET_FALSE)
    _fill(image, false, FALSE_RGB)
    _outline(image, gt(GT_DONT_CARE), DONT_CARE_RGB, 1)
    _outline(image, det(DET_IGNORED), IGNORED_RGB, 1)
    _outline(image, det(DET_MATCHED), MATCHED_DET_RGB, 1)
    _outline(image, gt(GT_MATCHED), MATCHED_RGB, thickness)
    _outline(image, gt(GT_MISSED), MISSED_RGB, thickness)
    _outline(image, false, FALSE_RGB, thickness)
    if scores:
        for poly, s in zip(false, pic.scores[pic.det_state == DET_FALSE]):
            if np.isfinite(s):
                x, y = (poly.min(axis=0) >> SUBPIXEL).tolist()
                at = (max(0, x), max(10, y - 3))
                cv2.putText(image, f"{s:.2f}", at, cv2.FONT_HERSHEY_SIMPLEX, SCORE_FONT, HALO_RGB, 3, cv2.LINE_AA)
                cv2.putText(image, f"{s:.2f}", at, cv2.FONT_HERSHEY_SIMPLEX, SCORE_FONT, FALSE_RGB, 1, cv2.LINE_AA)
    return image


def counts_of(pic: Picture) -> dict[str, int]:
    """How many words of each legend entry the picture holds."""
    return {"matched": int(np.sum(pic.gt_state == GT_MATCHED)), "missed": int(np.sum(pic.gt_state == GT_MISSED)),
            "false": int(np.sum(pic.det_state == DET_FALSE)), "don't care": int(np.sum(pic.gt_state == GT_DONT_CARE)),
            "on don't care": int(np.sum(pic.det_state == DET_IGNORED))}


def with_legend(image: np.ndarray, head: str, scores_line: str, counts: dict[str, int]) -> Image.Image:
    """The drawn picture above a strip: the image's line, the scores' line, each colour with its count."""
    h, w = image.shape[:2]
    fig = Image.new("RGB", (max(w, MIN_FIGURE_W), h + LEGEND_LINES * LINE_H + 4), "white")
    fig.paste(Image.fromarray(image), (0, 0))
    draw = ImageDraw.Draw(fig)
    draw.text((4, h + 2), head, fill="black", font=_font())
    draw.text((4, h + 2 + LINE_H), scores_line, fill="black", font=_font())
    x, y = 4, h + 2 + 2 * LINE_H
    for label, rgb in LEGEND:
        draw.rectangle((x, y + 2, x + SWATCH, y + 2 + SWATCH), fill=rgb, outline="black")
        text = f"{label} {counts[label]}"
        draw.text((x + SWATCH + 4, y), text, fill="black", font=_font())
        x += SWATCH + 16 + round(draw.textlength(text, font=_font()))
    return fig


def thumbnail(image: np.ndarray, pic: Picture, k: float, side: int) -> np.ndarray:
    """A copy of the undrawn picture (frame scale k) shrunk to `side` px on its long side, the words drawn anew at
    that scale (thin outlines drawn big and shrunk would fade)."""
    h, w = image.shape[:2]
    t = min(1.0, side / max(h, w))
    small = cv2.resize(image, (max(1, round(w * t)), max(1, round(h * t))), interpolation=cv2.INTER_AREA)
    return draw_words(small, pic, k * t, 1, scores=False)


def save_jpeg(path, image: np.ndarray) -> None:
    """A thumbnail, through the door (made again by a review: not synced)."""
    with writing(path, "wb", "--out", sync=False) as f:
        Image.fromarray(image).save(f, format="JPEG", quality=THUMB_QUALITY)
