"""Fuse the words several predictions files found into one file: `east-cache ensemble`, and the fusion east-predict's
test-time scales use (fuse).

Per image, the words of every file are clustered by the IoU of their quads (the polygons, their convex hulls, not
their enclosing rectangles: a rotated word keeps its rotation):
1. Two words of different files are linked where their IoU is above `iou`; a cluster is a connected set of links.
   A file's own words are never linked to each other. Where a connected set holds two words of one file (a file's
   duplicates, or a chain through a split word), it is cut greedily instead: its words by weight, heaviest first,
   each joins the cluster whose first word it overlaps most above `iou` and which holds no word of its file yet,
   or starts one.
2. A cluster is kept when at least `votes` files found it (default: a majority, n // 2 + 1 of n files).
3. Its quad is the weighted mean of its words' corners, weight = the file's weight x the word's score (1 where a
   word has none), after each quad is put in the vertex order of the cluster's heaviest word: the same
   orientation (reversed where its signed area has the other sign) and the cyclic start nearest to it. The fused
   quad keeps that word's vertex order.
4. Its score is the weighted mean over all files of what each found: sum(weight_f x score) / sum(weight_f), a file
   that did not find the word counting 0 (a word all files found keeps its mean score; one that half of them
   found, half of it), so that the score ranks by agreement as well as by confidence.
Output words of an image follow their heaviest word's (file, word) order, so that one file in is the same file out.
Pure numpy; each image is a few array operations over all its words, whatever their number.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from east_cache.bounds import COUNT, NON_NEGATIVE, Bound, flag_number
from east_cache.errors import DataError, UsageError
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.evaluate.deteval import hulls
from east_cache.evaluate.overlap import iou_above, pairwise_iou
from east_cache.evaluate.predictions import read_quads, write_predictions
from east_cache.location import flag_location

IOU = 0.5             # default IoU above which two files' words are one word (docs/performance.md measures others)
MIN_WEIGHT = 1e-9     # a word's weight floor in its quad's mean: a word scored 0 still has a place
THRESHOLD = Bound(integer=False, above=0, below=1)   # --iou
MAX_PAIRS = 1 << 18   # word pairs tested in one array operation: bounds the memory of the fusion


def default_votes(files: int) -> int:
    """A majority of the files: n // 2 + 1."""
    return files // 2 + 1


def _candidates(lo: np.ndarray, hi: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) every pair of words of one group (image) whose enclosing boxes overlap, found by a sweep in y: the
    words sorted by (group, top), each paired with those after it that begin above its bottom, in blocks of about
    MAX_PAIRS pairs, so that memory grows with the overlapping pairs, not with the square of an image's words."""
    span = float(hi[:, 1].max() - lo[:, 1].min()) + 1.0
    key = group * span + (lo[:, 1] - lo[:, 1].min())   # the groups' tops, one after another
    order = np.argsort(key, kind="stable")
    key = key[order]
    ends = np.searchsorted(key, group[order] * span + (hi[order, 1] - lo[:, 1].min()), side="left")
    counts = np.maximum(ends - np.arange(len(order)) - 1, 0)
    firsts, seconds = [], []
    bounds = np.searchsorted(np.cumsum(counts), np.arange(0, counts.sum() + MAX_PAIRS, MAX_PAIRS), side="right")
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        rows = np.arange(r0, min(r1 + 1, len(order)))
        c = counts[rows]
        a = np.repeat(rows, c)
        b = a + 1 + np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        a, b = order[a], order[b]
        keep = (lo[a, 0] < hi[b, 0]) & (lo[b, 0] < hi[a, 0]) & (lo[b, 1] < hi[a, 1])
        firsts.append(a[keep]), seconds.append(b[keep])
        if r1 >= len(order):
            break
    a, b = (np.concatenate(v) if v else np.zeros(0, np.int64) for v in (firsts, seconds))
    return np.minimum(a, b), np.maximum(a, b)


