"""Pure geometry: EAST quad shrinking and angles, and the augmentation as one affine map.

numpy maths only, no I/O. Randomness is passed in as a np.random.Generator so that a
sample depends only on the generator's seed. Coordinates are in pixels, x right, y down, with the
same convention as cv2 (integer coordinates are pixel centres); matrices are 2x3 float64 affine
maps, p' = M[:, :2] @ p + M[:, 2].
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

SHRINK_RATIO = 0.3          # EAST (Zhou et al. 2017, sec. 3.3.1): each edge moves in by 0.3 * r_i
MIN_EDGE_TO_SHRINK = 1.0    # px; shorter edges are left alone (and never divided by)
ANGLES_DEG = np.arange(-90, 90, 1)  # the 1-degree grid min_rect_angles searches, [-90, 90)
ANGLE_CANDIDATES = 10       # smallest-area angles among which the best vertex order is chosen
ANGLES_RAD = np.deg2rad(ANGLES_DEG.astype(np.float64))
ANGLES_COS, ANGLES_SIN = np.cos(ANGLES_RAD), np.sin(ANGLES_RAD)


def signed_polygon_area(points: np.ndarray) -> np.ndarray:
    """Shoelace area of polygons (..., K, 2), in px^2: positive where a polygon runs clockwise on screen (y down),
    i.e. with its interior on the left of each edge in y-up axes. Each vertex's successor by indexing, not np.roll:
    NMS and DetEval call this thousands of times on tiny arrays, where np.roll's overhead dominates."""
    nxt = points[..., (np.arange(points.shape[-2]) + 1) % points.shape[-2], :]
    return 0.5 * np.sum(points[..., 0] * nxt[..., 1] - nxt[..., 0] * points[..., 1], axis=-1)


def polygon_area(points: np.ndarray) -> np.ndarray:
    """Unsigned shoelace area of polygons (..., K, 2), in px^2."""
    return np.abs(signed_polygon_area(points))


def gather_quads(points: np.ndarray, offsets: np.ndarray, words: np.ndarray) -> np.ndarray:
    """(n, 4, 2) float64: the points of the words selected by the bool mask `words` (N,), which must
    all be quads; word k is points[offsets[k]:offsets[k + 1]]."""
    idx = np.flatnonzero(words)
    counts = offsets[idx + 1] - offsets[idx]
    if np.any(counts != 4):
        raise ValueError(f"legible words {idx[counts != 4].tolist()} have other than 4 points; only quads can be "
                         f"positives (make them don't-care)")
    return np.asarray(points, np.float64)[offsets[idx][:, None] + np.arange(4)].reshape(-1, 4, 2)


def _edge_lengths(quads: np.ndarray) -> np.ndarray:
    """(N, 4): |v_i v_{i+1}|."""
    return np.linalg.norm(quads - np.roll(quads, -1, axis=1), axis=-1)


def shrink_quads(quads: np.ndarray) -> np.ndarray:
    """EAST's shrunk quads (N, 4, 2): the longer pair of opposite edges moves in first, each
    vertex by SHRINK_RATIO times its shorter adjacent edge r_i. As in the reference EAST code,
    both ends of an edge move along the edge's direction taken before either moves."""
    q = np.array(quads, dtype=np.float64).reshape(-1, 4, 2)
    edges = _edge_lengths(q)
    r = np.minimum(edges, np.roll(edges, 1, axis=1))
    offset = (edges[:, 0] + edges[:, 2] <= edges[:, 1] + edges[:, 3]).astype(np.int64)
    rows = np.arange(len(q))
    for start in (0, 2, 1, 3):
        a, b = (start + offset) % 4, (start + 1 + offset) % 4
        d = q[rows, b] - q[rows, a]
        length = np.linalg.norm(d, axis=-1)
        safe = np.where(length > MIN_EDGE_TO_SHRINK, length, 1.0)
        move = (length > MIN_EDGE_TO_SHRINK) * SHRINK_RATIO / safe
        q[rows, a] += (r[rows, a] * move)[:, None] * d
        q[rows, b] -= (r[rows, b] * move)[:, None] * d
    return q


