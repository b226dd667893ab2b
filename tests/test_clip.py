"""The package's one polygon clipper (east_cache/sample/clip.py, Sutherland-Hodgman vectorised over pairs) against a
plain reference written here, one polygon and one vertex at a time: the polygons a crop keeps of a word (clip_convex,
clip_polygons) and the overlap areas NMS, DetEval and the ensembles measure (convex_intersection), on random convex
pairs, nearly equal and equal ones, pairs that miss each other and pairs that touch."""
from __future__ import annotations

import numpy as np
import pytest

from east_cache.evaluate.overlap import pairwise_iou
from east_cache.sample.clip import clip_convex, clip_polygons, convex_intersection


def reference_clip(polygon: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman as the textbook writes it: for each edge a -> b of the convex clip (its orientation from
    its area), keep each vertex p on the inner side, and where an edge p -> q crosses the line, the crossing."""
    out = [np.asarray(p, np.float64) for p in polygon]
    clip = np.asarray(clip, np.float64)
    sign = 1.0 if area_signed(clip) >= 0 else -1.0
    for a, b in zip(clip, np.roll(clip, -1, axis=0)):
        kept = []
        for p, q in zip(out, out[1:] + out[:1]):
            sp = sign * ((b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0]))
            sq = sign * ((b[0] - a[0]) * (q[1] - a[1]) - (b[1] - a[1]) * (q[0] - a[0]))
            if sp >= 0:
                kept.append(p)
            if (sp >= 0) != (sq >= 0):
                kept.append(p + (q - p) * (sp / (sp - sq)))
        out = kept
        if not out:
            break
    return np.array(out, np.float64).reshape(-1, 2)


def area_signed(p: np.ndarray) -> float:
    return 0.5 * float(np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1])) if len(p) else 0.0


def convex(rng, n: int, k: int) -> np.ndarray:
    """n random convex k-gons (k points on an ellipse, in angle order), half of them turning the other way."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, (n, k)), axis=1)
    p = rng.uniform(-50, 50, (n, 1, 2)) + rng.uniform(1, 60, (n, 1, 2)) * np.stack([np.cos(angles), np.sin(angles)], -1)
    turn = rng.random(n) < 0.5
    p[turn] = p[turn, ::-1]
    return p


def pairs(seed: int, n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = convex(rng, n, 4), convex(rng, n, 4)
    k = n // 8
    b[:k] = a[:k] + rng.normal(0, 1e-3, (k, 4, 2))     # nearly equal
    b[k:2 * k] = a[k:2 * k]                             # equal
    b[2 * k:3 * k] = a[2 * k:3 * k] + [500.0, 0.0]      # apart
    right = a[3 * k:4 * k, :, 0].max(axis=1, keepdims=True)   # touching: b's leftmost point on a's rightmost x
    b[3 * k:4 * k, :, 0] += right - b[3 * k:4 * k, :, 0].min(axis=1, keepdims=True)
    return a, b


def same_polygon(x: np.ndarray, y: np.ndarray) -> bool:
    """The same vertices in the same cyclic order (a clipper may start the cycle elsewhere)."""
    return len(x) == len(y) and (not len(x) or any(np.allclose(np.roll(x, r, axis=0), y, rtol=0, atol=1e-9)
                                                   for r in range(len(x))))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_areas_are_those_of_the_plain_clipper(seed):
    a, b = pairs(seed)
    want = np.array([abs(area_signed(reference_clip(p, c))) for p, c in zip(a, b)])
    np.testing.assert_allclose(convex_intersection(a, b), want, rtol=1e-9, atol=1e-9)
    n = len(a) // 8
    whole = np.abs([area_signed(p) for p in a[n:2 * n]])
    np.testing.assert_allclose(convex_intersection(a[n:2 * n], b[n:2 * n]), whole, rtol=1e-12)   # equal quads: whole
    assert not convex_intersection(a[2 * n:3 * n], b[2 * n:3 * n]).any()
    iou = pairwise_iou(a, b)
    assert np.all((iou >= 0) & (iou <= 1 + 1e-12))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_polygons_are_those_of_the_plain_clipper(seed):
    """Any simple polygon (here convex ones of 3 to 8 vertices) against a convex clip of either orientation: the same
    polygon, or none where they do not meet."""
    rng = np.random.default_rng(seed + 10)
    clips = convex(rng, 1500, 4)
    clips[::3] += 200.0   # a third apart
    for k, clip in enumerate(clips):
        polygon = convex(rng, 1, int(rng.integers(3, 9)))[0]
        want, got = reference_clip(polygon, clip), clip_convex(polygon, clip)
        assert same_polygon(want, got), (k, want, got)


def test_clipped_rows_keep_their_own_polygons_and_a_missed_one_stays_empty():
    """clip_polygons over many pairs: a row's first counts[k] points are its polygon; a polygon clipped away by one
    edge is not revived by a later one (its collapsed vertex may lie inside it)."""
    a, b = pairs(2, 800)
    points, counts = clip_polygons(a, b)
    for k in range(len(a)):
        want = reference_clip(a[k], b[k])
        assert (counts[k] > 0) == (len(want) > 0), k
        if counts[k]:
            assert abs(abs(area_signed(points[k, :counts[k]])) - abs(area_signed(want))) < 1e-9
    far = np.array([[[1000.0, 0], [1010, 0], [1010, 10], [1000, 10]]])
    square = np.array([[[0.0, 0], [10, 0], [10, 10], [0, 10]]])
    assert clip_polygons(far, square)[1][0] == 0 and clip_convex(far[0], square[0]).shape == (0, 2)