def _links(quads: np.ndarray, files: np.ndarray, group: np.ndarray, iou: float) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) index pairs a < b of words of one group and of different files whose convex hulls' IoU is above
    iou; only pairs whose enclosing boxes overlap are clipped, in blocks of MAX_PAIRS."""
    a, b = _candidates(quads.min(axis=1), quads.max(axis=1), group)
    other = files[a] != files[b]
    a, b = a[other], b[other]
    h = convex(quads)
    above = np.concatenate([iou_above(h[a[k:k + MAX_PAIRS]], h[b[k:k + MAX_PAIRS]], iou)
                            for k in range(0, len(a), MAX_PAIRS)] or [np.zeros(0, bool)])
    return a[above], b[above]


def _signed(q: np.ndarray) -> np.ndarray:
    """Shoelace areas with their sign of quads (..., 4, 2)."""
    nxt = q[..., [1, 2, 3, 0], :]
    return 0.5 * np.sum(q[..., 0] * nxt[..., 1] - nxt[..., 0] * q[..., 1], axis=-1)


def convex(quads: np.ndarray) -> np.ndarray:
    """quads (m, 4, 2) as convex quads: each one that is not (its turns of mixed sign) replaced by its convex hull
    (deteval.hulls), the rest as they are."""
    e = quads[:, [1, 2, 3, 0]] - quads
    turn = e[:, :, 0] * e[:, [1, 2, 3, 0], 1] - e[:, :, 1] * e[:, [1, 2, 3, 0], 0]
    bent = np.flatnonzero((turn > 0).any(axis=1) & (turn < 0).any(axis=1))
    if not len(bent):
        return quads
    out = quads.copy()
    out[bent] = hulls(quads[bent])
    return out


def _components(m: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) the smallest index of each node's connected component of the links (a, b)."""
    label = np.arange(m)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new


def _cut(members: np.ndarray, quads: np.ndarray, files: np.ndarray, weight: np.ndarray, iou: float) -> list:
    """A connected set that holds two words of one file, cut greedily into clusters of one word per file at most
    (the module's rule 1): lists of word indices."""
    order = members[np.lexsort((members, -weight[members]))]
    h = convex(quads[order])
    k = len(order)
    i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    ious = pairwise_iou(h[i.ravel()], h[j.ravel()]).reshape(k, k)
    clusters: list[list[int]] = []
    seeds: list[int] = []       # each cluster's first word, a position in order
    for pos, word in enumerate(order):
        free = [c for c in range(len(clusters)) if all(files[w] != files[word] for w in clusters[c])]
        best = max(free, key=lambda c: ious[pos, seeds[c]], default=None)
        if best is not None and ious[pos, seeds[best]] > iou:
            clusters[best].append(word)
        else:
            clusters.append([word])
            seeds.append(pos)
    return clusters


