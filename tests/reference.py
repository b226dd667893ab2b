"""A plain reference for east_cache.sample.targets.make_targets, written straight from the definition in
its module docstring (and docs/architecture.md, "Targets") and independently of east_cache.sample.geometry: one word at a time, over the whole map, with
Python loops where they are clearest. Slow on purpose; the fast code must agree with it.
"""
from __future__ import annotations

import math

import cv2
import numpy as np


def rotate(points, theta, anchor):
    """Points (K, 2) rotated by [[cos, -sin], [sin, cos]] about anchor."""
    c, s = math.cos(theta), math.sin(theta)
    out = []
    for x, y in points:
        dx, dy = x - anchor[0], y - anchor[1]
        out.append((c * dx - s * dy + anchor[0], s * dx + c * dy + anchor[1]))
    return np.array(out)


def distance(a, b):
    return math.hypot(a[0] - b[0], a[1] - b[1])


def shrink(quad, ratio=0.3):
    v = [list(map(float, p)) for p in quad]
    r = [min(distance(v[i], v[(i + 1) % 4]), distance(v[i], v[(i - 1) % 4])) for i in range(4)]
    long_first = distance(v[0], v[1]) + distance(v[2], v[3]) > distance(v[1], v[2]) + distance(v[3], v[0])
    offset = 0 if long_first else 1
    for a, b in [(0, 1), (2, 3), (1, 2), (3, 4)]:
        a, b = (a + offset) % 4, (b + offset) % 4
        length = distance(v[a], v[b])
        if length > 1:
            ex, ey = v[b][0] - v[a][0], v[b][1] - v[a][1]  # taken before either end moves
            ka, kb = r[a] * ratio / length, r[b] * ratio / length
            v[a] = [v[a][0] + ka * ex, v[a][1] + ka * ey]
            v[b] = [v[b][0] - kb * ex, v[b][1] - kb * ey]
    return np.array(v)


def box(points):
    xs, ys = points[:, 0], points[:, 1]
    return xs.min(), xs.max(), ys.min(), ys.max()


def min_rect_angle(quad):
    angles = list(range(-90, 90))
    areas = []
    for deg in angles:
        x0, x1, y0, y1 = box(rotate(quad, deg / 180 * math.pi, quad[0]))
        areas.append((x1 - x0) * (y1 - y0))
    order = sorted(range(len(angles)), key=lambda i: areas[i])
    best, best_error = None, math.inf
    for i in order[:10]:
        r = rotate(quad, angles[i] / 180 * math.pi, quad[0])
        x0, x1, y0, y1 = box(r)
        error = (distance(r[0], (x0, y0)) + distance(r[1], (x1, y0)) + distance(r[2], (x1, y1))
                 + distance(r[3], (x0, y1)))
        if error < best_error:
            best, best_error = i, error
    return angles[best] / 180 * math.pi


def fill(dst, points, value):
    """cv2.fillPoly of integer points as if dst had no border: on a canvas padded to hold the polygon."""
    pad = int(max(0, -points.min(), points.max() - min(dst.shape))) + 1
    canvas = np.zeros((dst.shape[0] + 2 * pad, dst.shape[1] + 2 * pad), np.uint8)
    cv2.fillPoly(canvas, [points + pad], 1)
    dst[canvas[pad:pad + dst.shape[0], pad:pad + dst.shape[1]] > 0] = value


def reference_targets(points, offsets, care, input_size, map_scale):
    m = int(round(input_size * map_scale))
    score = np.zeros((m, m), np.uint8)
    geo = np.zeros((5, m, m), np.float32)
    roi = np.ones((m, m), np.uint8)
    ys, xs = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    px, py = xs / map_scale, ys / map_scale
    for k in range(len(care)):
        word = np.asarray(points[offsets[k]:offsets[k + 1]], np.float64)
        if not care[k]:
            if len(word) >= 3:
                fill(roi, np.around(word * map_scale).astype(np.int32), 0)
            continue
        mask = np.zeros((m, m), np.uint8)
        fill(mask, np.around(shrink(word) * map_scale).astype(np.int32), 1)
        inside = mask > 0
        theta = min_rect_angle(word)
        c, s = math.cos(theta), math.sin(theta)
        ax, ay = word[0]
        rx = c * (px - ax) - s * (py - ay) + ax
        ry = s * (px - ax) + c * (py - ay) + ay
        x0, x1, y0, y1 = box(rotate(word, theta, word[0]))
        maps = [ry - y0, y1 - ry, rx - x0, x1 - rx]
        for ch, d in enumerate(maps):
            geo[ch][inside] = np.maximum(d, 0)[inside]
        geo[4][inside] = theta
        score[inside] = 1
    return score, geo, roi
