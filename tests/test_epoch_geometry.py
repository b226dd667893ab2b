"""Pages stored resized only (--geometry read, the default): every epoch draws each page's height factor, rotation
and crop anew, from (seed, epoch, image name) alone; the crop's targets equal make_targets of the source words under
that draw, bit for bit, and its image a single warp of the source within a PSNR bound."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from east_cache.config import BuildConfig
from east_cache.errors import UsageError
from east_cache.ingest.ufo import load_splits
from east_cache.reader.cache import CacheDataset
from east_cache.sample.crop_draw import cuts_at, grid_step
from east_cache.sample.epoch_geometry import is_affine, page_warp, quad_boxes
from east_cache.sample.geometry import compose, transform_points
from east_cache.sample.make import decode_for, warp, words_in_crop
from east_cache.sample.page import make_page, page_geometry
from east_cache.sample.targets import make_targets
from east_cache.tools.coverage import cache_coverage
from helpers import KS_CRITICAL, assert_reads_as, ks_uniform, make_tiny_cache, psnr
from reference import reference_targets

SIZES = dict(image_size=256, input_size=128, map_scale=0.5)
EPOCHS = 20


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("warped")
    return {codec: make_tiny_cache(sample_root, root / codec, image_codec=codec, image_quality=95, **SIZES)
            for codec in ("raw", "jpeg")}


@pytest.fixture(scope="module")
def records(sample_root, caches):
    cfg = CacheDataset(caches["raw"]).config
    recs, _ = load_splits([sample_root], "train", cfg)
    return {r.name: r for r in recs}


def source_reference(rec, cfg: BuildConfig, matrix: np.ndarray, cut: np.ndarray):
    """What make_sample's path gives for a draw: the image warped once from the decoded source by the composed
    matrix (frame -> page -> crop), and make_targets of the page's words (frame -> page, as the build keeps them)
    mapped by the draw's matrix."""
    _, frame_to_page, _ = page_geometry(rec, cfg, 0)
    assert is_affine(matrix)
    matrix = matrix[:2]
    frame_to_crop = compose(matrix, frame_to_page)
    image = warp(decode_for(rec, frame_to_crop), frame_to_crop, (cfg.input_size, cfg.input_size)).transpose(2, 0, 1)
    page = make_page(rec, cfg, 0, maps=False)
    points, offsets, care, _ = words_in_crop(page.points, page.offsets, page.care > 0, cut, matrix, cfg.input_size)
    return image, (points, offsets, care), make_targets(points, offsets, care, cfg.input_size, cfg.map_scale)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_crop_equals_make_targets_of_the_source_words_under_its_draw(caches, records, codec):
    ds, compact = CacheDataset(caches[codec]), CacheDataset(caches[codec], compact=True)
    cfg, ratios = ds.config, []
    for i, name in enumerate(ds.names):
        for epoch in (0, 7):
            g = ds.cropper.geometry(i, 0, epoch)
            image, words, (score, geo, roi) = source_reference(records[name], cfg, g.matrix, g.cut)
            item = assert_reads_as(ds, compact, (epoch, i), score, geo, roi)
            ratios.append(psnr(item["image"], image))
    # the page was resampled once at build time, the crop once more: within 30 dB of one warp from the source
    assert min(ratios) >= 30, ratios


def test_the_maps_follow_the_plain_reference(caches, records):
    """Tied to the definition too: the plain per-word reference (tests/reference.py) on the same warped words."""
    ds = CacheDataset(caches["raw"])
    g = ds.cropper.geometry(0, 0, 3)
    _, (points, offsets, care), (score, geo, roi) = source_reference(records[ds.names[0]], ds.config, g.matrix, g.cut)
    r_score, r_geo, r_roi = reference_targets(points, offsets, care, ds.config.input_size, ds.config.map_scale)
    np.testing.assert_array_equal(score, r_score)
    np.testing.assert_array_equal(roi, r_roi)
    np.testing.assert_allclose(geo, r_geo, atol=2e-3)


