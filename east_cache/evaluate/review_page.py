"""The page of `east-cache review`: review_page.html (package data: its CSS and plain JS, nothing fetched) with the
images' records inline as JSON and the summary as inline SVG: a histogram of the images' hmean, and the cared-for
words, and how many of them were missed, by height and by reading angle.
"""
from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np

from east_cache.atomic import write_atomic

TEMPLATE = "review_page.html"
PLACEHOLDER = re.compile(r"__(TITLE|SUMMARY|DATA)__")
HMEAN_BINS = 10
HEIGHT_EDGES = (0, 8, 16, 32, 64, 128, np.inf)   # px, word height bins: text under 8 px is hard for EAST at 1/4
ANGLE_STEP = 30                                  # degrees per reading-angle bin, over [-180, 180)
CHART_W, CHART_H = 330, 190                      # px of one chart of the summary
MARGIN = (28, 34, 10, 44)                        # px: top (title), bottom (labels), left, right (scale)
HEADROOM = 0.88                                  # the tallest bar's share of the plot's height: room for its label
BAR_RGB, TOTAL_RGB, MISSED_RGB = "#1e6eff", "#c8c8c8", "#eb1919"   # as review_draw's matched, missed
RECORD_KEYS = ("name", "picture", "thumb", "p", "r", "h", "matched", "missed", "false", "don't care", "on don't care",
               "tags", "false_max", "size", "tsize", "note")


def _bar(x, y, w, h, fill, tip: str) -> str:
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{max(h, 0):.1f}" fill="{fill}">'
            f"<title>{html.escape(tip)}</title></rect>")


def chart(title: str, labels: list[str], totals: np.ndarray, missed: np.ndarray | None = None) -> str:
    """One bar chart as an SVG element: totals as bars, with their counts above them; where missed is given, the
    totals grey under the missed in red, with the missed share above them; labels under the bars."""
    top, bottom, left, right = MARGIN
    plot_w, plot_h = CHART_W - left - right, CHART_H - top - bottom
    peak = max(1, int(totals.max()) if len(totals) else 1)
    step, full = plot_w / max(1, len(labels)), plot_h * HEADROOM
    unit = "words" if missed is not None else "images"
    base, high, scale_x = top + plot_h, top + plot_h - full, left + plot_w + 3   # the axis, the peak's line
    parts = [f'<svg class="chart" width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="16" class="ct">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{high:.1f}" x2="{left + plot_w}" y2="{high:.1f}" stroke="#ddd"/>',
             f'<text x="{scale_x}" y="{high + 4:.1f}" class="cl">{peak}</text>',
             f'<text x="{scale_x}" y="{high + 15:.1f}" class="cl">{unit}</text>',
             f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#888"/>']
    for i, label in enumerate(labels):
        x, t, cx = left + i * step + 2, int(totals[i]), left + i * step + step / 2
        h = full * t / peak
        if missed is None:
            parts.append(_bar(x, base - h, step - 4, h, BAR_RGB, f"{label}: {t} images"))
            above = str(t) if t else ""   # a count: one bad image beside hundreds of good ones is a sliver
        else:
            m = int(missed[i])
            parts.append(_bar(x, base - h, step - 4, h, TOTAL_RGB, f"{label}: {t} words"))
            parts.append(_bar(x, base - full * m / peak, step - 4, full * m / peak, MISSED_RGB,
                              f"{label}: {m} of {t} missed"))
            above = f"{100 * m / t:.0f}%" if t else ""
        if above:
            parts.append(f'<text x="{cx:.1f}" y="{base - h - 3:.1f}" class="cl" text-anchor="middle">{above}</text>')
        parts.append(f'<text x="{cx:.1f}" y="{base + 14}" class="cl" text-anchor="middle" '
                     f'transform="rotate(-30 {cx:.1f} {base + 14})">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def summary_svg(items: list[dict]) -> str:
    """The three charts of the summary, from the items' hmean and their cared-for words' shapes."""
    hmeans = np.array([it["h"] for it in items], np.float64)
    hist = np.histogram(hmeans, HMEAN_BINS, (0.0, 1.0))[0]
    hm_labels = [f"{k / HMEAN_BINS:.1f}-{(k + 1) / HMEAN_BINS:g}" for k in range(HMEAN_BINS)]
    heights, angles, missed = (np.concatenate([it["shapes"][k] for it in items]) if items else np.zeros(0)
                               for k in range(3))
    missed = missed.astype(bool)
    edges = np.array(HEIGHT_EDGES, np.float64)
    h_labels = [f"<{edges[1]:.0f}"] + [f"{a:.0f}-{b:.0f}" for a, b in zip(edges[1:-2], edges[2:-1])] + \
               [f"\u2265{edges[-2]:.0f}"]
    a_edges = np.arange(-180, 180 + ANGLE_STEP, ANGLE_STEP)
    a_labels = [f"{a}" for a in a_edges[:-1]]

    def counts(values, bins):
        return np.histogram(values, bins)[0], np.histogram(values[missed], bins)[0]
    return "".join([chart("images by hmean", hm_labels, hist),
                    chart("words missed by height (px)", h_labels, *counts(heights, edges)),
                    chart("words missed by reading angle (deg)", a_labels, *counts(angles, a_edges))])


def record(item: dict) -> dict:
    """What the page's script knows of an image."""
    out = {k: item[k] for k in RECORD_KEYS}
    for k in ("p", "r", "h"):
        out[k] = round(float(out[k]), 4)
    return out


def write_page(path: Path, items: list[dict], result: dict, has_scores: bool, sources: dict[str, str]) -> Path:
    """index.html of the review, written atomically."""
    tags: dict[str, list[int]] = {}
    for it in items:
        for t, (n, m) in it["tags"].items():
            tags.setdefault(t, [0, 0, 0])
            tags[t][0] += n
            tags[t][1] += m
            tags[t][2] += 1
    data = {"images": [record(it) for it in items], "scores": has_scores, "tags": dict(sorted(tags.items())),
            "totals": {k: result[k] for k in ("precision", "recall", "hmean", "gt_care", "det_care", "images",
                                             "gt_dont_care", "detections")}, **sources}
    # inside <script>, "</script>" or "<!--" in an image name must not end or change the element
    inline = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    template = resources.files("east_cache.evaluate").joinpath(TEMPLATE).read_text("utf-8")
    values = {"TITLE": html.escape(f"review: {Path(sources['pred']).name}"), "SUMMARY": summary_svg(items),
              "DATA": inline}
    page = PLACEHOLDER.sub(lambda m: values[m[1]], template)   # one pass: no value is searched again
    write_atomic(path, page)
    return path
