"""The geometry a reader draws every epoch (--geometry read): one homography per crop, page px -> crop px.

A page is stored resized only (page.py page_params: height 1, angle 0). At epoch e, item (image name, variant)
draws, from crop_rng(seed, e, name, variant) alone and in the order east_cache/augment.py gives (Augment), its height
factor, angle, scale and perspective (the last two where on), then its crop. The warp (page_warp) scales the page's
height by the factor, rotates it and scales both sides, about the page's centre, as the on-the-fly pipelines do after
resizing (the centre of the canvas, not of the image in it: the two differ by a shift, which the crop draw that
follows makes irrelevant), then moves the warped canvas's box to the origin. The crop is drawn in that warped
frame by the page-mode rule (crop_draw.draw_crop: a legible word by the page's weights, then a crop holding it
that cuts no other legible word, else fewest), from the legible quads mapped by the warp. The perspective then tilts
the crop's source square (tilt: its corners moved, the quadrilateral mapped onto the crop), and the words it cuts are
those of the final matrix. A crop is then one 3 x 3 matrix, page px -> crop px (affine without a perspective): the
reader warps the page's pixels under the crop once with it (bilinear) and makes the crop's targets from the page's
words mapped by it (map_points; a homography keeps lines straight, so a quad stays a quad; make.words_in_crop, then
targets.make_targets).

No I/O. The words' weights were computed on the page unwarped (page.py; a reader's for its crop side and mean
scale, weights_side): a warp of a few degrees moves which neighbours a crop can avoid cutting only at the margins.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.sample.clip import clip_polygons
from east_cache.sample.crop_draw import crop_rng, draw_crop, grid_step
from east_cache.sample.geometry import transform_points


class EpochGeometry(NamedTuple):
    """One epoch's draw for a page, and the crop it makes."""
    height: float          # vertical scale of the page, U[1 - height_jitter, 1 + height_jitter]
    angle: float           # degrees, U[-max_rotation, max_rotation], about the page's centre (page_warp: which way)
    scale: float           # both sides' scale, U[s0, s1] (1: none drawn)
    corners: np.ndarray    # float64 (4, 2): the perspective's moves of the crop source's corners (top left, top right,
                           # bottom right, bottom left), in crop sides (zeros: none drawn)
    origin: np.ndarray     # int64 (2,): the crop's top left in the warped frame, px (on the crop grid)
    matrix: np.ndarray     # float64 (3, 3): page px -> crop px, a homography (last row 0, 0, 1 when affine)
    cut: np.ndarray        # bool (L,): the page's legible words (in their order) that the crop cuts

    @property
    def affine(self) -> bool:
        """Whether the matrix is affine (no perspective drawn): one warpAffine warps the crop."""
        return is_affine(self.matrix)


def is_affine(matrix: np.ndarray) -> bool:
    return matrix.shape == (2, 3) or (matrix[2, 0] == 0 and matrix[2, 1] == 0 and matrix[2, 2] == 1)


def page_warp(page_size: tuple[int, int], height: float, angle: float, step: int,
              scale: float = 1.0) -> tuple[np.ndarray, tuple[int, int]]:
    """(page px -> warped px (2, 3), (W', H')): the height scaled, the page rotated and both sides scaled, about its
    centre, the box of the warped canvas moved to (0, 0) and its sides rounded up to multiples of step (the crop
    grid's). The one place that says which way a rotation turns: a positive angle turns the page counter-clockwise
    on screen (y down: a point right of the centre moves up), the sign of the baseline's rotate_img and of
    cv2.getRotationMatrix2D."""
    w, h = page_size
    centre = np.array([w / 2, h / 2])
    t = math.radians(angle)
    c, s = math.cos(t), math.sin(t)
    # y points down: a turn by +t counter-clockwise on screen is [[c, s], [-s, c]]; the height scale comes first
    linear = np.array([[c * scale, s * height * scale], [-s * scale, c * height * scale]])
    warp = np.column_stack([linear, centre - linear @ centre])
    corners = transform_points(warp, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64))
    lo, hi = np.floor(corners.min(axis=0)), corners.max(axis=0)
    size = (step * math.ceil((hi[0] - lo[0]) / step), step * math.ceil((hi[1] - lo[1]) / step)) if w and h else (0, 0)
    return shifted(warp, -lo), size


