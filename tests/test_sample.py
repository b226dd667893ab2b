"""make_sample: reproducible draws, image and words warped by one matrix, shapes and dtypes."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import page_record

from east_cache.config import BuildConfig
from east_cache.ingest.ufo import ILLEGIBLE, ImageRecord
from east_cache.sample.make import Sample, make_sample, sample_rng

CFG = BuildConfig(image_size=192, input_size=96, map_scale=0.5, crop_tries=50)
# White words on a black 240 x 180 page, spread so that every crop holds some of them.
WORDS = [[[20, 20], [100, 25], [98, 55], [18, 50]], [[130, 30], [220, 30], [220, 60], [130, 60]],
         [[30, 100], [90, 80], [100, 110], [40, 130]], [[140, 110], [215, 105], [220, 150], [145, 155]],
         [[105, 70], [125, 70], [125, 95], [105, 95]]]


def page(tmp_path, words=WORDS, **kw) -> ImageRecord:
    return page_record(tmp_path, words, **kw)


def test_same_seed_name_and_variant_give_the_same_bytes(tmp_path):
    rec = page(tmp_path)
    a, b = make_sample(rec, CFG, 1), make_sample(rec, CFG, 1)
    for field, x, y in zip(Sample._fields, a, b):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), field
        else:
            assert x == y, field


def test_variants_differ(tmp_path):
    rec = page(tmp_path)
    a, b = make_sample(rec, CFG, 0), make_sample(rec, CFG, 1)
    assert a.image.tobytes() != b.image.tobytes()


def test_sample_rng_depends_on_seed_name_and_variant():
    draw = lambda *key: sample_rng(*key).integers(0, 2**62)  # noqa: E731
    assert draw(0, "a.jpg", 0) == draw(0, "a.jpg", 0)
    assert len({draw(0, "a.jpg", 0), draw(1, "a.jpg", 0), draw(0, "b.jpg", 0), draw(0, "a.jpg", 1)}) == 4


def test_shapes_and_dtypes(tmp_path):
    s = make_sample(page(tmp_path), CFG, 0)
    m = CFG.map_size
    assert s.image.shape == (3, 96, 96) and s.image.dtype == np.uint8
    assert s.score.shape == s.roi.shape == (1, m, m) and s.score.dtype == s.roi.dtype == np.uint8
    assert s.geo.shape == (5, m, m) and s.geo.dtype == np.float32
    assert s.points.dtype == np.float32 and s.points.shape[1] == 2
    assert s.offsets.dtype == np.int64 and s.offsets[0] == 0 and s.offsets[-1] == len(s.points)
    assert s.care.dtype == np.uint8 and len(s.care) == len(s.offsets) - 1


@pytest.mark.parametrize("fmt, scale", [("png", 1), ("png", 2), ("jpg", 4)])
def test_words_land_on_the_warped_text(tmp_path, fmt, scale):
    """The image (decoded, possibly at reduced size) and the words go through the same matrix."""
    rec = page(tmp_path, fmt=fmt, scale=scale)
    checked = 0
    for variant in range(6):
        s = make_sample(rec, CFG, variant)
        img = s.image.max(axis=0)
        for k in np.flatnonzero(s.care):
            quad = s.points[s.offsets[k]:s.offsets[k + 1]]
            x, y = np.around(quad.mean(axis=0)).astype(int)
            assert img[y, x] > 200, f"variant {variant}, word {k}: centre ({x}, {y}) is not on white"
            checked += 1
        ys, xs = np.nonzero(s.score[0])
        assert np.all(img[np.around(ys / CFG.map_scale).astype(int), np.around(xs / CFG.map_scale).astype(int)] > 128)
    assert checked >= 6


def test_a_page_without_words(tmp_path):
    rec = page(tmp_path, words=np.zeros((0, 4, 2)))
    s = make_sample(rec, CFG, 0)
    assert not s.score.any() and not s.geo.any() and s.roi.all()
    assert len(s.points) == 0 and len(s.care) == 0 and s.offsets.tolist() == [0]


def test_illegible_words_are_dont_care(tmp_path):
    big = BuildConfig(image_size=96, input_size=96, map_scale=0.5)   # the whole page fits in the crop
    rec = page(tmp_path, reason=[ILLEGIBLE] * len(WORDS))
    s = make_sample(rec, big, 0)
    assert len(s.care) == len(WORDS) and not s.care.any()
    assert not s.score.any() and not s.roi.all()
