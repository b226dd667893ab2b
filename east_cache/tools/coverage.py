"""How much of the annotation work training sees: the share of legible words that appear whole in at least
one training crop within N epochs, and the share of text-free crops.

A word *appears* when it is legible, and the crop holds its box whole (so it is drawn in score and
geometry, not cut into a don't-care region). Words are counted per source word: a word seen in two
variants counts once. Both cache modes are replayed without reading a pixel:
- page mode: every epoch draws a new crop of page variant (e + o_i) mod K (crop_draw.epoch_crop, the
  reader's own draw), from each page's legible word boxes and size;
- page mode, pages stored resized only (--geometry read): every epoch draws the page's height, rotation, scale,
  perspective and crop (epoch_geometry.epoch_geometry, the reader's own draw, under an Augment: `info`'s flags of
  east-train's names), and the words are tested in the warped crop;
- build-time crops: epoch e reads the frozen crop of variant (e + o_i) mod K.
A *text-free* crop holds no legible word whole: a training step on it teaches only background.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from east_cache.augment import Augment
from east_cache.budget import ByteBudget
from east_cache.config import BuildConfig
from east_cache.sample.crop_draw import CropDraw, epoch_crop, grid_step, word_boxes, word_weights
from east_cache.sample.epoch_geometry import epoch_geometry, map_points, quad_boxes, weights_side
from east_cache.sample.geometry import gather_quads

DEFAULT_EPOCHS = (1, 5, 20, 50)
TRAIN_EPOCHS = 50          # train.py's default --epochs: what `info` reports coverage for
MAX_IMAGES = 500           # `info` replays the draws of at most this many images (every k-th): an estimate


@dataclass(frozen=True)
class Coverage:
    epochs: tuple[int, ...]     # epoch counts reported
    words: int                  # legible source words over all images
    seen: tuple[float, ...]     # share of them whole in >= 1 crop within epochs[j] epochs (1.0 when words == 0)
    text_free: float            # share of the crops of max(epochs) epochs that hold no legible word whole
    blank_pages: float          # share of images without legible words (their crops cannot hold text)
    distinct: float             # distinct crops per image over max(epochs) epochs (mean)

    def describe(self) -> str:
        seen = ", ".join(f"{s:.1%} after {e}" for e, s in zip(self.epochs, self.seen))
        return (f"legible words seen whole in a training crop: {seen} epochs ({self.words} words); "
                f"text-free crops {self.text_free:.1%} (images without legible words: {self.blank_pages:.1%})")


# whole(i, e) -> (crop key, indices of image i's legible words whole in its epoch-e crop)
WholeWords = Callable[[int, int], tuple[object, np.ndarray]]


def coverage(legible: Sequence[int], whole: WholeWords, epochs: Sequence[int] = DEFAULT_EPOCHS) -> Coverage:
    """Replays max(epochs) epochs of crops over images with legible[i] legible words each; whole(i, e) names the
    words it shows by any ids that are the same for a word in every crop of its image."""
    epochs = tuple(sorted({int(e) for e in epochs}))
    if not epochs or epochs[0] < 1:
        raise ValueError(f"epochs {epochs} must be positive")
    first: list[dict] = [{} for _ in legible]   # per image: word id -> first epoch it appears whole
    text_free, keys = 0, [set() for _ in legible]
    for e in range(epochs[-1]):
        for i, seen in enumerate(first):
            key, ids = whole(i, e)
            keys[i].add(key)
            text_free += len(ids) == 0
            for w in np.asarray(ids).tolist():
                seen.setdefault(w, e)
    total = int(sum(legible))
    shares = tuple(sum(sum(f < e for f in seen.values()) for seen in first) / total if total else 1.0 for e in epochs)
    n_crops = max(1, epochs[-1] * len(legible))
    return Coverage(epochs, total, shares, text_free / n_crops,
                    float(np.mean([n == 0 for n in legible])) if len(legible) else 0.0,
                    float(np.mean([len(k) for k in keys])) if keys else 0.0)


def whole_in(boxes: np.ndarray, origin, size: int) -> np.ndarray:
    """Indices of the boxes (L, 4) that the crop at origin holds whole."""
    o = np.asarray(origin, np.float64)
    return np.flatnonzero(np.all((boxes[:, :2] >= o) & (boxes[:, 2:] <= o + size), axis=1))


def page_mode(names: Sequence[str], pages: Sequence[Sequence[tuple]], offsets: np.ndarray, seed: int, size: int,
              step: int) -> WholeWords:
    """Page mode's crops: pages[i][v] = (legible word boxes (L, 4) page px, page (W, H), word weights (L,)) of
    image i, variant v. Each page's CropDraw is made on its first epoch: the same crops as draw_crop, faster."""
    draws: dict[tuple[int, int], CropDraw] = {}
    best = ByteBudget(ByteBudget.BEST_ORIGINS)

    def whole(i: int, e: int):
        v = (e + int(offsets[i])) % len(pages[i])
        boxes, page_size, weights = pages[i][v]
        if (i, v) not in draws:
            draws[(i, v)] = CropDraw(boxes, page_size, size, step, weights, best)
        origin, _ = epoch_crop(seed, e, names[i], v, boxes, page_size, size, step, weights, draws[(i, v)])
        return (v, *origin.tolist()), whole_in(boxes, origin, size)
    return whole