def tilt(corners: np.ndarray, size: int) -> np.ndarray:
    """float64 (3, 3): the perspective of a crop of side `size` whose source square's corners (top left, top right,
    bottom right, bottom left) moved by corners (4, 2) x size: the moved quadrilateral mapped onto the square (the
    identity when nothing moved). The inverse of the square -> quadrilateral map in closed form (Heckbert 1989)."""
    (m0, n0), (m1, n1), (m2, n2), (m3, n3) = np.asarray(corners, np.float64).tolist()   # floats from here on
    if not any((m0, n0, m1, n1, m2, n2, m3, n3)):
        return np.eye(3)
    x0, y0, x1, y1 = m0 * size, n0 * size, size + m1 * size, n1 * size
    x2, y2, x3, y3 = size + m2 * size, size + n2 * size, m3 * size, size + n3 * size
    sx, sy = x0 - x1 + x2 - x3, y0 - y1 + y2 - y3
    dx1, dx2, dy1, dy2 = x1 - x2, x3 - x2, y1 - y2, y3 - y2
    den = dx1 * dy2 - dx2 * dy1
    g, h = (sx * dy2 - dx2 * sy) / den, (dx1 * sy - sx * dy1) / den
    # square -> quadrilateral (the unit square's map with its x and y divided by size), then its inverse: the adjugate
    # divided by its own last entry (the determinant cancels), in floats
    (a, b, c), (d, e, f) = ((x1 - x0 + g * x1) / size, (x3 - x0 + h * x3) / size, x0), \
        ((y1 - y0 + g * y1) / size, (y3 - y0 + h * y3) / size, y0)
    g, h = g / size, h / size
    adj = [[e - f * h, c * h - b, b * f - c * e], [f * g - d, a - c * g, c * d - a * f], [d * h - e * g, b * g - a * h,
                                                                                         a * e - b * d]]
    return np.array(adj, np.float64) / adj[2][2]


