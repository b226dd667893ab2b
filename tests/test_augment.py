"""The reader's augmentation is the training run's choice (east_cache/augment.py Augment): height, rotation, scale and
perspective in one homography per crop, drawn from the crop's key alone; targets equal make_targets of the words
under a matrix built here from the drawn parameters alone; the geometry means what its names say; options that only
a reader uses never rebuild a --geometry read cache, and a --geometry build cache refuses them."""
from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.errors import UsageError
from east_cache.reader.cache import CacheDataset
from east_cache.reader.warped import WarpedImage
from east_cache.sample.epoch_geometry import draw_geometry
from east_cache.sample.targets import make_targets
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest
from east_cache.store.page_rows import PageRows
from helpers import KS_CRITICAL, TINY, assert_reads_as, ks_uniform, make_tiny_cache, train_run

SIZES = dict(image_size=256, input_size=128, map_scale=0.5)
EPOCHS = 20
ALL_ON = Augment(height_jitter=0.2, max_rotation=15, input_size=128, scale=(0.5, 1.0), perspective=0.1)


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("augment")
    return {codec: make_tiny_cache(sample_root, root / codec, image_codec=codec, image_quality=95, **SIZES)
            for codec in ("raw", "jpeg")}


# ---------------------------------------------------------------- a plain reference, built from the drawn parameters

def reference_matrix(page_size, height, angle, scale, corners, origin, size, step) -> np.ndarray:
    """page px -> crop px from the drawn parameters alone, one plain 3 x 3 factor at a time: about the page's centre
    the height scaled, the page turned counter-clockwise on screen (cv2.getRotationMatrix2D's sign, as the
    baseline's PIL rotate), both sides scaled; the warped canvas's box moved to the origin (floored, sides on the
    grid); the crop's origin moved to 0; then the square whose corners moved by corners x size mapped onto the crop,
    solved here as 8 linear equations."""
    w, h = page_size
    cx, cy = w / 2, h / 2
    to_centre = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1]], float)
    tall = np.diag([1.0, height, 1.0])
    turn = np.vstack([cv2.getRotationMatrix2D((0, 0), angle, 1.0), [0, 0, 1]])
    grow = np.diag([scale, scale, 1.0])
    back = np.array([[1, 0, cx], [0, 1, cy], [0, 0, 1]], float)
    warp = back @ grow @ turn @ tall @ to_centre
    box = project(warp, np.array([[0, 0], [w, 0], [w, h], [0, h]], float))
    lo = np.floor(box.min(axis=0))
    shift = np.array([[1, 0, -lo[0] - origin[0]], [0, 1, -lo[1] - origin[1]], [0, 0, 1]], float)
    return homography(np.array([[0, 0], [size, 0], [size, size], [0, size]], float) + corners * size,
                      np.array([[0, 0], [size, 0], [size, size], [0, size]], float)) @ shift @ warp


def homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3 x 3 H (h33 = 1) with H src_k ~ dst_k, k = 0..3: the 8 equations of the direct linear transform."""
    a, b = [], []
    for (x, y), (u, v) in zip(src, dst):
        a += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        b += [u, v]
    return np.append(np.linalg.solve(np.array(a), np.array(b)), 1.0).reshape(3, 3)


def project(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    q = np.column_stack([points, np.ones(len(points))]) @ matrix.T
    return q[:, :2] / q[:, 2:]


def reference_words(page, matrix: np.ndarray, size: int):
    """(points float32, offsets, care): every word mapped by matrix, those whose box overlaps the crop kept, legible
    words that the crop cuts (box overlapping, not inside) made don't-care."""
    pts64 = project(matrix, np.asarray(page.points, float))
    pts = pts64.astype(np.float32)
    words = [slice(page.offsets[k], page.offsets[k + 1]) for k in range(len(page.offsets) - 1)]
    keep_pts, offsets, care = [], [0], []
    for k, s in enumerate(words):
        lo, hi = pts[s].min(axis=0), pts[s].max(axis=0)
        if not np.all((hi > 0) & (lo < size)):
            continue
        lo64, hi64 = pts64[s].min(axis=0), pts64[s].max(axis=0)
        inside = np.all(lo64 >= 0) and np.all(hi64 <= size)
        keep_pts.append(pts[s])
        offsets.append(offsets[-1] + len(pts[s]))
        care.append(int(page.care[k] > 0 and inside))
    points = np.concatenate(keep_pts) if keep_pts else np.zeros((0, 2), np.float32)
    return points, np.array(offsets, np.int64), np.array(care, np.uint8)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_targets_under_any_drawn_homography_equal_the_plain_reference(caches, codec):
    ds = CacheDataset(caches[codec], augment=ALL_ON)
    compact = CacheDataset(caches[codec], compact=True, augment=ALL_ON)
    step, tilted = 4, 0
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        for epoch in range(6):
            g = ds.cropper.geometry(i, 0, epoch)
            tilted += bool(g.corners.any())
            matrix = reference_matrix(page.size, g.height, g.angle, g.scale, g.corners, g.origin, 128, step)
            np.testing.assert_allclose(matrix, g.matrix, rtol=1e-9, atol=1e-9)
            score, geo, roi = make_targets(*reference_words(page, matrix, 128), 128, 0.5)
            assert_reads_as(ds, compact, (epoch, i), score, geo, roi)
    assert tilted >= len(ds) * 6 // 2   # the homographies were tested, not only affine draws