def warped_mode(names: Sequence[str], pages: Sequence[Sequence[tuple]], cfg: BuildConfig,
                aug: Augment | None = None) -> WholeWords:
    """Pages stored resized only: pages[i][0] = (legible quads (L, 4, 2) page px, page (W, H), stored word weights
    (L,)); every epoch's height, rotation, scale, perspective and crop are drawn as the reader draws them under aug
    (default: the cache's build values), with the weights the reader uses (reader/pages.py PageCropper.weights)."""
    aug = Augment.of_cache(cfg) if aug is None else aug.resolve(cfg)
    step = grid_step(cfg.map_scale)
    side = weights_side(aug, step)
    weights: dict[int, np.ndarray] = {}

    def whole(i: int, e: int):
        quads, page_size, stored = pages[i][0]
        if i not in weights:
            weights[i] = (stored if side == cfg.stored().input_size else
                          word_weights(quad_boxes(quads), page_size, side, step) if len(quads) else stored)
        g = epoch_geometry(cfg, e, names[i], 0, quads, page_size, weights[i], aug=aug)
        boxes = quad_boxes(map_points(g.matrix, quads)) if len(quads) else np.zeros((0, 4))
        key = (round(g.height, 9), round(g.angle, 9), round(g.scale, 9), *np.round(g.corners, 9).ravel().tolist(),
               *g.origin.tolist())
        return key, whole_in(boxes, (0, 0), aug.input_size)
    return whole


def cache_coverage(cache_dir, epochs: Sequence[int], max_images: int = MAX_IMAGES,
                   aug: Augment | None = None) -> tuple[Coverage, int]:
    """(coverage, images replayed) of a built cache of either mode, from its records' sizes and sidecar words; aug:
    the reader's draw (default: the cache's build values; a cache whose pages are stored warped refuses another)."""
    from east_cache.store.manifest import Manifest, data_path
    from east_cache.store.sidecar import load_sidecar, row_quads, row_words
    m = Manifest.load(cache_dir)
    c, layout, names = m.config, m.layout, sorted(m.images)
    if aug is not None:
        aug.check_frozen(c, str(cache_dir))
    pick = list(range(0, len(names), max(1, -(-len(names) // max_images))))
    files: dict[int, tuple] = {}

    def row(i: int, v: int):
        f, r = layout.locate(i, v)
        if f not in files:
            path = data_path(cache_dir, m.files[f].name)
            files[f] = (m.format.open(path, m.spec), load_sidecar(path))
        records, sidecar = files[f]
        return records, sidecar, r

    legible, pages, crops = [], [], []
    for i in pick:
        per_variant = []
        for v in range(c.variants):
            records, sidecar, r = row(i, v)
            points, offsets, care = row_quads(sidecar, r)
            extra = row_words(sidecar, r)
            if m.spec.kind.packed:
                size = tuple(int(x) for x in records[r]["size"])
                words = gather_quads(points, offsets, care > 0) if c.warps_at_read else word_boxes(points,
                                                                                                   offsets)[care > 0]
                per_variant.append((words, size, extra["weight"][care > 0]))
            else:
                per_variant.append(extra["word"][care > 0])
        legible.append(extra["legible"])
        (pages if m.spec.kind.packed else crops).append(per_variant)
    offsets = layout.variant_offsets(names, c.seed)[pick]
    picked = [names[i] for i in pick]
    whole = (build_mode(crops, offsets) if not pages else warped_mode(picked, pages, c, aug) if c.warps_at_read else
             page_mode(picked, pages, offsets, c.seed, c.input_size, grid_step(c.map_scale)))
    return coverage(legible, whole, epochs), len(pick)


def build_mode(crops: Sequence[Sequence[np.ndarray]], offsets: np.ndarray) -> WholeWords:
    """Build-time crops: crops[i][v] = indices of image i's legible words whole in its variant-v crop."""
    def whole(i: int, e: int):
        v = (e + int(offsets[i])) % len(crops[i])
        return v, crops[i][v]
    return whole
