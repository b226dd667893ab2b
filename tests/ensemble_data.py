"""A generated ground truth and noisy copies of it, as several models' predictions would differ: the ensemble's
tests (test_ensemble.py) and benchmark (benchmarks/bench_ensemble.py) fuse them.

Each image holds words on a grid (one word per cell, rotated up to MAX_ANGLE, never touching another); each copy,
independently: misses each word with probability `missed`, adds round(false x words) false words anywhere, moves
every corner by up to `jitter` px (uniform in a disc) and draws every word's score uniformly from SCORES.
"""
from __future__ import annotations

import numpy as np

SIDE = 1000            # px, every image's width and height
COLUMNS = 4            # words per grid row
MAX_ANGLE = 20.0       # degrees either way
SCORES = (0.5, 1.0)    # a predicted word's score is drawn uniformly from this range
NOISE = {"missed": 0.15, "false": 0.10, "jitter": 3.0}   # the copies


def rotated_box(cx, cy, w, h, angle_deg) -> np.ndarray:
    """(4, 2) corners clockwise from the top-left (in image axes, y down) of a w x h box rotated about its centre."""
    t = np.deg2rad(angle_deg)
    c, s = np.cos(t), np.sin(t)
    local = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    return local @ np.array([[c, s], [-s, c]]) + [cx, cy]


def ground_truth(images: int, words: int, seed: int = 0) -> dict[str, np.ndarray]:
    """{name: quads (words, 4, 2)}: each image's words one per grid cell, none touching another."""
    rng = np.random.default_rng(seed)
    rows = -(-words // COLUMNS)
    cw, ch = SIDE / COLUMNS, SIDE / rows
    out = {}
    for i in range(images):
        cells = np.arange(words)
        cx, cy = (cells % COLUMNS + 0.5) * cw, (cells // COLUMNS + 0.5) * ch
        w = rng.uniform(0.3, 0.75, words) * cw
        h = np.minimum(rng.uniform(18, 50, words), 0.3 * ch)
        angle = rng.uniform(-MAX_ANGLE, MAX_ANGLE, words)
        out[f"img_{i:05d}.jpg"] = np.array([rotated_box(*v) for v in zip(cx, cy, w, h, angle)]).reshape(-1, 4, 2)
    return out


def noisy_copy(gt: dict[str, np.ndarray], seed: int, missed: float = NOISE["missed"], false: float = NOISE["false"],
               jitter: float = NOISE["jitter"]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (quads, scores)}: one model's predictions of gt (the module's rules)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, quads in gt.items():
        kept = quads[rng.random(len(quads)) >= missed]
        n_false = int(round(false * len(quads)))
        fake = np.array([rotated_box(*rng.uniform(40, SIDE - 40, 2), rng.uniform(40, 200), rng.uniform(18, 50),
                                     rng.uniform(-MAX_ANGLE, MAX_ANGLE)) for _ in range(n_false)]).reshape(-1, 4, 2)
        q = np.concatenate([kept, fake])
        r, t = jitter * np.sqrt(rng.random(q.shape[:2])), rng.uniform(0, 2 * np.pi, q.shape[:2])
        q = q + np.stack([r * np.cos(t), r * np.sin(t)], axis=-1)
        order = rng.permutation(len(q))   # a model lists its words in its own order
        out[name] = (q[order], rng.uniform(*SCORES, len(q)))
    return out


def noisy_copies(gt: dict[str, np.ndarray], copies: int, seed: int = 1, **noise) -> list[dict]:
    return [noisy_copy(gt, seed + k, **noise) for k in range(copies)]
