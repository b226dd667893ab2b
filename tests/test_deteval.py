"""DetEval on hand-made boxes: one case per kind of match, don't-care regions and empty inputs."""
from __future__ import annotations

import numpy as np
import pytest

from east_cache.evaluate.deteval import (AREA_PRECISION, MERGE_CREDIT, SPLIT_CREDIT, evaluate, evaluate_image,
                                         overlap_areas)


def box(x0, y0, x1, y1):
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)


def quads(*boxes):
    return np.stack(boxes) if boxes else np.zeros((0, 4, 2))


def one_image(gt, det, care=None):
    care = np.ones(len(gt), bool) if care is None else np.asarray(care, bool)
    return evaluate([(gt, care)], [det])


def prh(result):
    return pytest.approx((result["precision"], result["recall"], result["hmean"]))


def test_exact_match_is_one_to_one():
    r = one_image(quads(box(10, 10, 110, 30)), quads(box(10, 10, 110, 30)))
    assert prh(r) == (1, 1, 1)
    assert r["per_image"][0].matches == (("one-to-one", (0,), (0,)),)


def test_detection_covering_half_the_word_does_not_match():
    r = one_image(quads(box(0, 0, 100, 20)), quads(box(0, 0, 50, 20)))
    assert prh(r) == (0, 0, 0)
    assert r["per_image"][0].matches == ()


def test_word_split_over_two_detections_is_one_to_many():
    r = one_image(quads(box(0, 0, 100, 20)), quads(box(0, 0, 50, 20), box(50, 0, 100, 20)))
    assert prh(r) == (SPLIT_CREDIT, SPLIT_CREDIT, SPLIT_CREDIT)  # recall 0.8 / 1 gt, precision 2 * 0.8 / 2 dets
    assert r["per_image"][0].matches == (("one-to-many", (0,), (0, 1)),)


def test_two_words_in_one_detection_is_many_to_one():
    r = one_image(quads(box(0, 0, 45, 20), box(55, 0, 100, 20)), quads(box(0, 0, 100, 20)))
    assert prh(r) == (MERGE_CREDIT, MERGE_CREDIT, MERGE_CREDIT)  # recall 2 * 0.8 / 2 gts, precision 0.8 / 1 det
    assert r["per_image"][0].matches == (("many-to-one", (0, 1), (0,)),)


def test_merge_of_words_each_under_the_precision_threshold():
    """Each word covers 30% of the detection (< tp), together 60% (>= tp)."""
    assert 0.3 < AREA_PRECISION <= 0.6
    r = one_image(quads(box(0, 0, 30, 20), box(70, 0, 100, 20)), quads(box(0, 0, 100, 20)))
    assert r["per_image"][0].matches == (("many-to-one", (0, 1), (0,)),)


def test_detection_on_a_dont_care_region_is_ignored():
    gt, care = quads(box(0, 0, 100, 20), box(0, 50, 100, 70)), [1, 0]
    hit = box(0, 0, 100, 20)
    alone = one_image(gt, quads(hit), care)
    with_dc = one_image(gt, quads(hit, box(5, 52, 95, 68)), care)
    assert prh(alone) == (1, 1, 1)
    assert prh(with_dc) == (1, 1, 1)
    assert with_dc["per_image"][0].det_care == 1


def test_detection_mostly_off_a_dont_care_region_counts():
    """40% inside the don't-care word (not > 0.5): the detection stays, as a false positive."""
    gt, care = quads(box(0, 0, 100, 20), box(0, 50, 100, 70)), [1, 0]
    r = one_image(gt, quads(box(0, 0, 100, 20), box(60, 50, 160, 70)), care)
    assert prh(r) == (0.5, 1, 2 / 3)


def test_undetected_dont_care_word_leaves_recall_alone():
    r = one_image(quads(box(0, 0, 100, 20), box(0, 50, 100, 70)), quads(box(0, 0, 100, 20)), care=[1, 0])
    assert prh(r) == (1, 1, 1)
    assert r["per_image"][0].gt_care == 1