def rotated_boxes(quads: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """(N, 4) xmin, xmax, ymin, ymax of each quad (N, 4, 2) rotated by R(theta) = [[cos, -sin],
    [sin, cos]] about its first vertex v0 (p' = R (p - v0) + v0)."""
    q = np.asarray(quads, dtype=np.float64).reshape(-1, 4, 2)
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    d = q - q[:, :1]
    x = c * d[..., 0] - s * d[..., 1] + q[:, :1, 0]
    y = s * d[..., 0] + c * d[..., 1] + q[:, :1, 1]
    return np.stack([x.min(axis=1), x.max(axis=1), y.min(axis=1), y.max(axis=1)], axis=1)


def min_rect_angles(quads: np.ndarray) -> np.ndarray:
    """(N,) radians in [-pi/2, pi/2): the grid angle whose rotation (about v0) gives the smallest
    axis-aligned box, chosen among the ANGLE_CANDIDATES smallest by the vertex-order error: the
    summed distance of v0..v3 to the box corners (xmin,ymin), (xmax,ymin), (xmax,ymax), (xmin,ymax)."""
    q = np.asarray(quads, dtype=np.float64).reshape(-1, 4, 2)
    theta = ANGLES_RAD
    # x, y: (4, N, A) vertices rotated by every grid angle about v0; vertex-major so that the
    # reductions over the 4 vertices run over contiguous (N, A) planes. v0 stays where it is (its offsets are 0:
    # c 0 - s 0 + ax is ax), so only v1..v3 are rotated, in place, each op as written
    ax, ay = q[:, 0, 0, None], q[:, 0, 1, None]
    dx, dy = (q[:, 1:, 0] - q[:, :1, 0]).T[..., None], (q[:, 1:, 1] - q[:, :1, 1]).T[..., None]
    c, s = ANGLES_COS, ANGLES_SIN
    x, y = np.empty((4, len(q), len(theta))), np.empty((4, len(q), len(theta)))
    x[0], y[0] = ax, ay
    np.multiply(c, dx, out=x[1:])
    x[1:] -= s * dy
    x[1:] += ax
    np.multiply(s, dx, out=y[1:])
    y[1:] += c * dy
    y[1:] += ay
    area = (x.max(axis=0) - x.min(axis=0)) * (y.max(axis=0) - y.min(axis=0))
    best = np.argsort(area, axis=1, kind="stable")[:, :ANGLE_CANDIDATES]  # (N, C)
    x = np.take_along_axis(x, best[None], axis=2)
    y = np.take_along_axis(y, best[None], axis=2)
    x0, x1, y0, y1 = x.min(axis=0), x.max(axis=0), y.min(axis=0), y.max(axis=0)
    error = (np.hypot(x[0] - x0, y[0] - y0) + np.hypot(x[1] - x1, y[1] - y0)
             + np.hypot(x[2] - x1, y[2] - y1) + np.hypot(x[3] - x0, y[3] - y1))
    return theta[best[np.arange(len(q)), np.argmin(error, axis=1)]]


# --- augmentation: resize, height jitter, rotation and crop as one affine map -----------------

class AugParams(NamedTuple):
    resize: float    # frame px -> resized px, so that the long side becomes cfg.image_size
    height: float    # extra vertical scale, U[1 - height_jitter, 1 + height_jitter]
    angle: float     # degrees, U[-max_rotation, max_rotation], about the resized image's centre


def sample_params(rng: np.random.Generator, frame_w: int, frame_h: int, cfg) -> AugParams:
    """Draws the height jitter, then the angle (this order is part of the sample's definition)."""
    height = rng.uniform(1 - cfg.height_jitter, 1 + cfg.height_jitter)
    angle = rng.uniform(-cfg.max_rotation, cfg.max_rotation)
    return AugParams(cfg.image_size / max(frame_w, frame_h), float(height), float(angle))


def compose(*matrices: np.ndarray) -> np.ndarray:
    """compose(A, B, C) applies C first, then B, then A (like A @ B @ C)."""
    out = np.eye(3)
    for m in matrices:
        out = out @ np.vstack([m, [0.0, 0.0, 1.0]])
    return out[:2]


def _linear(a: float, b: float, c: float, d: float, tx: float = 0.0, ty: float = 0.0) -> np.ndarray:
    return np.array([[a, b, tx], [c, d, ty]], dtype=np.float64)


def rotation_matrix(p: AugParams, frame_w: int, frame_h: int) -> np.ndarray:
    """Frame px -> the resized, jittered, rotated image (before the crop): the build's warp (--geometry build pages,
    --crop build crops). A positive angle turns the image clockwise on screen (y down), the other way from the
    reader's turn (epoch_geometry.page_warp); the angle is drawn from U[-r, r], so both draw the same turns, and this
    sign stays as it is so that the caches built with it stay valid (the build fingerprint hashes this code)."""
    sx, sy = p.resize, p.resize * p.height
    cx, cy = frame_w * sx / 2, frame_h * sy / 2
    t = np.deg2rad(p.angle)
    c, s = np.cos(t), np.sin(t)
    return compose(_linear(1, 0, 0, 1, cx, cy), _linear(c, -s, s, c), _linear(1, 0, 0, 1, -cx, -cy),
                   _linear(sx, 0, 0, sy))


def image_extent(p: AugParams, frame_w: int, frame_h: int) -> np.ndarray:
    """(x0, y0, x1, y1): the box around the frame's corners after rotation_matrix."""
    corners = transform_points(rotation_matrix(p, frame_w, frame_h),
                               np.array([[0, 0], [frame_w, 0], [frame_w, frame_h], [0, frame_h]], np.float64))
    return np.concatenate([corners.min(axis=0), corners.max(axis=0)])


def augment_matrix(p: AugParams, frame_w: int, frame_h: int, origin) -> np.ndarray:
    """Frame px -> crop px: rotation_matrix, then the crop's origin moved to (0, 0)."""
    return compose(_linear(1, 0, 0, 1, -origin[0], -origin[1]), rotation_matrix(p, frame_w, frame_h))


def transform_points(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Points (..., 2) mapped by the 2x3 matrix m (float64)."""
    return np.asarray(pts, np.float64) @ m[:, :2].T + m[:, 2]
