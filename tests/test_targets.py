"""EAST targets and their geometry: the fast code against the plain reference, and unit checks."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from reference import reference_targets

from east_cache.sample.crop_draw import choose_crop
from east_cache.sample.geometry import min_rect_angles, polygon_area, shrink_quads
from east_cache.sample.targets import make_targets

INPUT = 256


def rotation(deg: float) -> np.ndarray:
    t = np.deg2rad(deg)
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def random_quad(rng, size: int) -> np.ndarray:
    """A clockwise, roughly rectangular word anywhere around the crop (also partly outside it)."""
    w, h = rng.uniform(3, 150), rng.uniform(3, 50)
    box = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2 + rng.normal(0, 0.08 * min(w, h), (4, 2))
    quad = box @ rotation(rng.uniform(-90, 90)).T + rng.uniform(-40, size + 40, 2)
    return np.roll(quad, rng.integers(0, 4) if rng.random() < 0.2 else 0, axis=0)


def random_polygon(rng, size: int) -> np.ndarray:
    """A don't-care region: 3 to 7 points around a centre."""
    k = rng.integers(3, 8)
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    radii = rng.uniform(3, 40, k)
    return np.stack([np.cos(angles), np.sin(angles)], 1) * radii[:, None] + rng.uniform(-20, size + 20, 2)


def random_page(seed: int, n_words: int = 24, size: int = INPUT):
    rng = np.random.default_rng(seed)
    care = (rng.random(n_words) > 0.25).astype(np.uint8)
    words = [random_quad(rng, size) if c else random_polygon(rng, size) for c in care]
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)
    return np.concatenate(words).astype(np.float32), offsets, care


def edge_pixels(score: np.ndarray) -> np.ndarray:
    """Pixels whose 3x3 neighbourhood holds both inside and outside: on a rasterised polygon's edge."""
    kernel = np.ones((3, 3), np.uint8)
    return cv2.dilate(score, kernel) != cv2.erode(score, kernel)


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
@pytest.mark.parametrize("seed", range(6))
def test_fast_targets_match_reference(seed, map_scale):
    points, offsets, care = random_page(seed)
    score, geo, roi = make_targets(points, offsets, care, INPUT, map_scale)
    ref_score, ref_geo, ref_roi = reference_targets(points, offsets, care, INPUT, map_scale)
    m = int(round(INPUT * map_scale))
    assert score.shape == roi.shape == (m, m) and geo.shape == (5, m, m)
    assert score.dtype == roi.dtype == np.uint8 and geo.dtype == np.float32
    assert ref_score.sum() > 0 and (ref_roi == 0).any(), "the page should exercise both maps"

    differ = score != ref_score
    assert differ.sum() <= 2 + 0.002 * ref_score.sum()
    assert np.all((edge_pixels(score) | edge_pixels(ref_score))[differ]), "score differs off a polygon edge"
    np.testing.assert_array_equal(roi, ref_roi)

    both = (score > 0) & (ref_score > 0)
    np.testing.assert_allclose(geo[:4, both], ref_geo[:4, both], atol=0.01, rtol=0)
    np.testing.assert_allclose(geo[4, both], ref_geo[4, both], atol=1e-4, rtol=0)
    assert np.all(geo[:, score == 0] == 0)


def test_later_word_wins_where_words_overlap():
    a = np.array([[20, 20], [200, 20], [200, 80], [20, 80]], np.float32)
    b = (np.array([[-40, -20], [40, -20], [40, 20], [-40, 20]]) @ rotation(35).T + [110, 50]).astype(np.float32)
    both = make_targets(np.concatenate([a, b]), np.array([0, 4, 8]), np.array([1, 1], np.uint8), INPUT, 0.5)
    alone_b = make_targets(b, np.array([0, 4]), np.array([1], np.uint8), INPUT, 0.5)
    alone_a = make_targets(a, np.array([0, 4]), np.array([1], np.uint8), INPUT, 0.5)
    in_b = alone_b[0] > 0
    assert (in_b & (alone_a[0] > 0)).sum() > 50, "the shrunk words should overlap"
    np.testing.assert_array_equal(both[1][:, in_b], alone_b[1][:, in_b])
    only_a = (alone_a[0] > 0) & ~in_b
    np.testing.assert_array_equal(both[1][:, only_a], alone_a[1][:, only_a])


