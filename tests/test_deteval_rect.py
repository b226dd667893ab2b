"""The competition's rect DetEval on hand-computed cases: one per rule, with the inclusive (+1) sizes and
the 4-decimal rounding written out in each test's comment."""
from __future__ import annotations

import numpy as np
import pytest

from east_cache.evaluate.deteval_rect import (
    enclosing_rects,
    evaluate,
    evaluate_image,
    overlaps,
    quad_rects,
    totals,
)


def rects(*boxes):
    return np.array(boxes, np.float64).reshape(-1, 4)


def one_image(gt, det, care=None):
    care = np.ones(len(gt), bool) if care is None else np.asarray(care, bool)
    return evaluate([(gt, care)], [det])


def prh(result):
    return pytest.approx((result["precision"], result["recall"], result["hmean"]))


def test_inclusive_sizes_and_overlaps():
    """x 0..9 spans 10 px, y 0..4 spans 5: area 50; a box from 3 to 3 is one pixel; touching edges share a line."""
    a = rects((0, 0, 9, 4))
    assert overlaps(a, rects((0, 0, 9, 4), (3, 3, 3, 3), (9, 0, 20, 4), (10, 0, 20, 4), (0.5, 0, 9, 4))).tolist() == \
        [[50, 1, 5, 0, 47.5]]


def test_enclosing_rectangles_of_any_polygon():
    points = np.array([[5, 1], [9, 4], [2, 8], [0, 0], [3, 0], [3, 2], [1, 3], [0, 2], [4, 4], [6, 6], [5, 9]])
    assert enclosing_rects(points, [0, 3, 8, 11]).tolist() == [[2, 1, 9, 8], [0, 0, 3, 3], [4, 4, 6, 9]]
    diamond = np.array([[[5, -5], [15, 5], [5, 15], [-5, 5]]])
    assert quad_rects(diamond).tolist() == [[-5, -5, 15, 15]]


def test_one_to_one():
    r = one_image(rects((10, 10, 109, 29)), rects((12, 10, 109, 31)))
    assert prh(r) == (1, 1, 1)
    assert r["per_image"][0].matches == (("one-to-one", (0,), (0,)),)


def test_inclusive_area_decides_a_match():
    """gt 0..9 x 0..9: 100 px; detection 0..9 x 0..7: overlap 10 x 8 = 80, recall exactly 0.8: a match.
    Counted max - min (81 and 63) the recall would be 0.78 and there would be none."""
    r = one_image(rects((0, 0, 9, 9)), rects((0, 0, 9, 7)))
    assert prh(r) == (1, 1, 1)


def test_detection_covering_half_the_word_does_not_match():
    r = one_image(rects((0, 0, 99, 19)), rects((0, 0, 49, 19)))   # recall 1000 / 2000
    assert prh(r) == (0, 0, 0)


def test_one_to_one_needs_each_to_overlap_nothing_else():
    """The word also touches a second detection (recall 0.05): not one-to-one. As a split only the first
    detection qualifies (precision 1; the other's 100 / 2000 = 0.05), recall 1 >= 0.8: credit 1 and 1."""
    r = one_image(rects((0, 0, 99, 19)), rects((0, 0, 99, 19), (95, 0, 194, 19)))
    assert r["per_image"][0].matches == (("one-to-one", (0,), (0,)),)
    assert prh(r) == (0.5, 1, 2 / 3)


def test_a_dropped_detection_still_counts_as_a_second_candidate():
    """As in the competition script, "only candidate" counts dropped detections too. Word 0..99 x 0..19 (2000 px),
    don't-care word x 0..35 (720 px). Detection A = the word: 720 / 2000 = 36% inside the don't-care word, kept.
    Detection B = x 0..79 (1600 px): 45% inside, dropped, yet recall 0.8 and precision 1 for the word. The word
    has two candidates: no one-to-one; it overlaps one kept detection only: no split. A is a false positive."""
    gt, care = rects((0, 0, 99, 19), (0, 0, 35, 19)), [1, 0]
    r = one_image(gt, rects((0, 0, 99, 19), (0, 0, 79, 19)), care)
    assert r["per_image"][0].matches == () and r["per_image"][0].det_care == 1
    assert prh(r) == (0, 0, 0)
    assert prh(one_image(gt, rects((0, 0, 99, 19)), care)) == (1, 1, 1)


def test_split_over_two_detections():
    """Halves of 1000 px each: recall 0.5 + 0.5 = 1 >= 0.8, precision 1 each. Recall credit 0.8 for the one
    gt; precision credit 0.8 per detection, 1.6 / 2."""
    r = one_image(rects((0, 0, 99, 19)), rects((0, 0, 49, 19), (50, 0, 99, 19)))
    assert prh(r) == (0.8, 0.8, 0.8)
    assert r["per_image"][0].matches == (("one-to-many", (0,), (0, 1)),)


def test_split_with_one_qualifying_detection_scores_one():
    """Detection 0 covers 90% of the word but the word touches detection 1 too (precision 300 / 2000 = 0.15 <
    0.4): the split holds detection 0 alone, credit 1 and 1; detection 1 is a false positive."""
    r = one_image(rects((0, 0, 99, 19)), rects((0, 0, 89, 19), (85, 0, 184, 19)))
    assert r["per_image"][0].matches == (("one-to-one", (0,), (0,)),)
    assert prh(r) == (0.5, 1, 2 / 3)


