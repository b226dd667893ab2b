"""Drawing a sample to check it at a glance (render_sample), without the reader or torch: what `show` draws
(east_cache/inspect/show.py) and the pictures a training run sends its trackers (train/report/pictures.py).

Left, at 1:1 (a pixel of the PNG is a pixel of the crop): the crop, the score map in translucent red,
the sample's words outlined (green legible, orange don't-care), ROI = 0 darkened and hatched. Right:
the geometry channels and the ROI mask as small heat maps. A source page (render_page, show --source) has every
word outlined by why it is (not) a positive.
"""
from __future__ import annotations

import textwrap
from functools import lru_cache

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from east_cache.ingest.ufo import CARE, IGNORE_TAG, ILLEGIBLE, NOT_QUAD, REASONS, SMALL

SCORE_RGB = np.array([255, 0, 0], np.float32)
SCORE_ALPHA = 0.45            # opacity of the score overlay
CARE_RGB = (0, 255, 0)
DONT_CARE_RGB = (255, 170, 0)
HATCH_RGB = (200, 200, 200)   # G > (1 - SCORE_ALPHA) * 255: never mistaken for a score pixel
HATCH_STEP = 6                # px between the diagonal hatch lines over ROI = 0
DARKEN = 0.5                  # brightness kept under ROI = 0
REASON_RGB = {CARE: CARE_RGB, ILLEGIBLE: DONT_CARE_RGB, IGNORE_TAG: (255, 0, 255), NOT_QUAD: (0, 220, 255),
              SMALL: (255, 255, 0)}
GEO_NAMES = ("d_top", "d_bottom", "d_left", "d_right")
GAP = 8                       # px between panels
LABEL_H = 14                  # px of text above each small panel
CAPTION_LINES = 3             # lines of text under the figure
MIN_PANEL = 128               # px, smallest side of a heat-map panel
PAGE_SIDE = 1024              # px, long side of the source page once shrunk


@lru_cache(maxsize=None)
def _font():
    return ImageFont.load_default()