def test_polygon_areas_not_boxes():
    """A thin 45-degree word and its axis-aligned box: equal boxes, but the polygon covers < tp of it."""
    bar = np.array([[0, 10], [10, 0], [110, 100], [100, 110]], np.float64)
    r = one_image(quads(bar), quads(box(0, 0, 110, 110)))
    assert prh(r) == (0, 0, 0)


def test_totals_sum_counts_over_images():
    """1 of 4 words found overall: recall 0.25, not the 0.5 mean of the two images' recalls."""
    word = box(0, 0, 100, 20)
    gt = [(quads(word), [1]), (quads(word, box(0, 40, 100, 60), box(0, 80, 100, 100)), [1, 1, 1])]
    r = evaluate(gt, [quads(word), quads()])
    assert prh(r) == (1, 0.25, 0.4)
    assert [c.recall for c in r["per_image"]] == [1, 0]


def test_empty_inputs():
    assert prh(evaluate([], [])) == (0, 0, 0)
    nothing = evaluate([(quads(), [])], [quads()])
    assert prh(nothing) == (0, 0, 0) and nothing["per_image"][0].hmean == 1, "a set of empty images is not perfect"
    assert prh(evaluate([(quads(), [])], [quads(box(0, 0, 10, 10))])) == (0, 0, 0)
    assert prh(evaluate([(quads(box(0, 0, 10, 10)), [1])], [quads()])) == (0, 0, 0)
    only_dont_care = evaluate([(quads(box(0, 0, 10, 10)), [0])], [np.zeros((0, 4, 2), np.float32)])
    assert prh(only_dont_care) == (0, 0, 0) and only_dont_care["per_image"][0].hmean == 1


def test_empty_images_add_nothing_to_the_totals():
    word = quads(box(0, 0, 100, 20))
    alone = evaluate([(word, [1])], [word])
    with_empty = evaluate([(word, [1]), (quads(), []), (quads(), [])], [word, quads(), quads()])
    assert prh(alone) == (1, 1, 1) and prh(with_empty) == (1, 1, 1)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="images"):
        evaluate([(quads(box(0, 0, 10, 10)), [1])], [])
    with pytest.raises(ValueError, match="care"):
        evaluate_image(quads(box(0, 0, 10, 10)), [1, 1], quads())
    with pytest.raises(ValueError, match="shape"):
        evaluate_image(np.zeros((2, 3, 2)), [1, 1], quads())


def test_overlap_areas_of_rotated_quads():
    square = box(0, 0, 10, 10)
    diamond = np.array([[5, -5], [15, 5], [5, 15], [-5, 5]], np.float64)
    areas = overlap_areas(quads(square, box(20, 20, 30, 30)), quads(diamond, square[::-1]))
    assert areas == pytest.approx(np.array([[100, 100], [0, 0]]))


# The area thresholds at their boundary, with the values written out (a changed constant must show): a detection
# inside a 100 x 20 word covering just over / just under 80% of it, and a word inside a detection just over / just
# under 2.5 times its area (precision 0.4).
@pytest.mark.parametrize("x1, matched", [(80.5, True), (79.5, False)], ids=["recall-0.805", "recall-0.795"])
def test_recall_threshold_is_0_8(x1, matched):
    r = one_image(quads(box(0, 0, 100, 20)), quads(box(0, 0, x1, 20)))
    assert r["recall"] == pytest.approx(1.0 if matched else 0.0)
    assert bool(r["per_image"][0].matches) is matched


@pytest.mark.parametrize("half_height, matched", [(24.5, True), (25.5, False)], ids=["precision-0.408",
                                                                                     "precision-0.392"])
def test_precision_threshold_is_0_4(half_height, matched):
    r = one_image(quads(box(0, 0, 100, 20)), quads(box(0, 10 - half_height, 100, 10 + half_height)))
    assert r["precision"] == pytest.approx(1.0 if matched else 0.0)
    assert bool(r["per_image"][0].matches) is matched


def test_the_rect_scorer_shares_the_polygon_scorers_thresholds():
    from east_cache.evaluate import deteval, deteval_rect
    for name in ("AREA_RECALL", "AREA_PRECISION", "SPLIT_CREDIT", "CENTER_DIFF_THRESH"):
        assert getattr(deteval_rect, name) is getattr(deteval, name), name
