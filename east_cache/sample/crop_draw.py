"""The crop draw, both crop modes in one place: where a crop may lie, which one a sample or an epoch takes.

A crop is a square of S = input_size px at origin o; it *cuts* a legible word when their boxes overlap
(strictly) but the word's box is not inside the crop (cuts_at). Both modes avoid cutting legible words,
since a cut word must become don't-care:
- --crop build (choose_crop, make_sample's draw): up to crop_tries origins drawn uniformly over the
  rotated image; the first that cuts no legible word wins, failing that the one that cuts fewest.
- --crop read (draw_crop, the rule; a reader draws by it every epoch): origins lie on a grid of
  grid_step(s) page px, so that origin x s is an even number of map pixels: the image and the maps are
  cut at the same place, and np.around (half to even) gives the same map vertices whether a word is
  rounded before or after the shift. For origins on the grid, "the crop overlaps word w" and "the crop
  contains w" each hold on a rectangle of grid indices, so 2-D difference arrays over all words count,
  for every origin at once, the words it cuts (cut_counts). The draw: a legible word, with the page's
  word weights (word_weights: chosen at build time so that the least-seen word of the page is seen as
  often as it can be; a uniform draw would show a word that no crop holds without cutting a neighbour
  only once in L epochs), then an origin uniformly among those whose crop holds it whole and cuts no
  legible word; failing that, among those holding it that cut the fewest (the caller makes the cut
  words don't-care); a word that no crop can hold takes the origins whose crop overlaps it. A page
  without legible words takes any origin. The generator (crop_rng) is keyed by (seed, epoch, image
  name, variant), so a crop does not depend on loader workers, batch order or ranks.

The rule is part of what a build computes (the word weights assume it), so the build fingerprint hashes
this module's code (build/fingerprint.py). CropDraw, the rule's fast form for a page drawn from again and
again, and crop_rng only draw by it at read time: the fingerprint leaves them out (READ_ONLY there), so
making them faster rebuilds no cache; tests/test_crop_draw.py checks that CropDraw draws what draw_crop
draws. CropDraw computes once per page what no draw changes: the cut counts at every origin (unless there
are more than COUNTS_CELLS_MAX), each word's region of origins and the cumulative draw probabilities; and
on a word's first draw, its best origins (those with the fewest cuts, in the row-major order draw_crop
picks from), kept while the reader's budget for them lasts. A draw is then two generator calls, the same
as draw_crop's, and an index; the cut words are counted only where the kept count at the drawn origin is
not 0.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from east_cache.budget import ByteBudget

CROP_BATCH = 64              # --crop build: candidate crops tested at once by choose_crop
WEIGHT_ROUNDS = 200          # multiplicative-weights rounds (word_weights)
WEIGHT_RATE = 0.5            # multiplicative-weights learning rate
COUNTS_CELLS_MAX = 1 << 22   # origins whose cut counts a CropDraw keeps per page (uint16: 8 MiB); beyond: per draw
CROP_RNG_SALT = b"east-window"   # part of every crop's key (crop_rng): changing it changes every crop

_thread = threading.local()   # each thread's crop generator (crop_rng)


# --- --crop build: make_sample's crop

def choose_crop(rng: np.random.Generator, quads: np.ndarray, care: np.ndarray, extent, input_size: int,
                tries: int) -> tuple[np.ndarray, np.ndarray]:
    """Origin (2,) of a square input_size crop that cuts no legible quad, and the (N,) quads it cuts.

    Up to `tries` origins are drawn uniformly, CROP_BATCH at a time, so that the crop lies within
    the image's extent (x0, y0, x1, y1) or, along an axis where the image is smaller than the crop,
    holds the whole image (the rest is zero padding). The first origin cutting no legible quad
    wins; failing that the one cutting the fewest, whose cut quads the caller makes don't-care.
    """
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)[np.asarray(care, bool)]
    boxes = np.hstack([q.min(axis=1), q.max(axis=1)])
    x0, y0, x1, y1 = (float(v) for v in extent)
    low = np.array([min(x0, x1 - input_size), min(y0, y1 - input_size)])
    high = np.array([max(x0, x1 - input_size), max(y0, y1 - input_size)])
    best, best_cuts, tries = None, None, max(tries, 1)
    for start in range(0, tries, CROP_BATCH):
        origins = rng.uniform(low, high, size=(min(CROP_BATCH, tries - start), 2))
        counts = cuts_at(boxes, origins, input_size).sum(axis=1)
        i = int(np.argmin(counts))
        if best_cuts is None or counts[i] < best_cuts:
            best, best_cuts = origins[i], counts[i]
        if best_cuts == 0:
            break
    cut = np.zeros(len(care), bool)
    cut[np.asarray(care, bool)] = cuts_at(boxes, best, input_size)
    return best, cut


# --- --crop read: the rule

def grid_step(map_scale: float) -> int:
    """Crop origins' grid in page px: 4 at map scale 0.5, 8 at 0.25 (origin x s an even integer)."""
    return int(round(2 / map_scale))


