"""The crop draw: difference-array counts against a plain per-origin test, the word-balanced draw, its fast form
(CropDraw draws what draw_crop draws), and the build fingerprint, which covers the rule and not the fast form."""
from __future__ import annotations

import ast
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from east_cache.budget import ByteBudget
from east_cache.sample import crop_draw as crop_draw_module
from east_cache.sample.crop_draw import (
    CropDraw,
    crop_rng,
    cut_counts,
    cuts_at,
    draw_crop,
    draw_grid_origin,
    grid_step,
    inside_span,
    origin_bounds,
    overlap_span,
    seen_matrix,
    word_weights,
)
from east_cache.build.fingerprint import READ_ONLY, SAMPLE_MODULES, code_hash

STEP, SIZE = grid_step(0.5), 64   # the grid of origins at map scale 0.5, as the reader takes it


def random_boxes(seed: int, n: int, extent=(300, 200), big: float = 70, inside: bool = False) -> np.ndarray:
    """Word boxes around a page of `extent`; with `inside`, all on it."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, np.subtract(extent, big), (n, 2)) if inside else rng.uniform(-10, extent, (n, 2))
    # float32 corners like stored words, some exactly on the grid
    lo[: n // 4] = np.round(lo[: n // 4] / STEP) * STEP
    return np.hstack([lo, lo + rng.uniform(2, big, (n, 2))]).astype(np.float32).astype(np.float64)


def test_spans_agree_with_the_per_origin_test():
    boxes = random_boxes(0, 40)
    ov, ins = overlap_span(boxes, SIZE, STEP), inside_span(boxes, SIZE, STEP)
    for ix in range(-20, 80):
        for iy in range(-20, 60, 7):
            o = np.array([ix, iy]) * STEP
            overlaps = np.all((boxes[:, 2:] > o) & (boxes[:, :2] < o + SIZE), axis=1)
            inside = np.all((boxes[:, :2] >= o) & (boxes[:, 2:] <= o + SIZE), axis=1)
            in_ov = np.all((ov[:, 0] <= (ix, iy)) & ((ix, iy) <= ov[:, 1]), axis=1)
            in_ins = np.all((ins[:, 0] <= (ix, iy)) & ((ix, iy) <= ins[:, 1]), axis=1)
            np.testing.assert_array_equal(in_ov, overlaps)
            np.testing.assert_array_equal(in_ins, inside)


def test_cut_counts_agree_with_cuts_at():
    boxes = random_boxes(1, 30)
    region = np.array([[-10, -5], [60, 40]])
    counts = cut_counts(boxes, region, SIZE, STEP)
    assert counts.shape == (46, 71)
    for iy in range(-5, 41, 3):
        for ix in range(-10, 61, 2):
            assert counts[iy + 5, ix + 10] == cuts_at(boxes, np.array([ix, iy]) * STEP, SIZE).sum()


def test_drawn_crop_holds_the_chosen_word_and_cuts_none_when_it_can():
    boxes = random_boxes(2, 12, big=30, inside=True)
    bounds = origin_bounds((300, 200), SIZE, STEP)
    holds = np.zeros(len(boxes), int)
    for epoch in range(200):
        origin, cut = draw_crop(crop_rng(0, epoch, "p.jpg", 0), boxes, (300, 200), SIZE, STEP)
        i = origin // STEP
        assert np.all(bounds[0] <= i) and np.all(i <= bounds[1]) and origin.dtype == np.int64
        inside = np.all((boxes[:, :2] >= origin) & (boxes[:, 2:] <= origin + SIZE), axis=1)
        assert inside.any()
        if cut.any():   # only when the drawn word (one of those it holds) has no crop that cuts less
            fewest = [cut_counts(boxes, np.maximum(np.minimum(inside_span(boxes[w:w + 1], SIZE, STEP)[0], bounds[1]),
                                                   bounds[0]), SIZE, STEP).min() for w in np.flatnonzero(inside)]
            assert cut.sum() in fewest, "the drawn word's crop cuts no more than it must"
        holds += inside
    assert holds.min() >= 10, f"every word should be held whole in some crops: {holds}"


def test_a_word_no_crop_can_hold_is_cut_by_the_fewest():
    boxes = np.array([[0, 0, 150, 20], [10, 40, 30, 50], [100, 40, 120, 50]], float)
    bounds = origin_bounds((200, 100), SIZE, STEP)
    for epoch in range(30):
        rng = crop_rng(1, epoch, "p.jpg", 0)
        i = draw_grid_origin(rng, boxes, bounds, SIZE, STEP)
        cut = cuts_at(boxes, i * STEP, SIZE)
        region = np.array([np.maximum(overlap_span(boxes[:1], SIZE, STEP)[0, 0], bounds[0]),
                           np.minimum(overlap_span(boxes[:1], SIZE, STEP)[0, 1], bounds[1])])
        if cut[0]:   # the wide word is cut by every crop that shows it, the small ones need not be
            assert cut.sum() == cut_counts(boxes, region, SIZE, STEP).min()


def test_a_page_without_legible_words_takes_any_origin_on_it():
    origins = {tuple(draw_crop(crop_rng(0, e, "blank.jpg", 0), np.zeros((0, 4)), (200, 120), SIZE, STEP)[0])
               for e in range(100)}
    xs, ys = zip(*origins)
    assert min(xs) >= 0 and max(xs) <= 200 - SIZE and min(ys) >= 0 and max(ys) <= 120 - SIZE
    assert len(origins) > 50


def test_a_page_smaller_than_the_crop_lies_inside_it():
    boxes = np.array([[5, 5, 40, 20]], float)
    for e in range(20):
        origin, cut = draw_crop(crop_rng(0, e, "small.jpg", 0), boxes, (48, 40), SIZE, STEP)
        assert np.all(origin <= 0) and np.all(origin + SIZE >= (48, 40)) and not cut.any()


def test_crop_rng_keys():
    draw = lambda *key: crop_rng(*key).integers(0, 2**62)  # noqa: E731
    keys = [(0, 0, "a", 0), (1, 0, "a", 0), (0, 1, "a", 0), (0, 0, "b", 0), (0, 0, "a", 1)]
    assert len({draw(*k) for k in keys}) == len(keys) and draw(*keys[0]) == draw(*keys[0])


def test_crop_rng_is_each_threads_own_and_the_same_everywhere():
    """A key's numbers do not depend on the thread that draws them, nor on draws made meanwhile in another
    thread (each thread reseeds a generator of its own), nor on the process (a digest of the key, not hash())."""
    want = crop_rng(3, 7, "photo é.jpg", 1).random(4)
    got, stop = [], threading.Event()

    def other() -> None:   # draws for other keys all the time
        k = 0
        while not stop.is_set():
            crop_rng(0, k, "x", 0).random(8)
            k += 1
    t = threading.Thread(target=other)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # the threads take turns between any two bytecodes
    t.start()
    try:
        for _ in range(2000):
            got.append(crop_rng(3, 7, "photo é.jpg", 1).random(4))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert all(np.array_equal(g, want) for g in got)
    # the same numbers from a fresh interpreter, whose str hashes are salted differently
    code = ("from east_cache.sample.crop_draw import crop_rng; "
            "print(repr(crop_rng(3, 7, 'photo \\u00e9.jpg', 1).random(4).tolist()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert ast.literal_eval(out) == want.tolist()


def test_seen_matrix_is_the_share_of_draws_holding_each_word():
    boxes = random_boxes(4, 10, big=30, inside=True)
    seen = seen_matrix(boxes, (300, 200), SIZE, STEP)
    bounds = origin_bounds((300, 200), SIZE, STEP)
    for w in (0, 3):
        one_hot = np.eye(len(boxes))[w]
        held = np.zeros(len(boxes))
        for e in range(400):
            o = draw_grid_origin(crop_rng(0, e, "p", 0), boxes, bounds, SIZE, STEP, one_hot) * STEP
            held += np.all((boxes[:, :2] >= o) & (boxes[:, 2:] <= o + SIZE), axis=1)
        assert seen[w, w] == 1
        np.testing.assert_allclose(held / 400, seen[w], atol=0.08)


def word_at_a_time_seen(boxes: np.ndarray, page_size, size: int, step: int) -> np.ndarray:
    """seen_matrix's definition, one word at a time: word w's candidate origins (the draw's own _candidates) counted
    inside every word's inside rectangle by prefix sums over w's region, over how many there are."""
    bounds, inside = origin_bounds(page_size, size, step), inside_span(boxes, size, step)
    seen = np.zeros((len(boxes), len(boxes)))
    for w in range(len(boxes)):
        region, ok = crop_draw_module._candidates(boxes, w, bounds, size, step)
        sums = np.zeros((ok.shape[0] + 1, ok.shape[1] + 1))
        sums[1:, 1:] = ok.cumsum(axis=0).cumsum(axis=1)
        a = np.maximum(inside[:, 0], region[0]) - region[0]
        b = np.minimum(inside[:, 1], region[1]) - region[0] + 1
        some = np.all(b > a, axis=1)
        a, b = np.where(some[:, None], a, 0), np.where(some[:, None], b, 0)
        seen[w] = (sums[b[:, 1], b[:, 0]] - sums[a[:, 1], b[:, 0]] - sums[b[:, 1], a[:, 0]]
                   + sums[a[:, 1], a[:, 0]]) / ok.sum()
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_seen_matrix_equals_the_word_at_a_time_definition(seed):
    """All words at once (a prefix-sum table per least cut count) gives the same matrix, bit for bit, as the words
    taken one at a time: pages larger and smaller than the crop, words off the page, words no crop holds whole,
    crowded pages whose words' least cut counts differ."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        page = tuple(int(v) * STEP for v in rng.integers(4, 50, 2))
        n = int(rng.integers(1, 30))
        lo = rng.uniform(-15, np.add(page, 15), (n, 2))
        boxes = np.hstack([lo, lo + rng.uniform(1, SIZE * rng.choice([0.2, 0.7, 1.5]), (n, 2))])
        np.testing.assert_array_equal(seen_matrix(boxes, page, SIZE, STEP),
                                      word_at_a_time_seen(boxes, page, SIZE, STEP))


def test_word_weights_raise_the_least_seen_word():
    # eight small words that any crop around one of them mostly holds, and one word far from them: drawn
    # uniformly, the lone word is seen 1 time in 9; weighted, about as often as the cluster
    cluster = np.array([[100 + 12 * (k % 4), 100 + 12 * (k // 4), 108 + 12 * (k % 4), 106 + 12 * (k // 4)]
                        for k in range(8)], float)
    boxes = np.vstack([cluster, [[250, 250, 270, 262]]])
    seen = seen_matrix(boxes, (300, 300), SIZE, STEP)
    weights = word_weights(boxes, (300, 300), SIZE, STEP)
    assert weights.sum() == pytest.approx(1) and np.all(weights >= 0)
    uniform = np.full(len(boxes), 1 / len(boxes))
    assert (uniform @ seen).min() == pytest.approx(1 / 9)
    assert (weights @ seen).min() > 0.4


@pytest.mark.parametrize("keep", ["all", "tight budget", "no counts", "nothing"])
def test_crop_draw_draws_what_draw_crop_draws(monkeypatch, keep):
    """A reader's per-page CropDraw makes the same generator calls as draw_crop: the same crops, epoch after
    epoch, and the same cut words, whether or not the kept count at the origin spares counting them. Kept: the
    cut counts and each drawn word's best origins; the counts and the best origins of the words a tight budget
    holds; best origins only (a page with too many origins to keep their counts); nothing (no budget)."""
    if keep == "no counts":
        monkeypatch.setattr(crop_draw_module, "COUNTS_CELLS_MAX", 0)
    boxes = random_boxes(5, 12)
    weights = np.random.default_rng(0).uniform(0.1, 1, 12).astype(np.float32)
    cut_or_not = set()
    for b, page, w in ((boxes, (300, 200), weights), (boxes, (300, 200), None), (np.zeros((0, 4)), (200, 120), None),
                       (random_boxes(6, 3, extent=(48, 40), big=8, inside=True), (48, 40), None)):
        budget = None if keep == "nothing" else ByteBudget(4 * 40) if keep == "tight budget" else ByteBudget(1 << 30)
        draw = CropDraw(b, page, SIZE, STEP, w, budget)
        assert (draw.counts is not None) == (keep != "no counts" and len(b) > 0)
        for epoch in range(60):
            want = draw_crop(crop_rng(2, epoch, "p.jpg", 0), b, page, SIZE, STEP, w)
            got = draw(crop_rng(2, epoch, "p.jpg", 0))
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            cut_or_not.add(bool(want[1].any()))
        if len(b) > 3:
            kept = len(draw.best)
            assert (kept == 0 if keep == "nothing" else 0 < kept < len(b) if keep == "tight budget" else kept > 3), kept
    assert cut_or_not == {False, True}


def test_the_build_fingerprint_covers_the_draws_rule_and_not_its_fast_form():
    """A change to the rule (a function the build runs) changes the code hash; one to CropDraw, the reader's fast
    form, does not: a faster reader rebuilds no cache."""
    name = "sample/crop_draw"
    source = Path(crop_draw_module.__file__).read_text()
    base = code_hash([source], [READ_ONLY[name]])
    faster = source.replace("class CropDraw:\n", "class CropDraw:\n    FASTER = True\n")
    other_rule = source.replace("WEIGHT_ROUNDS = 200 ", "WEIGHT_ROUNDS = 201 ")
    assert faster != source and other_rule != source
    assert code_hash([faster], [READ_ONLY[name]]) == base
    assert code_hash([other_rule], [READ_ONLY[name]]) != base
    assert name in SAMPLE_MODULES