def test_split_recall_sum_is_rounded_to_four_decimals():
    """gt 25000 x 1 px. Detections of 10000 and 9999 px: recalls sum to 19999 / 25000 = 0.79996, rounded
    0.8: a split. One pixel less (0.79992, rounded 0.7999) is not."""
    gt = rects((0, 0, 24999, 0))
    hit = one_image(gt, rects((0, 0, 9999, 0), (10000, 0, 19998, 0)))
    assert hit["per_image"][0].matches == (("one-to-many", (0,), (0, 1)),)
    assert prh(hit) == (0.8, 0.8, 0.8)
    miss = one_image(gt, rects((0, 0, 9999, 0), (10000, 0, 19997, 0)))
    assert miss["per_image"][0].matches == () and prh(miss) == (0, 0, 0)


def test_merge_of_two_words():
    """Words of 900 px each inside a 2000 px detection: recall 1 each, precision 0.45 each. The detection has
    two candidates, so no one-to-one; as a merge, precisions 0.9 >= 0.4: recall credit 1 per word, precision 1."""
    r = one_image(rects((0, 0, 44, 19), (55, 0, 99, 19)), rects((0, 0, 99, 19)))
    assert prh(r) == (1, 1, 1)
    assert r["per_image"][0].matches == (("many-to-one", (0, 1), (0,)),)


def test_merge_of_words_each_under_the_precision_threshold():
    """Words of 600 px: precision 0.3 each (< 0.4), summed 0.6 (>= 0.4)."""
    r = one_image(rects((0, 0, 29, 19), (70, 0, 99, 19)), rects((0, 0, 99, 19)))
    assert r["per_image"][0].matches == (("many-to-one", (0, 1), (0,)),)
    assert prh(r) == (1, 1, 1)


def test_merge_precision_sum_is_rounded():
    """Detection 25000 px; words of 4999 and 5000 px inside it: precisions 0.19996 + 0.2 = 0.39996, rounded
    0.4: a merge. Words of 4998 and 5000 px: 0.39992, rounded 0.3999: none."""
    det = rects((0, 0, 24999, 0))
    hit = one_image(rects((0, 0, 4998, 0), (10000, 0, 14999, 0)), det)
    assert hit["per_image"][0].matches == (("many-to-one", (0, 1), (0,)),)
    miss = one_image(rects((0, 0, 4997, 0), (10000, 0, 14999, 0)), det)
    assert miss["per_image"][0].matches == ()


def test_detection_more_than_40_percent_inside_a_dont_care_word_is_dropped():
    """Don't-care word y 50..69. A 100 x 20 detection from x = 59 has 41 x 20 = 820 px (41%) inside it:
    dropped. From x = 60, 40% exactly (not more): kept, a false positive."""
    gt, care = rects((0, 0, 99, 19), (0, 50, 99, 69)), [1, 0]
    hit = rects((0, 0, 99, 19))
    dropped = one_image(gt, np.concatenate([hit, rects((59, 50, 158, 69))]), care)
    assert prh(dropped) == (1, 1, 1) and dropped["per_image"][0].det_care == 1
    kept = one_image(gt, np.concatenate([hit, rects((60, 50, 159, 69))]), care)
    assert prh(kept) == (0.5, 1, 2 / 3) and kept["per_image"][0].det_care == 2


def test_missed_dont_care_word_costs_nothing():
    r = one_image(rects((0, 0, 99, 19), (0, 50, 99, 69)), rects((0, 0, 99, 19)), care=[1, 0])
    assert prh(r) == (1, 1, 1) and r["per_image"][0].gt_care == 1


def test_image_with_no_words_and_image_with_no_detections():
    """Image A: no words, one detection (a false positive). Image B: two words, no detection. Image C:
    nothing at all, adding nothing. Image D: one word found. Totals: recall 1 / 3, precision 1 / 2."""
    word = rects((0, 0, 99, 19))
    gt = [(rects(), []), (rects((0, 0, 99, 19), (0, 40, 99, 59)), [1, 1]), (rects(), []), (word, [1])]
    r = evaluate(gt, [word, rects(), rects(), word])
    assert prh(r) == (1 / 2, 1 / 3, 0.4)
    assert (r["gt_care"], r["det_care"]) == (3, 2)


def test_nothing_scores_zero_not_perfect():
    assert prh(evaluate([], [])) == (0, 0, 0)
    assert prh(evaluate([(rects(), [])], [rects()])) == (0, 0, 0)
    empty = evaluate_image(rects(), [], rects())
    assert totals([empty])["hmean"] == 0


def test_totals_add_counts_over_images():
    """1 of 4 words found: recall 0.25, not the mean 0.5 of the two images' recalls."""
    word = rects((0, 0, 99, 19))
    gt = [(word, [1]), (rects((0, 0, 99, 19), (0, 40, 99, 59), (0, 80, 99, 99)), [1, 1, 1])]
    r = evaluate(gt, [word, rects()])
    assert prh(r) == (1, 0.25, 0.4)
    assert [totals([c])["recall"] for c in r["per_image"]] == [1, 0]


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="images"):
        evaluate([(rects((0, 0, 9, 9)), [1])], [])
    with pytest.raises(ValueError, match="care"):
        evaluate_image(rects((0, 0, 9, 9)), [1, 1], rects())
    with pytest.raises(ValueError, match="max >= min"):
        evaluate_image(rects((9, 0, 0, 9)), [1], rects())
    with pytest.raises(ValueError, match="at least one point"):
        enclosing_rects(np.zeros((4, 2)), [0, 4, 4])