def panel_side(input_size: int) -> int:
    """Three rows of labelled panels as tall as the crop, never smaller than MIN_PANEL."""
    return max(MIN_PANEL, (input_size - 3 * (LABEL_H + GAP)) // 3)


def figure_size(input_size: int) -> tuple[int, int]:
    """(width, height) of a sample figure: the crop, a 2 x 3 grid of panels to its right, a caption below."""
    p = panel_side(input_size)
    return input_size + GAP + 2 * (p + GAP), max(input_size, 3 * (LABEL_H + p + GAP)) + CAPTION_LINES * LABEL_H


def crop_panel(image, score, roi, points, offsets, care) -> np.ndarray:
    """(S, S, 3) RGB: the crop with ROI = 0 darkened, the score overlaid, ROI = 0 hatched, the words outlined."""
    out = np.ascontiguousarray(np.transpose(image, (1, 2, 0))).astype(np.float32)
    s = out.shape[0]
    up = lambda m: cv2.resize(np.ascontiguousarray(m[0]), (s, s), interpolation=cv2.INTER_NEAREST)  # noqa: E731
    dont, positive = up(roi) == 0, up(score) > 0
    out[dont] *= DARKEN
    out[positive] = out[positive] * (1 - SCORE_ALPHA) + SCORE_RGB * SCORE_ALPHA
    out = np.rint(out).astype(np.uint8)
    yy, xx = np.mgrid[:s, :s]
    out[dont & ((xx + yy) % HATCH_STEP == 0)] = HATCH_RGB
    for k in range(len(care)):
        quad = np.rint(points[offsets[k]:offsets[k + 1]] * 4).astype(np.int32)  # 2 bits of sub-pixel precision
        cv2.polylines(out, [quad], True, CARE_RGB if care[k] else DONT_CARE_RGB, 1, cv2.LINE_8, shift=2)
    return out


def heat_panels(score, geo, roi, side: int) -> list[tuple[str, np.ndarray]]:
    """(label, (side, side, 3) RGB) for d_top, d_bottom, d_left, d_right, the angle and the ROI mask.
    Geometry is drawn only where score = 1; elsewhere it means nothing."""
    pos = score[0] > 0
    geo = geo.astype(np.float32)
    panels = []
    for k, name in enumerate(GEO_NAMES):
        top = float(geo[k][pos].max()) if pos.any() else 0.0
        panels.append((f"{name} max {top:.1f} px", _colour(geo[k] / max(top, 1e-6), pos)))
    deg = np.degrees(geo[4][pos]) if pos.any() else np.zeros(1)
    panels.append((f"angle {deg.min():.0f}..{deg.max():.0f} deg", _colour(geo[4] / np.pi + 0.5, pos)))
    grey = np.repeat((roi[0] > 0).astype(np.uint8)[..., None] * 255, 3, axis=2)
    panels.append((f"roi: {100 * (roi[0] == 0).mean():.1f}% don't care", grey))
    return [(label, cv2.resize(p, (side, side), interpolation=cv2.INTER_NEAREST)) for label, p in panels]


def _colour(unit: np.ndarray, mask: np.ndarray) -> np.ndarray:
    rgb = cv2.applyColorMap(np.clip(unit * 255, 0, 255).astype(np.uint8), cv2.COLORMAP_TURBO)[..., ::-1].copy()
    rgb[~mask] = 0
    return rgb


def render_sample(image, score, geo, roi, points, offsets, care, caption: str) -> Image.Image:
    s = image.shape[-1]
    side = panel_side(s)
    fig = Image.new("RGB", figure_size(s), "white")
    fig.paste(Image.fromarray(crop_panel(image, score, roi, points, offsets, care)), (0, 0))
    draw = ImageDraw.Draw(fig)
    for j, (label, panel) in enumerate(heat_panels(score, geo, roi, side)):
        x, y = s + GAP + (j % 2) * (side + GAP), (j // 2) * (LABEL_H + side + GAP)
        draw.text((x, y), label, fill="black", font=_font())
        fig.paste(Image.fromarray(panel), (x, y + LABEL_H))
        draw.rectangle((x - 1, y + LABEL_H - 1, x + side, y + LABEL_H + side), outline="grey")
    _caption(draw, caption, fig.size, max(s, 3 * (LABEL_H + side + GAP)))
    return fig


def _caption(draw, text: str, size: tuple, y: int) -> None:
    lines = textwrap.wrap(text, width=max(20, size[0] // 6))[:CAPTION_LINES]
    for k, line in enumerate(lines):
        draw.text((2, y + k * LABEL_H), line, fill="black", font=_font())


def words_caption(care) -> str:
    return f"{int(np.sum(care))} legible (green), {int(np.sum(care == 0))} don't-care (orange) words"


def render_page(rec, decoded) -> Image.Image:
    """The source page, shrunk to PAGE_SIDE on its long side, every word outlined in its reason's colour."""
    img = np.ascontiguousarray(decoded.image)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    h, w = img.shape[:2]
    k = min(1.0, PAGE_SIDE / max(h, w))
    page = cv2.resize(img, (max(1, round(w * k)), max(1, round(h * k))), interpolation=cv2.INTER_AREA)
    scale = np.array([decoded.sx * k, decoded.sy * k], np.float32)
    for j in range(rec.n_words):
        pts = np.rint(rec.points[rec.offsets[j]:rec.offsets[j + 1]] * scale * 4).astype(np.int32)
        cv2.polylines(page, [pts], True, REASON_RGB[int(rec.reason[j])], 1, cv2.LINE_AA, shift=2)
    fig = Image.new("RGB", (max(page.shape[1], 260), page.shape[0] + (len(REASONS) + 1) * LABEL_H), "white")
    fig.paste(Image.fromarray(page), (0, 0))
    draw = ImageDraw.Draw(fig)
    y = page.shape[0] + 2
    exif = ", EXIF orientation applied" if decoded.exif_applied else ""
    draw.text((2, y), f"{rec.name}: {rec.width}x{rec.height}{exif}, shown at {k * decoded.sx:.2f}x", fill="black",
              font=_font())
    for r, name in REASONS.items():
        y += LABEL_H
        draw.rectangle((2, y + 2, 14, y + 11), fill=REASON_RGB[r])
        draw.text((20, y), f"{name}: {int(np.sum(rec.reason == r))}", fill="black", font=_font())
    return fig