def test_empty_page():
    score, geo, roi = make_targets(np.zeros((0, 2), np.float32), np.zeros(1, np.int64), np.zeros(0, np.uint8), 64, 0.25)
    assert score.shape == (16, 16) and not score.any() and not geo.any() and roi.all()


def test_legible_word_must_be_a_quad():
    pentagon = np.array([[0, 0], [10, 0], [12, 5], [10, 10], [0, 10]], np.float32)
    with pytest.raises(ValueError, match="4 points"):
        make_targets(pentagon, np.array([0, 5]), np.array([1], np.uint8), 64, 0.5)


def test_shrink_moves_each_edge_in_by_0_3_of_the_short_side():
    wide = np.array([[[0, 0], [100, 0], [100, 20], [0, 20]]], float)
    tall = np.array([[[0, 0], [20, 0], [20, 100], [0, 100]]], float)
    np.testing.assert_allclose(shrink_quads(wide)[0], [[6, 6], [94, 6], [94, 14], [6, 14]])
    np.testing.assert_allclose(shrink_quads(tall)[0], [[6, 6], [14, 6], [14, 94], [6, 94]])


def test_shrink_leaves_edges_of_one_pixel_alone():
    tiny = np.array([[[0, 0], [1, 0], [1, 1], [0, 1]]], float)
    np.testing.assert_array_equal(shrink_quads(tiny), tiny)


def test_polygon_area():
    assert polygon_area(np.array([[0, 0], [4, 0], [4, 3], [0, 3]], float)) == 12
    assert polygon_area(np.array([[0, 0], [0, 3], [4, 3], [4, 0]], float)) == 12


def test_min_rect_angles():
    box = np.array([[10, 10], [110, 10], [110, 40], [10, 40]], float)
    turned = (box - box[0]) @ rotation(20).T + box[0]
    theta = min_rect_angles(np.stack([box, turned]))
    assert theta[0] == 0
    assert abs(abs(theta[1]) - np.deg2rad(20)) < 1e-9


def scattered_words(rng, n: int, extent: float, size: float) -> np.ndarray:
    corners = rng.uniform(0, extent - size, (n, 2))
    return corners[:, None] + np.array([[0, 0], [size, 0], [size, size / 3], [0, size / 3]])


def crop_cuts(quads, origin, size):
    lo, hi = quads.min(axis=1), quads.max(axis=1)
    overlaps = np.all((hi > origin) & (lo < origin + size), axis=1)
    inside = np.all((lo >= origin) & (hi <= origin + size), axis=1)
    return overlaps & ~inside


def test_crop_cuts_no_legible_word_when_it_can():
    rng = np.random.default_rng(3)
    quads = scattered_words(rng, 12, 400, 20)
    care = np.arange(12) % 3 != 0
    for seed in range(20):
        origin, cut = choose_crop(np.random.default_rng(seed), quads, care, (0, 0, 400, 400), 128, 1000)
        assert not cut.any() and not crop_cuts(quads[care], origin, 128).any()
        assert np.all(origin >= 0) and np.all(origin <= 400 - 128)


def test_crop_choice_is_deterministic():
    quads = scattered_words(np.random.default_rng(0), 30, 300, 40)
    care = np.ones(30, bool)
    a = choose_crop(np.random.default_rng(7), quads, care, (0, 0, 300, 300), 96, 200)
    b = choose_crop(np.random.default_rng(7), quads, care, (0, 0, 300, 300), 96, 200)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_crop_that_must_cut_cuts_the_fewest_words():
    # The first legible word is larger than the crop: every candidate cuts it; most can spare the second.
    quads = np.array([[[20, 20], [280, 20], [280, 280], [20, 280]], [[100, 100], [120, 100], [120, 110], [100, 110]]],
                     float)
    origin, cut = choose_crop(np.random.default_rng(0), quads, np.array([True, True]), (0, 0, 300, 300), 100, 50)
    np.testing.assert_array_equal(cut, crop_cuts(quads, origin, 100))
    np.testing.assert_array_equal(cut, [True, False])


def test_image_smaller_than_crop_lies_inside_it():
    quads = np.array([[[5, 5], [50, 5], [50, 20], [5, 20]]], float)
    for seed in range(10):
        origin, cut = choose_crop(np.random.default_rng(seed), quads, np.array([True]), (0, 0, 60, 80), 96, 10)
        assert np.all(origin <= 0) and np.all(origin + 96 >= [60, 80]) and not cut.any()