def clusters_of(quads: np.ndarray, files: np.ndarray, group: np.ndarray, weight: np.ndarray,
                iou: float = IOU) -> np.ndarray:
    """(m,) each word's cluster, numbered by the cluster's smallest word index, for words of all files and
    images: quads (m, 4, 2), files (m,) the file of each word, group (m,) its image, weight (m,) its weight (the
    module's rule 1)."""
    m = len(quads)
    if m == 0:
        return np.zeros(0, np.int64)
    a, b = _links(quads, files, group, iou)
    label = _components(m, a, b)
    n_files = int(files.max()) + 1
    per_file = np.bincount(np.unique(label * n_files + files) // n_files, minlength=m)   # files in each component
    sizes = np.bincount(label, minlength=m)
    for comp in np.flatnonzero(sizes > per_file):   # a component holds two words of one file
        for cluster in _cut(np.flatnonzero(label == comp), quads, files, weight, iou):
            label[cluster] = min(cluster)
    return label


def _aligned(quads: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """quads (k, 4, 2) each in the vertex order of its reference quad (k, 4, 2): the same orientation, and the
    cyclic start whose corners lie nearest the reference's."""
    q = quads.copy()
    flip = np.sign(_signed(q)) * np.sign(_signed(refs)) < 0
    q[flip] = q[flip][:, ::-1]
    shifts = np.stack([np.roll(q, -s, axis=1) for s in range(4)], axis=1)          # (k, 4 starts, 4, 2)
    cost = ((shifts - refs[:, None]) ** 2).sum(axis=(2, 3))
    return shifts[np.arange(len(q)), np.argmin(cost, axis=1)]


def fuse_words(quads: np.ndarray, scores: np.ndarray, files: np.ndarray, group: np.ndarray,
               weights: Sequence[float], votes: int, iou: float = IOU) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group (K,), quads (K, 4, 2) float64, scores (K,)) of the fused words, from all files' words of all images
    at once: quads (m, 4, 2), scores (m,) (NaN: the word has none, counted as 1), files (m,) and group (m,) (its
    image) of each word, in (group, file, word) order; the files' weights, the least number of files a kept word
    needs (votes) and the IoU that makes two files' words one (the module's rules). Fused words come in the
    (group, file, word) order of their heaviest word."""
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)
    s = np.asarray(scores, np.float64).reshape(-1)
    s = np.where(np.isnan(s), 1.0, s)
    file_w = np.asarray(weights, np.float64)[files]
    weight = np.maximum(file_w * s, MIN_WEIGHT)
    label = clusters_of(q, files, group, weight, iou)
    n = len(q)
    # the heaviest word of each cluster, ties to the first (file, word): its reference
    order = np.lexsort((np.arange(n), -weight, label))
    first = np.ones(n, bool)
    first[1:] = label[order[1:]] != label[order[:-1]]
    ref_of = np.zeros(n, np.int64)
    ref_of[label[order[first]]] = order[first]
    kept = np.flatnonzero(np.bincount(label, minlength=n)[label] >= votes)
    aligned = _aligned(q[kept], q[ref_of[label[kept]]])
    corner_sum = np.zeros((n, 4, 2))
    np.add.at(corner_sum, label[kept], weight[kept, None, None] * aligned)
    weight_sum = np.bincount(label[kept], weight[kept], minlength=n)
    score_sum = np.bincount(label[kept], (file_w * s)[kept], minlength=n)
    heads = np.unique(label[kept])
    heads = heads[np.argsort(ref_of[heads], kind="stable")]
    return (np.asarray(group)[ref_of[heads]], corner_sum[heads] / weight_sum[heads, None, None],
            score_sum[heads] / float(np.sum(weights)))


def fuse(results: Sequence[dict], weights: Sequence[float] | None = None, votes: int | None = None,
         iou: float = IOU) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{image: (quads, scores)} fused from several {image: (quads (k, 4, 2), scores (k,))} over the union of
    their images (an image a result lacks counts as no words there), images in name order; weights default to 1
    each, votes to a majority."""
    weights = [1.0] * len(results) if weights is None else list(weights)
    votes = default_votes(len(results)) if votes is None else votes
    names = sorted(set().union(*results))
    parts = [(k, f, r[name]) for k, name in enumerate(names) for f, r in enumerate(results) if name in r]
    counts = [len(qs[1]) for _, _, qs in parts]
    if not sum(counts):
        return {name: (np.zeros((0, 4, 2)), np.zeros(0)) for name in names}
    group = np.repeat([k for k, _, _ in parts], counts)
    files = np.repeat([f for _, f, _ in parts], counts)
    quads = np.concatenate([np.asarray(qs[0], np.float64).reshape(-1, 4, 2) for _, _, qs in parts])
    scores = np.concatenate([np.asarray(qs[1], np.float64).reshape(-1) for _, _, qs in parts])
    g, fq, fs = fuse_words(quads, scores, files, group, weights, votes, iou)
    at = np.searchsorted(g, np.arange(len(names) + 1))
    return {name: (fq[at[k]:at[k + 1]], fs[at[k]:at[k + 1]]) for k, name in enumerate(names)}


# The command: `east-cache ensemble`

MISSING = ("refuse", "empty")
EPILOG = """example (k folds' predictions on a held-out split, fused, then scored beside each fold):
  east-cache ensemble --pred val_fold0.json --pred val_fold1.json --pred val_fold2.json --out val_fused.json
  east-cache evaluate --gt data/ufo/val.json --pred val_fold0.json --pred val_fold1.json --pred val_fold2.json \\
      --pred val_fused.json"""
