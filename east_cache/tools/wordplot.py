"""The word-size and angle histograms of `east-cache check` as counts and as one PNG, drawn with OpenCV (no
plotting library needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from east_cache.atomic import write_atomic

HEIGHT_EDGES = [0.0] + [2.0 ** k for k in range(1, 11)] + [float("inf")]   # px: <2, 2-4, ..., 512-1024, >=1024
ANGLE_STEP = 15                                                          # degrees per angle bin
ANGLE_EDGES = list(range(-180, 181, ANGLE_STEP))
PANEL = (560, 300)       # px (width, height) of one histogram
MARGIN = (50, 30, 20, 60)   # px left, top, right, bottom around a panel's bars
BAR_BGR = (180, 110, 40)
INK = (40, 40, 40)
FONT_SCALE = 0.4


def histograms(heights: list[float], angles: list[float]) -> dict:
    """{"height_px": {"edges", "counts"}, "angle_deg": {...}}: the counts the PNG shows, for the JSON report."""
    h, _ = np.histogram(np.asarray(heights, np.float64), HEIGHT_EDGES)
    a, _ = np.histogram(np.asarray(angles, np.float64), ANGLE_EDGES)
    return {"height_px": {"edges": HEIGHT_EDGES[:-1] + ["inf"], "counts": h.tolist()},
            "angle_deg": {"edges": ANGLE_EDGES, "counts": a.tolist()}}


def draw_histograms(hist: dict, path: Path, title: str) -> None:
    """Both histograms side by side in a PNG at path."""
    import cv2
    heights = hist["height_px"]["counts"]
    height_labels = ["<2"] + [f"{int(e)}" for e in HEIGHT_EDGES[1:-1]]
    angle_labels = [str(e) if k % 2 == 0 else "" for k, e in enumerate(ANGLE_EDGES[:-1])]
    left = _panel(heights, height_labels, f"word height (px, min-area rect's short side): {sum(heights)} words")
    right = _panel(hist["angle_deg"]["counts"], angle_labels, "angle of the first edge (degrees)")
    figure = np.full((PANEL[1] + 30, 2 * PANEL[0], 3), 255, np.uint8)
    cv2.putText(figure, title[:120], (10, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, INK, 1, cv2.LINE_AA)
    figure[30:, :PANEL[0]], figure[30:, PANEL[0]:] = left, right
    ok, png = cv2.imencode(".png", figure)
    if not ok:
        raise OSError(f"cannot encode {path}")
    write_atomic(path, png.tobytes())


def _panel(counts: list[int], labels: list[str], title: str) -> np.ndarray:
    import cv2
    w, h = PANEL
    ml, mt, mr, mb = MARGIN
    img = np.full((h, w, 3), 255, np.uint8)
    top = max(1, max(counts, default=0))
    bar_w = (w - ml - mr) / max(1, len(counts))
    base = h - mb
    for k, c in enumerate(counts):
        x0, x1 = round(ml + k * bar_w + 1), round(ml + (k + 1) * bar_w - 1)
        y0 = round(base - (base - mt) * c / top)
        if c:
            cv2.rectangle(img, (x0, y0), (x1, base), BAR_BGR, -1)
        if labels[k]:
            cv2.putText(img, labels[k], (x0, base + 14), cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, INK, 1, cv2.LINE_AA)
    cv2.line(img, (ml, base), (w - mr, base), INK, 1)
    cv2.line(img, (ml, mt), (ml, base), INK, 1)
    cv2.putText(img, str(top), (4, mt + 4), cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, INK, 1, cv2.LINE_AA)
    cv2.putText(img, "0", (ml - 14, base), cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, INK, 1, cv2.LINE_AA)
    cv2.putText(img, title, (ml, h - 18), cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, INK, 1, cv2.LINE_AA)
    return img