def map_points(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """float64 (..., 2): points mapped by a 2 x 3 affine matrix or a 3 x 3 homography (divided by w); an affine
    3 x 3 maps as its 2 x 3 rows do, to the bit."""
    if is_affine(matrix):
        return transform_points(matrix[:2], points)
    q = np.asarray(points, np.float64) @ matrix[:, :2].T + matrix[:, 2]
    return q[..., :2] / q[..., 2:]


FAR = 4.0        # crop sides from the crop's centre: a word that a homography maps past the horizon (w <= HORIZON),
                 # or that overlaps the crop and reaches farther than this, is clipped to the crop first (far_words)
HORIZON = 1e-6   # w of a mapped point at or past the horizon (a homography maps the crop's preimage to w > 0)
CLIP_MARGIN = 8  # crop px around the crop that a clipped word keeps: its edges lie outside every map px of the crop


def far_words(matrix: np.ndarray, points: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """bool (N,): the words (points (P, 2) page px, offsets (N + 1,)) whose mapped points a homography makes
    meaningless (a point past the horizon: a line through it is torn in two) or huge where the word meets the crop
    (near the horizon): those are clipped to the crop first. Words that map far from the crop and miss it are left
    as they are (they are dropped). None for an affine matrix."""
    return mapped_words(matrix, points, offsets, size)[1]


def mapped_words(matrix: np.ndarray, points: np.ndarray, offsets: np.ndarray,
                 size: int) -> tuple[np.ndarray, np.ndarray]:
    """(points float64 (P, 2) mapped by a homography (map_points), far_words bool (N,)): one pass over the points;
    the per-word reductions only where some point is past the horizon or farther than FAR crop sides."""
    n = max(len(offsets) - 1, 0)
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    if is_affine(matrix) or not n or not len(pts):
        return map_points(matrix, pts), np.zeros(n, bool)
    q = pts @ matrix[:, :2].T + matrix[:, 2]
    w = q[:, 2]
    xy = q[:, :2] / q[:, 2:]
    behind, huge = w <= HORIZON, np.abs(xy - size / 2) > FAR * size
    if not behind.any() and not huge.any():   # the common case
        return xy, np.zeros(n, bool)
    starts = offsets[:-1]
    behind = np.add.reduceat(behind.astype(np.int64), starts) > 0
    huge = np.add.reduceat(np.any(huge, axis=1).astype(np.int64), starts) > 0
    lo, hi = np.minimum.reduceat(xy, starts, axis=0), np.maximum.reduceat(xy, starts, axis=0)
    meets = np.all((hi > 0) & (lo < size), axis=1)
    return xy, behind | (huge & meets)


def crop_preimage(matrix: np.ndarray, size: int, margin: float = CLIP_MARGIN) -> np.ndarray:
    """float64 (4, 2): the page px of the corners of the square [-margin, size + margin]^2 (clockwise on screen),
    a convex quadrilateral on the near side of the horizon."""
    full = matrix if matrix.shape == (3, 3) else np.vstack([matrix, [0, 0, 1]])
    square = np.array([[-margin, -margin], [size + margin, -margin], [size + margin, size + margin],
                       [-margin, size + margin]], np.float64)
    return map_points(np.linalg.inv(full), square)


def cross2(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The z of the cross product of 2-D vectors u and v (..., 2), broadcast: numpy 2 deprecates np.cross of 2-D
    vectors."""
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def shifted(matrix: np.ndarray, by) -> np.ndarray:
    """matrix (2, 3) or (3, 3) followed by a shift of `by` px (x, y), a new matrix: compose(translation, matrix)
    without its 3 x 3 products (an affine matrix's last row is 0, 0, 1: its shift column alone moves)."""
    out = np.array(matrix, np.float64)
    if out.shape == (3, 3):
        out[:2] += np.outer(by, out[2])
    else:
        out[:, 2] += by
    return out


def from_shifted(matrix: np.ndarray, by) -> np.ndarray:
    """matrix (2, 3) or (3, 3) applied after a shift of `by` px: the matrix of a region that begins at `by`."""
    out = np.array(matrix, np.float64)
    out[:, 2] += out[:, :2] @ np.asarray(by, np.float64)
    return out


def quad_boxes(quads: np.ndarray) -> np.ndarray:
    """float64 (L, 4): x_lo, y_lo, x_hi, y_hi of quads (L, 4, 2)."""
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)
    return np.hstack([q.min(axis=1), q.max(axis=1)])


def weights_side(aug: Augment, step: int) -> int:
    """The crop side, page px, that a page's word weights are for under aug: the crop over the mean scale, on the
    crop grid (the crop of side S at scale s covers S / s page px)."""
    mean = (aug.scale[0] + aug.scale[1]) / 2 if aug.scales else 1.0
    return max(step, step * round(aug.input_size / mean / step))


def _coin(rng: np.random.Generator, p: float) -> bool:
    """Whether a part drawn with chance p is on: a number drawn only where p < 1."""
    return p >= 1 or bool(rng.random() < p)


def draw_geometry(rng: np.random.Generator, quads: np.ndarray, page_size: tuple[int, int], weights: np.ndarray,
                  aug: Augment, step: int, augment: bool = True) -> EpochGeometry:
    """The draw of a page whose legible quads (L, 4, 2) page px have draw weights (L,), in Augment's order: height,
    angle, scale (where on), perspective (where on), then the crop in the frame after height, angle and scale. None
    of the first four without augment: an unaugmented crop, as a validation set reads."""
    height = float(rng.uniform(1 - aug.height_jitter, 1 + aug.height_jitter)) if augment else 1.0
    angle = float(rng.uniform(-aug.max_rotation, aug.max_rotation)) if augment else 0.0
    scale, corners = 1.0, np.zeros((4, 2))
    if augment and aug.scales:
        on = _coin(rng, aug.scale_p)
        value = float(rng.uniform(*aug.scale))
        scale = value if on else 1.0
    if augment and aug.tilts:
        on = _coin(rng, aug.perspective_p)
        moves = rng.uniform(-aug.perspective, aug.perspective, size=(4, 2))
        corners = moves if on else corners
    warp, size = page_warp(page_size, height, angle, step, scale)
    boxes = quad_boxes(transform_points(warp, quads)) if len(quads) else np.zeros((0, 4))
    origin, cut = draw_crop(rng, boxes, size, aug.input_size, step, weights if len(quads) else None)
    matrix = np.vstack([shifted(warp, -origin), [0.0, 0.0, 1.0]])
    if np.any(corners):   # the crop's source square tilted: the words it cuts are those of the final matrix
        matrix = tilt(corners, aug.input_size) @ matrix
        cut = tilted_cuts(matrix, quads, aug.input_size) if len(quads) else cut
    return EpochGeometry(height, angle, scale, corners, origin, matrix, cut)


def tilted_cuts(matrix: np.ndarray, quads: np.ndarray, size: int) -> np.ndarray:
    """bool (L,): the legible quads (L, 4, 2) page px that the crop under a homography cuts: their mapped boxes
    overlap it but do not lie in it; a quad mapped partly far or past the horizon (far_words) cannot lie in it, and is
    cut where it meets the crop's preimage."""
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)
    xy, far = mapped_words(matrix, q.reshape(-1, 2), np.arange(0, 4 * len(q) + 1, 4), size)
    xy = xy.reshape(-1, 4, 2)
    v = xy[:, 0], xy[:, 1], xy[:, 2], xy[:, 3]   # cuts_at of their boxes at (0, 0), in place (and no slow reduce over
    lo = np.minimum(np.minimum(v[0], v[1]), np.minimum(v[2], v[3]))   # the 4 vertices' middle axis)
    hi = np.maximum(np.maximum(v[0], v[1]), np.maximum(v[2], v[3]))
    cut = np.all((hi > 0) & (lo < size), axis=1) & ~np.all((lo >= 0) & (hi <= size), axis=1)
    if far.any():
        inside = crop_preimage(matrix, size, 0)
        cut[far] = clip_polygons(q[far], np.broadcast_to(inside, (int(far.sum()), *inside.shape)))[1] > 0
    return cut


def epoch_geometry(cfg: BuildConfig, epoch: int, name: str, variant: int, quads: np.ndarray,
                   page_size: tuple[int, int], weights: np.ndarray, augment: bool = True,
                   aug: Augment | None = None, copy: int = 0) -> EpochGeometry:
    """The draw of page (image name, variant) at an epoch under aug (default: the cache's build values,
    Augment.of_cache): from crop_rng's generator for that key (and copy, an image's extra item of the epoch), so the
    same in every process, worker, batch order and rank, and again on an exact resume."""
    aug = Augment.of_cache(cfg) if aug is None else aug.resolve(cfg)
    return draw_geometry(crop_rng(cfg.seed, epoch, name, variant, copy), quads, page_size, weights, aug,
                         grid_step(cfg.map_scale), augment)


LEVELS = (8, 4, 2)   # the reduced levels a crop may read its page at: 1/8, 1/4, 1/2 of its px per side
LEVEL_STRETCH = 2 ** 0.5   # a reduced level is read where its px are at most sqrt 2 larger than the crop's


def read_level(matrix: np.ndarray, size: int) -> int:
    """f in (1, *LEVELS): the page is read at 1/f of its px per side for the crop of side `size` under matrix
    (page px -> crop px): the level whose px is nearest the crop's px in size, on a log scale. The crop's px size
    in page px is that of its centre, 1 / sqrt(area scale) there (the determinant of the matrix's Jacobian; a
    homography's varies over the crop); level f is read where f times the crop's local scale is at most
    LEVEL_STRETCH: a crop of scale 0.5 to 0.71 reads the half level and magnifies it by at most 1.41 (with a height
    factor, 1.41 on average over its two sides). A bilinear warp that shrinks by more than 2 skips source px
    (aliasing); from the level it shrinks by at most 1.41 (1/8: 2), the level's 2 x 2 average keeps what a crop at
    that scale shows (PSNR in docs/performance.md), and a level costs a quarter of the px to read, decode and warp
    from."""
    full = matrix if matrix.shape == (3, 3) else np.vstack([matrix, [0, 0, 1]])
    centre = map_points(np.linalg.inv(full), np.array([size / 2, size / 2], np.float64))
    w = float(full[2, :2] @ centre + full[2, 2])
    u = full[:2, :2] @ centre + full[:2, 2]
    jac = (full[:2, :2] - np.outer(u / w, full[2, :2])) / w   # d(crop px) / d(page px) at the centre's preimage
    scale = abs(float(np.linalg.det(jac))) ** 0.5
    return next((f for f in LEVELS if f * scale <= LEVEL_STRETCH + 1e-9), 1)


def level_matrix(f: int) -> np.ndarray:
    """(3, 3): px of the page's level 1/f -> page px; level px k covers page px [f k, f k + f), centre f k + (f-1)/2."""
    return np.array([[f, 0, (f - 1) / 2], [0, f, (f - 1) / 2], [0, 0, 1]], np.float64)


def source_rect(matrix: np.ndarray, size: int, margin: int = 1) -> tuple[int, int, int, int]:
    """(x, y, w, h): the page px a crop of side `size` under matrix (page px -> crop px, affine or a homography whose
    horizon lies off the crop) reads, bilinear interpolation's neighbours and `margin` px more included: the box of
    the crop's inverse image (a homography maps the square to a quadrilateral: its corners bound it)."""
    full = matrix if matrix.shape == (3, 3) else np.vstack([matrix, [0, 0, 1]])
    inverse = np.linalg.inv(full)
    edge = np.array([[-1, -1], [size, -1], [size, size], [-1, size]], np.float64)
    corners = map_points(inverse, edge)
    lo, hi = np.floor(corners.min(axis=0)) - margin, np.ceil(corners.max(axis=0)) + margin
    return int(lo[0]), int(lo[1]), int(hi[0] - lo[0]) + 1, int(hi[1] - lo[1]) + 1