def test_every_epoch_draws_a_new_height_and_angle_as_the_ranges_say(caches):
    ds = CacheDataset(caches["raw"])
    c = ds.config
    draws = {i: [ds.cropper.geometry(i, 0, e) for e in range(EPOCHS)] for i in range(len(ds))}
    for i, gs in draws.items():
        assert len({(g.height, g.angle) for g in gs}) >= 15, f"image {i}: {len(set(gs))} distinct draws"
    heights = [g.height for gs in draws.values() for g in gs]
    angles = [g.angle for gs in draws.values() for g in gs]
    bound = KS_CRITICAL / np.sqrt(len(heights))
    assert ks_uniform(heights, 1 - c.height_jitter, 1 + c.height_jitter) < bound
    assert ks_uniform(angles, -c.max_rotation, c.max_rotation) < bound
    # the pixels move with the draw: two epochs' crops of an image differ
    assert not np.array_equal(ds[(0, 0)]["image"], ds[(1, 0)]["image"])


def test_the_crop_is_word_balanced_in_the_warped_frame(caches):
    """The crop holds the drawn word and cuts no legible word where the rule finds such a crop; words it cuts are
    don't-care (their pixels leave the score map)."""
    ds = CacheDataset(caches["raw"])
    c, step = ds.config, grid_step(ds.config.map_scale)
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        for e in range(5):
            g = ds.cropper.geometry(i, 0, e)
            to_warped, size = page_warp(page.size, g.height, g.angle, step)
            boxes = quad_boxes(transform_points(to_warped, page.legible_quads()))
            np.testing.assert_array_equal(g.cut, cuts_at(boxes, g.origin, c.input_size))
            assert np.all(g.origin % step == 0)
            whole = np.all((boxes[:, :2] >= g.origin) & (boxes[:, 2:] <= g.origin + c.input_size), axis=1)
            assert whole.any(), f"image {i}, epoch {e}: a crop without a whole legible word"


def test_a_draw_depends_on_its_key_alone(caches):
    """Whoever reads it (a pickled copy in a worker, another order, a resumed run): the same crop."""
    ds = CacheDataset(caches["jpeg"])
    first = {(e, i): ds[(e, i)]["image"].tobytes() for e in (2, 0) for i in range(len(ds))}
    other = pickle.loads(pickle.dumps(ds))
    for key in sorted(first, reverse=True):
        assert other[key]["image"].tobytes() == first[key]
    ds.set_epoch(2)
    assert ds[1]["image"].tobytes() == first[(2, 1)]


def test_a_validation_read_is_unaugmented_and_the_same_every_epoch(caches):
    from east_cache import Loader
    ds = CacheDataset(caches["raw"])
    ds.augment = False
    gs = [ds.cropper.geometry(0, 0, e) for e in range(4)]
    assert all(g.height == 1.0 and g.angle == 0.0 for g in gs)
    assert len({g.origin.tobytes() for g in gs}) == 1
    with Loader(caches["raw"], batch_size=2, train=False, normalize=None, workers=0) as loader:
        a, b = list(loader), list(loader)
    assert all(torch.equal(x.image, y.image) and torch.equal(x.geo, y.geo) for x, y in zip(a, b))
    with Loader(caches["raw"], batch_size=2, normalize=None, workers=0, seed=1) as loader:
        a, b = list(loader), list(loader)   # a training loader: the next pass is the next epoch, warped anew
    assert not all(torch.equal(x.image, y.image) for x, y in zip(a, b))


def test_coverage_is_replayed_with_the_warp_and_stays_high(caches):
    """On these 128-px crops of 256-px pages (benchmarks/bench_geometry.py measures full-size pages)."""
    cov, _ = cache_coverage(caches["raw"], (1, EPOCHS))
    assert cov.seen[-1] >= 0.95 and cov.text_free == 0.0, cov
    assert cov.distinct == EPOCHS   # every epoch a crop of its own


def test_variants_are_refused_where_the_reader_draws_the_geometry():
    with pytest.raises(UsageError, match="--geometry build"):
        BuildConfig(variants=2)
    assert BuildConfig(variants=2, geometry="build").variants == 2
    assert BuildConfig(variants=2, crop="build").variants == 2