DESCRIPTION = """Fuse the words several predictions files found (k folds' models, test-time scales) into one
predictions file: per image, the words of all files clustered by the IoU of their quads (rotated quads, not
rectangles), a cluster kept when at least --votes files found it, its corners and score the weighted means of
its words'. Written as east-predict writes predictions, each word with its score."""


def register(sub) -> None:
    """The `ensemble` subcommand on the east-cache parser's subparsers."""
    p = sub.add_parser("ensemble", help="fuse several predictions files into one (k folds, test-time scales): "
                                        "words clustered by quad IoU, voted, averaged", description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pred", type=flag_location, action="append", required=True, metavar="PRED",
                   help="a predictions file as east-predict writes it; give --pred once per file")
    p.add_argument("--out", type=Path, required=True, help="the fused predictions file to write (UFO JSON)")
    p.add_argument("--iou", type=flag_number(THRESHOLD), default=IOU,
                   help=f"IoU of two files' quads above which they are one word (default {IOU}; "
                        f"docs/performance.md measures others)")
    p.add_argument("--votes", type=flag_number(COUNT),
                   help="files that must have found a word for it to be kept: 1 keeps the union, the number of "
                        "files the intersection (default: a majority, n // 2 + 1 of n files)")
    p.add_argument("--weights", type=weight_list,
                   help="comma-separated weight of each --pred file, in their order, e.g. 2,1,1 (default: 1 each); "
                        "a word weighs its file's weight times its score")
    p.add_argument("--missing", choices=MISSING, default="refuse",
                   help="an image some files have and others lack: refuse names it (default); empty counts it as "
                        "an image where those files found no word (east-predict --skip-bad leaves images out)")
    p.add_argument("--quiet", action="store_true", help="no summary line (default: off)")
    p.set_defaults(func=run)


def weight_list(text: str) -> list[float]:
    """--weights: comma-separated finite numbers >= 0."""
    return [flag_number(NON_NEGATIVE)(t.strip()) for t in text.split(",")]


def check_images(results: list[dict], paths: list) -> None:
    """A DataError naming an image one file has and another lacks, and both files."""
    names = set().union(*results)
    for path, r in zip(paths, results):
        absent = sorted(names - set(r))
        if absent:
            has = next(p for p, other in zip(paths, results) if absent[0] in other)
            raise DataError(f"--pred {path}: has no entry for image {absent[0]!r}, which --pred {has} has "
                            f"({len(absent)} such image(s)); predict on the same images, or pass --missing empty "
                            f"to count an absent image as one where that file found no word")


def run(a: argparse.Namespace) -> int:
    """`ensemble`: the --pred files read, checked, fused and written to --out."""
    n = len(a.pred)
    weights = a.weights or [1.0] * n
    if len(weights) != n or not sum(weights) > 0:
        raise UsageError(f"--weights {','.join(map(str, weights))}: give one weight per --pred file ({n}), "
                         f"not all 0")
    votes = a.votes or default_votes(n)
    if votes > n:
        raise UsageError(f"--votes {votes}: more than the {n} --pred files; at most {n}")
    check_output(a.out, "--out", folder=False)
    refuse_overwrite("--out", a.out, [Input(f"the predictions --pred {p}", p) for p in a.pred])
    results = [read_quads(p) for p in a.pred]
    if a.missing == "refuse":
        check_images(results, a.pred)
    fused = fuse(results, weights, votes, a.iou)
    write_predictions(a.out, fused, {"program": "east-cache ensemble", "inputs": [str(p) for p in a.pred],
                                     "weights": weights, "votes": votes, "iou": a.iou})
    if not a.quiet:
        words = [sum(len(q) for q, _ in r.values()) for r in results]
        print(f"{a.out}: {len(fused)} images, {sum(len(q) for q, _ in fused.values())} words fused from {n} files "
              f"({', '.join(map(str, words))} words) at --iou {a.iou}, --votes {votes}", file=sys.stderr)
    return 0