def word_boxes(points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """float64 (N, 4): x_lo, y_lo, x_hi, y_hi of each word's points."""
    if len(offsets) < 2:
        return np.zeros((0, 4))
    pts = np.asarray(points, np.float64)
    return np.hstack([np.minimum.reduceat(pts, offsets[:-1], axis=0), np.maximum.reduceat(pts, offsets[:-1], axis=0)])


def origin_bounds(page_size: tuple[int, int], size: int, step: int) -> np.ndarray:
    """int64 (2, 2) [[ix_lo, iy_lo], [ix_hi, iy_hi]]: grid indices of the allowed origins, inclusive: the crop
    stays on the page or, along a side shorter than the crop, holds all of it (page sides are multiples of step)."""
    page = np.asarray(page_size, np.int64)
    return np.array([np.minimum(0, page - size), np.maximum(0, page - size)]) // step


def overlap_span(boxes: np.ndarray, size: int, step: int) -> np.ndarray:
    """int64 (N, 2, 2): per word, [[ix0, iy0], [ix1, iy1]] inclusive, the grid origins whose crop overlaps it:
    hi > o and lo < o + S."""
    return np.stack([np.floor((boxes[:, :2] - size) / step) + 1, np.ceil(boxes[:, 2:] / step) - 1], 1).astype(np.int64)


def inside_span(boxes: np.ndarray, size: int, step: int) -> np.ndarray:
    """int64 (N, 2, 2): the grid origins whose crop holds the word whole: o <= lo and hi <= o + S."""
    return np.stack([np.ceil((boxes[:, 2:] - size) / step), np.floor(boxes[:, :2] / step)], 1).astype(np.int64)


def cut_counts(boxes: np.ndarray, region: np.ndarray, size: int, step: int) -> np.ndarray:
    """int32 (ny, nx): for every grid origin in region [[ix0, iy0], [ix1, iy1]] (inclusive), the legible words
    (boxes) its crop cuts: +1 over each word's overlap rectangle, -1 over its inside rectangle."""
    ny, nx = region[1, 1] - region[0, 1] + 2, region[1, 0] - region[0, 0] + 2
    corners, signs = [], []
    for span, sign in ((overlap_span(boxes, size, step), 1), (inside_span(boxes, size, step), -1)):
        a = np.maximum(span[:, 0], region[0]) - region[0]       # (N, 2) clipped corners, region-relative
        b = np.minimum(span[:, 1], region[1]) - region[0] + 1   # exclusive
        ok = np.all(b > a, axis=1)
        a, b = a[ok], b[ok]
        corners += [a[:, 1] * nx + a[:, 0], a[:, 1] * nx + b[:, 0], b[:, 1] * nx + a[:, 0], b[:, 1] * nx + b[:, 0]]
        signs += [np.full(len(a), v * sign) for v in (1, -1, -1, 1)]
    diff = np.bincount(np.concatenate(corners), np.concatenate(signs).astype(np.float64), ny * nx)
    # summed along rows, then along the rows of a transposed copy: a cumulative sum down columns strides through
    # memory and takes several times as long
    counts = diff.astype(np.int32).reshape(ny, nx).cumsum(axis=1, dtype=np.int32).T.copy()
    np.cumsum(counts, axis=1, out=counts)
    return np.ascontiguousarray(counts.T[:-1, :-1])


def cuts_at(boxes: np.ndarray, origins, size: float) -> np.ndarray:
    """bool (N,) for one origin (x, y), (C, N) for origins (C, 2): the words (boxes (N, 4): x_lo, y_lo, x_hi, y_hi)
    that the crop of side `size` at the origin cuts: their boxes overlap, strictly, but the word's box is not
    inside the crop."""
    o = np.asarray(origins, np.float64)[..., None, :] if np.ndim(origins) > 1 else np.asarray(origins, np.float64)
    overlaps = np.all((boxes[:, 2:] > o) & (boxes[:, :2] < o + size), axis=-1)
    inside = np.all((boxes[:, :2] >= o) & (boxes[:, 2:] <= o + size), axis=-1)
    return overlaps & ~inside


def _clip(span: np.ndarray, bounds: np.ndarray) -> np.ndarray | None:
    r = np.array([np.maximum(span[0], bounds[0]), np.minimum(span[1], bounds[1])])
    return r if np.all(r[1] >= r[0]) else None


def _uniform(rng: np.random.Generator, region: np.ndarray) -> np.ndarray:
    return np.array([rng.integers(region[0, a], region[1, a] + 1) for a in range(2)], np.int64)


def _region(boxes: np.ndarray, w: int, bounds: np.ndarray, size: int, step: int) -> np.ndarray:
    """[[ix0, iy0], [ix1, iy1]]: the origins the draw for word w looks at: those holding it whole, else those
    showing part of it, else all."""
    region = _clip(inside_span(boxes[w:w + 1], size, step)[0], bounds)
    if region is None:   # no crop holds the word: among those that show part of it
        region = _clip(overlap_span(boxes[w:w + 1], size, step)[0], bounds)
    return bounds if region is None else region


def _candidates(boxes: np.ndarray, w: int, bounds: np.ndarray, size: int, step: int,
                counts: np.ndarray | None = None, region: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(region, bool mask over it): the origins the draw for word w picks from, uniformly. counts: cut_counts
    over all of bounds when the caller has them (page_counts), else counted over the region alone; region:
    _region's, when the caller has it."""
    region = _region(boxes, w, bounds, size, step) if region is None else region
    if counts is None:
        counts = cut_counts(boxes, region, size, step)
    else:
        lo, hi = region - bounds[0]
        counts = counts[lo[1]:hi[1] + 1, lo[0]:hi[0] + 1]
    return region, counts == counts.min()


def page_counts(boxes: np.ndarray, page_size: tuple[int, int], size: int, step: int) -> np.ndarray:
    """(ny, nx): cut_counts at every allowed origin of a page (origin_bounds): computed once per page, it
    turns each later draw's count into a slice (CropDraw). uint16 where the counts fit (a page holds fewer
    legible words than that), so that a draw reads half as many bytes."""
    counts = cut_counts(boxes, origin_bounds(page_size, size, step), size, step)
    return counts.astype(np.uint16) if len(boxes) <= np.iinfo(np.uint16).max else counts


def _draw_probabilities(weights: np.ndarray) -> np.ndarray:
    """Stored as float32: normalised again in float64 so that Generator.choice accepts them."""
    p = np.asarray(weights, np.float64)
    return p / p.sum()


def _pick(rng: np.random.Generator, region: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Grid indices of an origin drawn uniformly among region's where ok (a mask over region)."""
    best = np.flatnonzero(ok.ravel())
    iy, ix = divmod(int(best[rng.integers(len(best))]), ok.shape[1])
    return region[0] + (ix, iy)


def draw_grid_origin(rng: np.random.Generator, boxes: np.ndarray, bounds: np.ndarray, size: int, step: int,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """Grid indices (ix, iy) of the crop drawn for legible word boxes (L, 4) within bounds (origin_bounds);
    the origin is step times that, in page px. The word is drawn with probabilities `weights` (word_weights),
    uniformly without them."""
    if not len(boxes):
        return _uniform(rng, bounds)
    w = (int(rng.integers(len(boxes))) if weights is None
         else int(rng.choice(len(boxes), p=_draw_probabilities(weights))))
    return _pick(rng, *_candidates(boxes, w, bounds, size, step))


def _regions(boxes: np.ndarray, bounds: np.ndarray, size: int, step: int) -> np.ndarray:
    """int64 (L, 2, 2): _region of every word at once."""
    out = np.broadcast_to(bounds, (len(boxes), 2, 2)).copy()
    for span in (overlap_span(boxes, size, step), inside_span(boxes, size, step)):   # the later one wins
        lo, hi = np.maximum(span[:, 0], bounds[0]), np.minimum(span[:, 1], bounds[1])
        ok = np.all(hi >= lo, axis=1)
        out[ok, 0], out[ok, 1] = lo[ok], hi[ok]
    return out


def _prefix_sums_t(mask: np.ndarray) -> np.ndarray:
    """int32 (nx + 1, ny + 1): the 2-D prefix sums of bool (ny, nx) mask, transposed ([x, y]: the sum over [0, x) x
    [0, y)), a zero row and column first. Both sums run along rows in memory, a transposed copy between them: a
    cumulative sum down columns walks memory with a stride and takes several times as long."""
    out = np.zeros((mask.shape[1] + 1, mask.shape[0] + 1), np.int32)   # a page has far fewer origins than 2**31
    np.cumsum(mask.cumsum(axis=1, dtype=np.int32).T.copy(), axis=1, out=out[1:, 1:])
    return out


def _corners(lo: np.ndarray, hi: np.ndarray, ny: int) -> np.ndarray:
    """int64 (..., 4): flat indices into a _prefix_sums_t table of the rectangles [lo, hi) ((x, y) grid indices
    within the table, lo <= hi) at their (hi, hi), (lo, hi), (hi, lo), (lo, lo) corners, whose signed sum is the
    rectangle's."""
    x0, x1 = lo[..., 0] * (ny + 1), hi[..., 0] * (ny + 1)
    return np.stack([x1 + hi[..., 1], x0 + hi[..., 1], x1 + lo[..., 1], x0 + lo[..., 1]], -1)


def _rect_sums(table: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """The sums over the rectangles whose _corners are given, from a _prefix_sums_t table."""
    v = table.ravel()[corners]
    return v[..., 0] - v[..., 1] - v[..., 2] + v[..., 3]


def seen_matrix(boxes: np.ndarray, page_size: tuple[int, int], size: int, step: int) -> np.ndarray:
    """float64 (L, L): P[w, u], the chance that the crop drawn for word w holds word u whole: among the draw's
    candidate origins for w (those of its region with the fewest cuts, _candidates), the share inside u's
    inside rectangle.

    All words at once: the candidates of w are the cells of its region whose cut count is the region's least, v;
    for every count v that is some region's least, one table of 2-D prefix sums of (counts <= v) over the page's
    origins answers, by four lookups per pair, how many of those cells lie in each word's inside rectangle (below v
    there are none in w's region). A handful of tables, where a word at a time took two cumulative sums over its
    region per word and frame."""
    bounds, inside = origin_bounds(page_size, size, step), inside_span(boxes, size, step)
    counts = page_counts(boxes, page_size, size, step)
    n, ny = len(boxes), counts.shape[0]
    regions = _regions(boxes, bounds, size, step) - bounds[0]   # (L, 2, 2) inclusive, counts' indices
    lo, hi = regions[:, 0], regions[:, 1] + 1
    region = _corners(lo, hi, ny)   # (L, 4)
    # every word's inside rectangle met with every region, (L, L, 4), the same for every table: its corners kept
    # within the region, an empty one as a rectangle of no width or height (its sum 0)
    a = np.minimum(np.maximum(inside[None, :, 0] - bounds[0], lo[:, None]), hi[:, None])   # np.clip: the same, slower
    pairs = _corners(a, np.minimum(np.maximum(inside[None, :, 1] - bounds[0] + 1, a), hi[:, None]), ny)
    seen, todo = np.zeros((n, n)), np.arange(n)
    for v in range(int(counts.min()), int(counts.max()) + 1):   # the least counts are small: a few rounds
        table = _prefix_sums_t(counts <= v)
        total = _rect_sums(table, region[todo])
        found = total > 0   # the words whose region's least count is v
        if found.any():
            seen[todo[found]] = _rect_sums(table, pairs[todo[found]]) / total[found, None]
            todo = todo[~found]
        if not len(todo):
            break
    return seen


def word_weights(boxes: np.ndarray, page_size: tuple[int, int], size: int, step: int,
                 frames: list[tuple[np.ndarray, tuple[int, int]]] | None = None) -> np.ndarray:
    """float64 (L,) draw probabilities of a page's legible words that raise the chance of its least-seen word.

    A word that no crop holds without cutting a neighbour is only shown whole when it is drawn itself, so
    a uniform draw shows it once in L epochs. The weights solve max_p min_u (p @ P)[u] (P = seen_matrix) by
    multiplicative weights, a zero-sum game between the draw and the least-seen word: the average of
    WEIGHT_ROUNDS rounds. frames: the same words' boxes (L, 4) and page sizes in other frames the reader draws
    crops in (a page warped at read time: page.py WARPED_FRAMES); P is then the mean of every frame's, so that the
    weights hold for the warped page, where rotated boxes overlap their neighbours more than upright ones."""
    n = len(boxes)
    if n == 0:
        return np.zeros(0)
    seen = np.mean([seen_matrix(b, frame, size, step) for b, frame in [(boxes, page_size), *(frames or [])]], axis=0)
    p, q, total = np.full(n, 1 / n), np.full(n, 1 / n), np.zeros(n)
    for _ in range(WEIGHT_ROUNDS):
        q *= np.exp(-WEIGHT_RATE * (p @ seen))
        q /= q.sum()
        p *= np.exp(WEIGHT_RATE * (seen @ q))
        p /= p.sum()
        total += p
    return total / total.sum()


def draw_crop(rng: np.random.Generator, boxes: np.ndarray, page_size: tuple[int, int], size: int,
              step: int, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(origin int64 (x, y) page px, cut bool (L,)): one crop of a page of page_size (W, H) whose legible
    words have boxes (L, 4) and draw weights (word_weights), and the legible words it cuts (to become don't-care).
    CropDraw draws the same crops faster from a page drawn from again and again."""
    bounds = origin_bounds(page_size, size, step)
    origin = draw_grid_origin(rng, boxes, bounds, size, step, weights) * step
    return origin, cuts_at(boxes, origin, size)


# --- --crop read: the rule's fast form, for a reader (not in the build fingerprint)

def crop_rng(seed: int, epoch: int, name: str, variant: int, copy: int = 0) -> np.random.Generator:
    """The generator of the crop of (image name, variant) at an epoch: the same numbers in every process and
    thread. It is this thread's one PCG64 generator with its state set from a blake2b digest of the key (cheaper
    than a SeedSequence per crop), so it is valid until the next call in the thread. copy k >= 1: the image's k-th
    extra item of the epoch (a run's --repeat, store/selection.py), another crop; copy 0 is the key without it."""
    key = (f"{seed}\0{epoch}\0{variant}\0{name}" + (f"\0{copy}" if copy else "")).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(key, digest_size=32, person=CROP_RNG_SALT).digest()
    rng = getattr(_thread, "rng", None)
    if rng is None:
        rng = _thread.rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                               "state": {"state": int.from_bytes(digest[:16], "little"),
                                         "inc": int.from_bytes(digest[16:], "little") | 1}}
    return rng


class CropDraw:
    """draw_crop for one page, again and again (a reader, every epoch)."""

    def __init__(self, boxes: np.ndarray, page_size: tuple[int, int], size: int, step: int,
                 weights: np.ndarray | None = None, budget: ByteBudget | None = None):
        """budget: what kept best origins may still take (the reader's, shared by its pages); None: keep none."""
        self.boxes, self.size, self.step, self.budget = boxes, size, step, budget
        self.bounds = origin_bounds(page_size, size, step)
        cells = np.prod(self.bounds[1] - self.bounds[0] + 1)
        self.counts = page_counts(boxes, page_size, size, step) if len(boxes) and cells <= COUNTS_CELLS_MAX else None
        self.regions = [_region(boxes, w, self.bounds, size, step) for w in range(len(boxes))]
        # by word, once drawn: (first origin of its region, flat indices of its best origins in the region, the
        # region's width): a draw picks best[k] as draw_crop picks np.flatnonzero(ok)[k]
        self.best: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        # Generator.choice(n, p=p) without its checks of p: it draws one double u and takes the first index
        # whose normalised cumulative sum exceeds u; the same numbers, so the same crops as draw_crop
        self.cdf = None if weights is None or not len(boxes) else np.cumsum(_draw_probabilities(weights))
        if self.cdf is not None:
            self.cdf /= self.cdf[-1]

    def nbytes(self) -> int:
        """Bytes of the counts (the best origins are charged to the budget)."""
        return 0 if self.counts is None else self.counts.nbytes

    def _best(self, w: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(first origin of word w's region, flat indices of its best origins there, the region's width)."""
        kept = self.best.get(w)
        if kept is not None:
            return kept
        region, ok = _candidates(self.boxes, w, self.bounds, self.size, self.step, self.counts, self.regions[w])
        best = np.flatnonzero(ok.ravel())
        if self.budget is not None and self.budget.take(4 * best.size):   # int32: a region has far fewer origins
            self.best[w] = region[0], best.astype(np.int32), ok.shape[1]
        return region[0], best, ok.shape[1]

    def __call__(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(origin, cut) as draw_crop(rng, boxes, page_size, size, step, weights)."""
        n = len(self.boxes)
        if not n:
            origin = _uniform(rng, self.bounds) * self.step
            return origin, cuts_at(self.boxes, origin, self.size)
        w = int(rng.integers(n)) if self.cdf is None else int(self.cdf.searchsorted(rng.random(), side="right"))
        first, best, width = self._best(w)
        iy, ix = divmod(int(best[rng.integers(len(best))]), width)
        cell = first + (ix, iy)
        origin = cell * self.step
        if self.counts is not None and self.counts[cell[1] - self.bounds[0, 1], cell[0] - self.bounds[0, 0]] == 0:
            return origin, np.zeros(n, bool)
        return origin, cuts_at(self.boxes, origin, self.size)


def epoch_crop(seed: int, epoch: int, name: str, variant: int, boxes: np.ndarray, page_size: tuple[int, int],
               size: int, step: int, weights: np.ndarray | None = None,
               draw: CropDraw | None = None, copy: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(origin, cut) of the crop of page (image name, variant) at an epoch (its copy: crop_rng's): draw_crop with
    crop_rng's generator for that key; the same crop from the page's CropDraw (`draw`) where the reader keeps one."""
    rng = crop_rng(seed, epoch, name, variant, copy)
    return draw_crop(rng, boxes, page_size, size, step, weights) if draw is None else draw(rng)
