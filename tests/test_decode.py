"""decode_maps inverts the EAST targets: maps made straight from the definition (the docstring of
east_cache/sample/targets.py; docs/architecture.md, "Targets") (here, by a plain generator that knows each word's exact angle) decode back to the words."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import small_config

from east_cache.reader import CacheDataset
from east_cache.evaluate.overlap import quad_iou
from east_cache.model.decode import decode_maps
from east_cache.evaluate.deteval import evaluate, gt_quads
from east_cache.sample.targets import make_targets
from east_cache.build.run import build_cache


def rectangle(cx, cy, w, h, deg):
    """Quad (4, 2) of a w x h word centred at (cx, cy), turned by deg (clockwise on screen, y down),
    vertices clockwise from the top-left of the reading direction."""
    a = math.radians(deg)
    c, s = math.cos(a), math.sin(a)
    local = [(-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)]
    return np.array([(cx + c * x - s * y, cy + s * x + c * y) for x, y in local])


def plain_maps(words, input_size, map_scale, shrink=0.3):
    """score (m, m) and geo (5, m, m) from the definition: theta undoes the word's turn, p = index / s
    is rotated by theta about v0, a pixel is positive when p' lies in the box shrunk by 0.3 * r on
    every side (a rectangle's r is its shorter edge); later words win."""
    m = int(round(input_size * map_scale))
    score = np.zeros((m, m), np.float32)
    geo = np.zeros((5, m, m), np.float32)
    ys, xs = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    px, py = xs / map_scale, ys / map_scale
    for cx, cy, w, h, deg in words:
        quad = rectangle(cx, cy, w, h, deg)
        theta = -math.radians(deg)
        c, s = math.cos(theta), math.sin(theta)
        (ax, ay), r = quad[0], shrink * min(w, h)
        rx = c * (px - ax) - s * (py - ay) + ax
        ry = s * (px - ax) + c * (py - ay) + ay
        x0, y0 = ax, ay   # the word turned back about v0 is the axis-aligned box [ax, ax + w] x [ay, ay + h]
        x1, y1 = ax + w, ay + h
        inside = (rx >= x0 + r) & (rx <= x1 - r) & (ry >= y0 + r) & (ry <= y1 - r)
        for ch, dist in enumerate([ry - y0, y1 - ry, rx - x0, x1 - rx]):
            geo[ch][inside] = dist[inside]
        geo[4][inside] = theta
        score[inside] = 1
    return score, geo


def assert_recovered(words, quads, tol=1.0, min_iou=0.95):
    assert len(quads) == len(words), f"{len(quads)} quads decoded for {len(words)} words"
    for word in words:
        truth = rectangle(*word)
        errors = [np.abs(q - truth).max() for q in quads]
        best = quads[int(np.argmin(errors))]
        assert min(errors) < tol, f"word {word}: nearest quad {best.tolist()} is {min(errors):.3f} px off"
        assert quad_iou(best, truth) > min_iou


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
@pytest.mark.parametrize("deg", [0, 20, -20])
def test_single_word_round_trip(map_scale, deg):
    words = [(128, 120, 140, 40, deg)]
    score, geo = plain_maps(words, 256, map_scale)
    assert score.sum() > 0
    quads, scores = decode_maps(score, geo, map_scale)
    assert_recovered(words, quads)
    assert quads.dtype == np.float32 and scores.shape == (1,)


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_several_words_round_trip(map_scale):
    words = [(70, 40, 110, 32, 0), (200, 50, 90, 36, 20), (80, 150, 120, 40, -20),
             (190, 170, 80, 48, 7), (128, 228, 200, 34, -3)]
    score, geo = plain_maps(words, 256, map_scale)
    quads, _ = decode_maps(score, geo, map_scale)
    assert_recovered(words, quads)


def test_cached_record_layout_float16():
    """A record's score (1, m, m) uint8 and float16 geo decode as well."""
    words = [(60, 60, 100, 40, 15), (180, 180, 120, 44, -10)]
    score, geo = plain_maps(words, 256, 0.5)
    quads, _ = decode_maps(score[None].astype(np.uint8), geo.astype(np.float16), 0.5)
    assert_recovered(words, quads)


def test_noisy_maps_still_give_one_quad_per_word():
    """Per-pixel predictions that disagree by about a pixel still merge into one quad per word."""
    rng = np.random.default_rng(1)
    words = [(70, 40, 110, 32, 0), (200, 60, 90, 36, 20), (120, 170, 160, 40, -15)]
    score, geo = plain_maps(words, 256, 0.5)
    on = score > 0
    score[on] = rng.uniform(0.85, 1.0, on.sum())
    geo[:4, on] += rng.normal(0, 1.0, (4, on.sum()))
    geo[4, on] += rng.normal(0, 0.005, on.sum())
    quads, _ = decode_maps(score, geo, 0.5)
    assert_recovered(words, quads)


def test_a_words_score_is_the_mean_of_its_pixels_whatever_its_size():
    """The score written for a word (east-predict's "score") is a confidence: a small and a large word whose
    pixels all score 0.9 both get 0.9, not a sum that grows with the word's size."""
    words = [(60, 40, 60, 24, 0), (150, 170, 180, 60, 0)]
    score, geo = plain_maps(words, 256, 0.5)
    score[score > 0] = 0.9
    quads, scores = decode_maps(score, geo, 0.5)
    assert_recovered(words, quads)
    np.testing.assert_allclose(scores, [0.9, 0.9], rtol=1e-5)
    score[:50][score[:50] > 0] = 0.85   # the upper word only: its own confidence
    _, scores = decode_maps(score, geo, 0.5)
    assert sorted(np.round(scores, 4)) == [0.85, 0.9]


def test_empty_map_gives_no_quads():
    quads, scores = decode_maps(np.zeros((64, 64)), np.zeros((5, 64, 64)), 0.5)
    assert quads.shape == (0, 4, 2) and scores.shape == (0,)


def test_bad_shapes_raise():
    with pytest.raises(ValueError):
        decode_maps(np.zeros((64, 64)), np.zeros((4, 64, 64)), 0.5)


def test_a_large_map_decodes_to_every_word():
    """512 x 512 map, 20 words (about 10k positive pixels, which locality-aware NMS merges run by run). How fast
    is measured by benchmarks/bench_eval.py, not asserted here: a shared machine's timings prove nothing."""
    rng = np.random.default_rng(0)
    words = [(100 + 205 * (k % 5), 60 + 250 * (k // 5), rng.uniform(140, 180), rng.uniform(48, 64), rng.uniform(-20, 20))
             for k in range(20)]
    score, geo = plain_maps(words, 1024, 0.5)
    quads, _ = decode_maps(score, geo, 0.5)
    assert_recovered(words, quads)


def random_rectangles(rng, input_size, cell=128):
    """Non-overlapping words, one per cell, turned by up to 30 degrees: at most 100 x 30 px, a word
    spans at most 100 cos 30 + 30 sin 30 < 102 px either way, so it stays inside its cell."""
    return [(cx + rng.uniform(-8, 8), cy + rng.uniform(-8, 8), rng.uniform(60, 100), rng.uniform(18, 30),
             rng.uniform(-30, 30))
            for cy in range(cell // 2, input_size, cell) for cx in range(cell // 2, input_size, cell)]


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_decoding_make_targets_recovers_the_words(map_scale):
    rng = np.random.default_rng(3)
    words = random_rectangles(rng, 512)
    quads = np.stack([rectangle(*w) for w in words])
    points, offsets = quads.reshape(-1, 2), np.arange(len(quads) + 1) * 4
    score, geo, roi = make_targets(points, offsets, np.ones(len(quads), np.uint8), 512, map_scale)
    found, _ = decode_maps(score, geo, map_scale)
    result = evaluate([(quads, np.ones(len(quads), bool))], [found])
    assert result["hmean"] >= 0.95, result


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_decoding_ground_truth_maps_of_a_cached_sample_recovers_its_quads(sample_root, tmp_path, map_scale):
    """The score and geometry maps of the cache's records decode back to the words stored beside them
    (don't-care words as don't-care): DetEval hmean >= 0.95 over every variant."""
    build_cache(small_config(map_scale=map_scale), [sample_root], tmp_path, jobs=1, quiet=True)
    ds = CacheDataset(tmp_path)
    gts, dets = [], []
    for epoch in range(ds.config.variants):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            rec = ds[i]
            dets.append(decode_maps(rec["score"], rec["geo"], map_scale)[0])
            gts.append(gt_quads(*ds.quads(i)))
    result = evaluate(gts, dets)
    assert sum(c.gt_care for c in result["per_image"]) >= 10, "enough legible words to mean something"
    assert result["hmean"] >= 0.95, result


def page_maps(rng, noisy: bool):
    """Maps of a dense generated page (many words per text line, so runs break often), as make_targets draws
    them; noisy: scores and geometry disturbed per pixel, as a model's are."""
    words = [(40 + 70 * (k % 7) + rng.uniform(-4, 4), 20 + 34 * (k // 7), rng.uniform(40, 60), rng.uniform(14, 22),
              rng.uniform(-8, 8)) for k in range(7 * 14)]
    quads = np.stack([rectangle(*w) for w in words])
    points, offsets = quads.reshape(-1, 2), np.arange(len(quads) + 1) * 4
    score, geo, _ = make_targets(points, offsets, np.ones(len(quads), np.uint8), 512, 0.5)
    score = score.astype(np.float32) * 0.95
    if noisy:
        on = score > 0
        score[on] = rng.uniform(0.75, 1.0, on.sum())
        geo[:4, on] += rng.normal(0, 1.5, (4, on.sum())).astype(np.float32)
        geo[4, on] += rng.normal(0, 0.02, on.sum()).astype(np.float32)
    return score, geo


@pytest.mark.slow
@pytest.mark.parametrize("noisy", [False, True])
def test_vectorised_decode_equals_the_run_by_run_one(noisy):
    """decode_maps merges every run at once and tests NMS pairs in bulk: its quads and per-box scores equal those
    of the decode that walked run by run and kept quad by kept quad (tests/reference_decode.py)."""
    import reference_decode
    score, geo = page_maps(np.random.default_rng(5), noisy)
    quads, scores = decode_maps(score, geo, 0.5)
    old_quads, old_scores = reference_decode.decode_maps(score, geo, 0.5)
    assert len(quads) > 50
    assert quads.shape == old_quads.shape
    np.testing.assert_allclose(quads, old_quads, rtol=0, atol=1e-4)
    np.testing.assert_allclose(scores, old_scores, rtol=1e-6)