# ---------------------------------------------------------------- the geometry means what its names say

WORD = np.array([[100, 140], [300, 140], [300, 160], [100, 160]], np.float64)   # horizontal, 200 x 20 px
PAGE = (400, 300)


def drawn(aug: Augment, seed: int = 0):
    """A draw for a page holding WORD, and WORD in the crop."""
    g = draw_geometry(np.random.default_rng(seed), WORD[None], PAGE, np.ones(1), aug.resolve(BuildConfig()), 4)
    return g, project(g.matrix, WORD)


def sides(quad: np.ndarray) -> tuple[float, float]:
    """(width, height): the lengths of the top edge and the left edge."""
    return float(np.linalg.norm(quad[1] - quad[0])), float(np.linalg.norm(quad[3] - quad[0]))


@pytest.mark.parametrize("seed", range(5))
def test_height_scales_the_height_and_leaves_the_width(seed):
    g, quad = drawn(Augment(height_jitter=0.5, max_rotation=0, input_size=512), seed)
    assert g.height != 1 and g.angle == 0
    width, height = sides(quad)
    assert width == pytest.approx(200, abs=1e-9) and height == pytest.approx(20 * g.height, abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_an_angle_turns_a_word_by_it_counter_clockwise_on_screen(seed):
    g, quad = drawn(Augment(height_jitter=0, max_rotation=40, input_size=512), seed)
    top = quad[1] - quad[0]
    assert math.degrees(math.atan2(-top[1], top[0])) == pytest.approx(g.angle, abs=1e-9)   # y down: -dy is up
    # the baseline's sign: PIL's rotate(a), whose vertices rotate_img maps as cv2.getRotationMatrix2D(a) does
    baseline = cv2.transform(WORD[None].astype(np.float64), cv2.getRotationMatrix2D((200, 150), g.angle, 1.0))[0]
    edge = baseline[1] - baseline[0]
    np.testing.assert_allclose(top, edge, atol=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_a_scale_scales_both_sides(seed):
    g, quad = drawn(Augment(height_jitter=0, max_rotation=0, input_size=512, scale=(0.5, 2.0)), seed)
    assert g.scale != 1
    assert sides(quad) == pytest.approx((200 * g.scale, 20 * g.scale), abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_a_perspective_makes_parallel_sides_meet(seed):
    g, quad = drawn(Augment(height_jitter=0, max_rotation=0, input_size=512, perspective=0.2), seed)
    cross = lambda a, b: a[0] * b[1] - a[1] * b[0]   # noqa: E731
    assert abs(cross(quad[1] - quad[0], quad[2] - quad[3])) > 1e-3   # top and bottom no longer parallel
    assert abs(cross(quad[3] - quad[0], quad[2] - quad[1])) > 1e-3   # nor left and right


@pytest.mark.parametrize("aug", [Augment(height_jitter=0.5, max_rotation=30, input_size=256),
                                 Augment(height_jitter=0.3, max_rotation=20, input_size=256, scale=(0.5, 1.5),
                                         perspective=0.15)])
def test_the_pixels_move_with_the_words(aug):
    """A bright word on a dark page: where the warped crop is bright is where the mapped word lies."""
    pixels = np.zeros((PAGE[1], PAGE[0], 3), np.uint8)
    cv2.fillPoly(pixels, [WORD.astype(np.int32)], (255, 255, 255))
    for seed in range(4):
        g, quad = drawn(aug, seed)
        crop = np.asarray(WarpedImage(PageRows(pixels), g.matrix, aug.input_size))[..., 0]
        mask = np.zeros_like(crop)
        cv2.fillPoly(mask, [np.round(quad).astype(np.int32)], 255)
        bright, inside = crop > 127, mask > 0
        assert (bright & inside).sum() >= 0.9 * inside.sum() and (bright & ~inside).sum() <= 0.1 * inside.sum()


# ---------------------------------------------------------------- the draws

@pytest.mark.slow
def test_every_enabled_part_draws_many_values_over_its_whole_range(caches):
    ds = CacheDataset(caches["raw"], augment=ALL_ON)
    draws = [[ds.cropper.geometry(i, 0, e) for e in range(EPOCHS)] for i in range(len(ds))]
    parts = {"height": (lambda g: g.height, 0.8, 1.2), "angle": (lambda g: g.angle, -15, 15),
             "scale": (lambda g: g.scale, 0.5, 1.0), "corner": (lambda g: g.corners[2, 1], -0.1, 0.1)}
    for name, (value, lo, hi) in parts.items():
        for i, gs in enumerate(draws):
            assert len({value(g) for g in gs}) >= 15, f"image {i}: few distinct {name} draws"
        every = [value(g) for gs in draws for g in gs]
        assert ks_uniform(every, lo, hi) < KS_CRITICAL / np.sqrt(len(every)), name
    corners = np.concatenate([g.corners.ravel() for gs in draws for g in gs])
    assert ks_uniform(corners, -0.1, 0.1) < KS_CRITICAL / np.sqrt(len(corners))
    ds.augment = False   # a validation read: none of it
    for i in range(len(ds)):
        g = ds.cropper.geometry(i, 0, 5)
        assert (g.height, g.angle, g.scale) == (1.0, 0.0, 1.0) and not g.corners.any() and g.affine


def test_a_part_drawn_with_a_chance_is_off_in_about_that_share():
    aug = Augment(input_size=512, scale=(0.5, 0.9), perspective=0.1, scale_p=0.3, perspective_p=0.6)
    gs = [drawn(aug, seed)[0] for seed in range(400)]
    assert abs(np.mean([g.scale != 1 for g in gs]) - 0.3) < 0.08
    assert abs(np.mean([g.corners.any() for g in gs]) - 0.6) < 0.08


def test_the_baseline_draw_draws_nothing_more():
    """Scale (1, 1) and perspective 0 take no numbers: the crops of the three old parts are those they were."""
    g = drawn(Augment(input_size=512))[0]
    rng = np.random.default_rng(0)
    assert (g.height, g.angle) == (float(rng.uniform(0.8, 1.2)), float(rng.uniform(-10, 10)))
    assert g.scale == 1 and g.affine


def test_augment_refuses_what_it_cannot_draw():
    for bad in (dict(scale=(1.0, 0.5)), dict(scale=(0.0, 1.0)), dict(perspective=0.3), dict(input_size=100),
                dict(scale_p=2.0), dict(height_jitter=1.0), dict(max_rotation=-1.0)):
        with pytest.raises(UsageError, match="must be"):
            Augment(**bad)
    assert Augment.from_dict(ALL_ON.to_dict()) == ALL_ON


def test_the_fields_not_given_keep_the_caches_values(sample_root, tmp_path):
    """Augment(scale=...) on a cache built with --input-size 512 --max-rotation 5 --height-jitter 0.1: 512-px crops
    at those values, in Python as on the command line (Augment's fields default to the cache's, not to 1024 px)."""
    from east_cache import Loader
    cache = make_tiny_cache(sample_root, tmp_path / "c512", image_size=512, input_size=512, max_rotation=5.0,
                            height_jitter=0.1)
    loader = Loader(cache, 2, augment=Augment(scale=(0.5, 1.0)), workers=0, jitter=0)
    assert loader.dataset.aug == Augment(height_jitter=0.1, max_rotation=5.0, input_size=512, scale=(0.5, 1.0))
    assert next(iter(loader)).image.shape[-2:] == (512, 512)
    ds = CacheDataset(cache, augment=Augment(max_rotation=20))
    assert (ds.aug.input_size, ds.aug.max_rotation, ds.aug.height_jitter, ds[0]["image"].shape) == \
        (512, 20.0, 0.1, (3, 512, 512))
    assert Augment().resolve(ds.config) == Augment.of_cache(ds.config) and not Augment().resolved
    with pytest.raises(UsageError, match="must be"):   # a value given is still checked when it is made
        Augment(input_size=100)


# ---------------------------------------------------------------- no rebuild, and the frozen kind

@pytest.mark.slow
def test_a_reader_only_option_changed_rebuilds_nothing(tiny_data, tmp_path):
    out = tmp_path / "c"
    base = dict(TINY, map_scale=0.5)
    build_cache(BuildConfig(**base), [tiny_data], out, jobs=1, quiet=True)
    for name, value in (("max_rotation", 25.0), ("height_jitter", 0.05), ("input_size", 128)):
        base[name] = value
        report = build_cache(BuildConfig(**base), [tiny_data], out, jobs=1, quiet=True)
        assert report.computed == 0 and report.up_to_date, name
        assert name in report.reader_defaults
        assert getattr(Manifest.load(out).config, name) == value   # the new defaults recorded
    ds = CacheDataset(out)
    assert ds.size == 128 and ds[0]["image"].shape == (3, 128, 128)
    base["image_size"] = 128   # what the pages depend on: made anew
    assert build_cache(BuildConfig(**base), [tiny_data], out, jobs=1, quiet=True).computed > 0


@pytest.mark.slow
def test_a_cache_of_warped_pages_refuses_another_augmentation(tiny_data, tmp_path):
    out = make_tiny_cache(tiny_data, tmp_path / "b", geometry="build", variants=2)
    ds = CacheDataset(out, augment=Augment.of_cache(CacheDataset(out).config))   # its own build values: read
    assert len(ds) == 2
    with pytest.raises(UsageError, match=r"--max-rotation 25 \(built with 10\).*--geometry read"):
        CacheDataset(out, augment=Augment.of_cache(ds.config, max_rotation=25.0))
    with pytest.raises(UsageError, match="--scale 0.5,1"):
        train_run(out, tmp_path / "run", "--scale", "0.5,1", "--max-steps", "1")
    cfg = BuildConfig(**{**TINY, "map_scale": 0.5, "geometry": "build", "variants": 2, "max_rotation": 25.0})
    report = build_cache(cfg, [tiny_data], out, jobs=1, quiet=True)
    assert report.computed == 4   # there they are build options: the pages are made anew


@pytest.mark.slow
def test_a_run_records_its_augmentation_and_a_resume_keeps_it(tiny_cache, tmp_path, capsys):
    run = tmp_path / "run"
    train_run(tiny_cache, run, "--scale", "0.5,1", "--perspective", "0.05", "--max-rotation", "20", "--epochs", "1")
    first = capsys.readouterr().out
    assert "scale U[0.5, 1], perspective 0.05" in first and "rotation U[-20, 20] deg" in first
    ck = torch.load(run / "latest.pt", map_location="cpu", weights_only=True)
    assert Augment.from_dict(ck["augment"]) == Augment(height_jitter=0.2, max_rotation=20.0, input_size=64,
                                                       scale=(0.5, 1.0), perspective=0.05)
    with pytest.raises(UsageError, match=r"--scale 0.7,1 \(recorded 0.5,1\).*--init-from"):
        train_run(tiny_cache, run, "--resume", str(run / "latest.pt"), "--scale", "0.7,1", "--epochs", "2")
    train_run(tiny_cache, run, "--resume", str(run / "latest.pt"), "--epochs", "2")
    assert "scale U[0.5, 1]" in capsys.readouterr().out   # the recorded one, no flag given
    train_run(tiny_cache, tmp_path / "new", "--init-from", str(run / "latest.pt"), "--epochs", "1")
    assert "scale" not in capsys.readouterr().out.split("weights:")[0]   # a new run: its own (none given)


# ---------------------------------------------------------------- strong downscales read a reduced level

def test_a_crop_that_halves_the_page_reads_its_half_level():
    from east_cache.sample.epoch_geometry import read_level
    turn = lambda s, a=7.0: np.vstack([cv2.getRotationMatrix2D((0, 0), a, s), [0, 0, 1]])   # noqa: E731
    # the level whose px is nearest the crop's: 0.6 reads the half level (x 1.2), 0.75 the page, 0.2 the quarter
    assert [read_level(turn(s), 512) for s in (1.0, 0.75, 0.6, 0.5, 0.3, 0.2, 0.1)] == [1, 1, 2, 2, 4, 4, 8]
    # a height factor: the area scale counts, sqrt(0.6 x 0.78) = 0.68 reads the half level, sqrt(0.75 x 0.9) the page
    assert [read_level(np.diag([s, s * 1.3, 1.0]), 512) for s in (0.6, 0.75)] == [2, 1]
    # a homography's scale is its centre's: 0.75 at the near side, 0.67 at the centre (its preimage x = 366, w = 1.07:
    # 0.75 / w^2 across, 0.75 / w down), so the half level
    tilted = np.array([[0.75, 0, 0], [0, 0.75, 0], [2e-4, 0, 1.0]])
    assert read_level(tilted, 512) == 2
    assert read_level(tilted * [[1.2], [1.2], [1]], 512) == 1   # 0.81 there: the page


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_the_half_level_is_the_page_averaged_then_warped(caches, codec):
    """At scale 0.5 the crop is the page averaged over 2 x 2 then warped (resize-then-warp), not a bilinear warp of
    the full page that skips 3 px in 4; the words are the same either way."""
    from east_cache.sample.epoch_geometry import level_matrix
    from helpers import psnr
    ds = CacheDataset(caches[codec], augment=Augment(height_jitter=0, max_rotation=10, input_size=64,
                                                     scale=(0.5, 0.5)))
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        full = np.ascontiguousarray(page.image.array().transpose(1, 2, 0))
        half = cv2.resize(full[:full.shape[0] // 2 * 2, :full.shape[1] // 2 * 2],
                          (full.shape[1] // 2, full.shape[0] // 2), interpolation=cv2.INTER_AREA)
        g = ds.cropper.geometry(i, 0, 1)
        reference = cv2.warpAffine(half, (g.matrix @ level_matrix(2))[:2], (64, 64), flags=cv2.INTER_LINEAR)
        crop = ds[(1, i)]["image"].transpose(1, 2, 0)
        whole = np.asarray(WarpedImage(page.image, g.matrix, 64, levels=False))
        assert psnr(crop, reference) >= 40 and psnr(crop, reference) > psnr(whole, reference)


@pytest.mark.parametrize("scale", [1.0, 0.6, 0.3])
def test_a_jpeg_crop_decodes_only_the_tiles_under_it_and_reads_as_its_whole_box(caches, scale):
    """A turned, tilted crop's box holds tiles its inverse image misses: those are not decoded, and the crop's px are
    those of the whole box decoded (at each level)."""
    import east_cache.reader.warped as warped
    from east_cache.sample.epoch_geometry import read_level, source_rect
    from east_cache.store.jpeg_tiles import block_of
    ds = CacheDataset(caches["jpeg"], augment=Augment(height_jitter=0, max_rotation=45, input_size=64,
                                                     scale=(scale, scale), perspective=0.2))
    skipped = 0
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        for epoch in range(1, 4):
            g = ds.cropper.geometry(i, 0, epoch)
            f = read_level(g.matrix, 64)
            keep = warped.touched(g.matrix, 64, page.image.tiles.tile, f)(*block_of(page.image.tiles,
                                                                                   *source_rect(g.matrix, 64)))
            skipped += int((~keep).sum())
            real, warped.touched = warped.touched, lambda *a: (lambda tx, ty, nx, ny: np.ones((ny, nx), bool))
            try:
                box = np.asarray(WarpedImage(page.image, g.matrix, 64))
            finally:
                warped.touched = real
            assert np.array_equal(np.asarray(WarpedImage(page.image, g.matrix, 64)), box)
    assert skipped > 0


@pytest.mark.slow
def test_words_far_from_a_tilted_crop_or_past_its_horizon_are_clipped_to_it():
    """A big page, small crops, the strongest perspective: words reach the homography's horizon, where their
    mapped points are huge or torn in two; each is clipped to the crop first (don't-care where legible), so the
    targets stay bounded and the legible words of the crop stay quads."""
    from east_cache.reader.warped import warped_words
    from east_cache.sample.epoch_geometry import far_words
    from east_cache.sample.geometry import gather_quads
    rng = np.random.default_rng(0)
    n, side = 300, 6000
    xy, wh = rng.uniform(0, side - 300, (n, 2)), rng.uniform([30, 10], [300, 60], (n, 2))
    zero = np.zeros(n)
    quads = np.stack([xy, xy + np.c_[wh[:, 0], zero], xy + wh, xy + np.c_[zero, wh[:, 1]]], 1)
    quads[:4] = [[[0, 100 + k * 1500], [side, 120 + k * 1500], [side, 160 + k * 1500], [0, 140 + k * 1500]]
                 for k in range(4)]   # lines across the whole page
    care = (np.arange(n) % 7 > 0).astype(np.uint8)

    class Words:
        points, offsets = quads.reshape(-1, 2).astype(np.float32), np.arange(0, 4 * n + 1, 4)
    Words.care = care
    aug = Augment(height_jitter=0.2, max_rotation=30, input_size=128, scale=(0.125, 0.2), perspective=0.25)
    far = 0
    for seed in range(60):
        g = draw_geometry(np.random.default_rng(seed), quads[care > 0], (side, side), np.ones(care.sum()), aug, 4)
        far += far_words(g.matrix, Words.points, Words.offsets, 128).sum()
        points, offsets, kept = warped_words(Words, g, 128)
        assert not len(points) or np.abs(points - 64).max() <= 128 * 4 + 1e-3
        gather_quads(points, offsets, kept > 0)   # legible words are quads
        make_targets(points, offsets, kept, 128, 0.5)
    assert far > 1000   # the case was met


def test_which_way_an_angle_turns_is_said_where_each_matrix_is_made():
    """Measured: a point right of the page's centre moves up under the reader's positive angle (counter-clockwise on
    screen, y down: page_warp) and down under the build's (geometry.rotation_matrix); each says so, and nothing else in
    the package says which way a positive angle turns (augment.py said clockwise, of the reader's draw)."""
    import inspect
    from pathlib import Path
    from east_cache.sample import epoch_geometry, geometry
    m, _ = epoch_geometry.page_warp((200, 200), 1.0, 30.0, 4)
    centre, right = m @ [100, 100, 1.0], m @ [180, 100, 1.0]
    assert right[1] < centre[1], "the reader's positive angle: counter-clockwise on screen"
    b = geometry.rotation_matrix(geometry.AugParams(1.0, 1.0, 30.0), 200, 200)
    assert (b @ [180, 100, 1.0])[1] > (b @ [100, 100, 1.0])[1], "the build's: clockwise on screen"
    assert "a positive angle turns the page counter-clockwise" in " ".join(inspect.getdoc(epoch_geometry.page_warp)
                                                                             .split())
    assert "A positive angle turns the image clockwise" in " ".join(inspect.getdoc(geometry.rotation_matrix).split())
    package = Path(epoch_geometry.__file__).parents[1]
    saying = sorted(str(f.relative_to(package)) for f in package.rglob("*.py")
                    if "positive angle" in " ".join(f.read_text().split()))
    assert saying == ["sample/epoch_geometry.py", "sample/geometry.py"], saying


def test_an_augment_not_yet_resolved_describes_its_defaults_as_the_caches():
    """Augment()'s height jitter, rotation and crop side mean the cache's until a reader resolves them: its one-line
    description says so, where it used to fail on the None it holds; resolved, it gives the figures."""
    from east_cache.config import BuildConfig
    from east_cache import Augment
    loose = Augment(scale=(0.5, 1))
    assert loose.describe() == "height x the cache's, rotation the cache's, scale U[0.5, 1], the cache's crop side"
    fixed = loose.resolve(BuildConfig(input_size=512, height_jitter=0.1, max_rotation=5))
    assert fixed.describe() == "height x U[0.9, 1.1], rotation U[-5, 5] deg, scale U[0.5, 1], 512 px crop"
