"""Page mode: a read-time crop of a cached page equals the crop computed directly, for many origins."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import page_record, psnr, random_page

from east_cache.reader.crop import crop_page, crop_words, legible_boxes
from east_cache.reader.expand import untile
from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.ufo import CARE, ILLEGIBLE, ImageRecord
from east_cache.sample.geometry import (
    compose,
    gather_quads,
    rotation_matrix,
    sample_params,
    transform_points,
)
from east_cache.sample.make import decode_for, make_sample, sample_rng, warp
from east_cache.sample.crop_draw import cuts_at, epoch_crop, grid_step
from east_cache.sample.page import MAX_BLEED_PX, expected_page_size, make_page, max_page_size, page_frame
from east_cache.sample.targets import make_targets
from east_cache.store.format import record_spec
from east_cache.store.page_jpeg import codec_of
from east_cache.store.page_record import (
    MAX_LEGIBLE,
    TILE_PX,
    Page,
    Tiled,
    block_tiles,
    padded_rect,
    page_bytes,
    put_rect,
)

CFG = BuildConfig(image_size=256, input_size=96, map_scale=0.5, geometry="build")   # pages stored warped
# Words of a 320 x 240 page: spread, rotated, overlapping (the 2nd and 3rd), one sticking out of the frame,
# one larger than a crop, a don't-care one.
WORDS = [[[20, 20], [100, 25], [98, 55], [18, 50]], [[130, 30], [220, 30], [220, 60], [130, 60]],
         [[150, 40], [230, 20], [240, 50], [160, 70]], [[30, 100], [90, 80], [100, 110], [40, 130]],
         [[-3, 150], [40, 150], [40, 170], [-3, 170]], [[120, 110], [300, 105], [305, 230], [125, 235]],
         [[250, 180], [310, 180], [310, 200], [250, 200]], [[60, 190], [100, 190], [100, 215], [60, 215]]]
REASONS = [0, 0, 0, 0, 0, 0, ILLEGIBLE, 0]
STEP = grid_step(CFG.map_scale)   # crop origins of CFG's pages are on this grid, as the reader draws them


def on_grid(*index) -> np.ndarray:
    """The crop origin at these grid indices (page px), through the grid rule the reader draws by."""
    return np.asarray(index, np.int64) * STEP


def crop_reference(page: Page, origin, size: int, map_scale: float):
    """make_targets on the page's words shifted into the crop, the legible words the crop cuts as don't-care."""
    points = page.points.astype(np.float64) - np.asarray(origin, np.float64)
    care = page.care.copy()
    care[np.flatnonzero(care)[cuts_at(legible_boxes(page), origin, size)]] = 0
    score, geo, roi = make_targets(points, page.offsets, care, size, map_scale)
    m = score.shape[0]
    on = padded_rect(np.ones(page.owner.shape, bool), *(np.asarray(origin) * map_scale).astype(int), m, m, False)
    return score * on, geo * on, np.where(on, roi, 1)


def assert_crop_exact(page: Page, origin, size: int, map_scale: float) -> bool:
    cut = cuts_at(legible_boxes(page), origin, size)
    got = crop_page(page, origin, cut, size, map_scale)
    score, geo, roi = crop_reference(page, origin, size, map_scale)
    np.testing.assert_array_equal(got["score"][0], score, err_msg=f"score at {origin}")
    np.testing.assert_array_equal(got["roi"][0], roi, err_msg=f"roi at {origin}")
    np.testing.assert_array_equal(got["geo"], geo.astype(np.float16), err_msg=f"geo at {origin}")
    np.testing.assert_array_equal(got["image"], page.image.rect(*origin, size, size))
    return bool(cut.any())


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
@pytest.mark.parametrize("seed", range(3))
def test_crop_equals_make_targets_at_random_origins(seed, map_scale):
    page, size, step = random_page(seed, map_scale=map_scale), 96, grid_step(map_scale)
    rng = np.random.default_rng(100 + seed)
    with_cuts = 0
    for _ in range(60):   # origins anywhere on the grid, also partly off the canvas
        origin = rng.integers([-size // step, -size // step], [400 // step + 1, 300 // step + 1]) * step
        with_cuts += assert_crop_exact(page, origin, size, map_scale)
    assert 5 < with_cuts < 60, "both the slice and the cut path should be exercised"


def test_crop_exact_at_origins_that_graze_words():
    """Origins whose crop edge lies within a map pixel of a word's box, on either side: border words."""
    page, size, step = random_page(7), 96, grid_step(0.5)
    boxes = legible_boxes(page)
    checked = 0
    for lo_x, lo_y, hi_x, hi_y in boxes[:12]:
        for ox in (np.floor(hi_x / step) * step, np.ceil(lo_x / step) * step - size, np.floor(lo_x / step) * step):
            assert_crop_exact(page, np.array([ox, np.floor(lo_y / step) * step - 8], np.int64), size, 0.5)
            checked += 1
    assert checked == 36


def test_make_page_crops_equal_make_targets(tmp_path):
    page = Page.make(page_record(tmp_path, WORDS, size=(320, 240), reason=REASONS), CFG, 0)
    w, h = page.size
    assert w % STEP == 0 and h % STEP == 0
    assert page.maps.shape == (h // 2, w // 2) and page.maps.tiles.dtype == np.uint16
    assert page.owner.max() == 7 and 0 < page.roi.mean() < 1
    assert page.care.tolist() == [1, 1, 1, 1, 1, 1, 0, 1] and len(page.theta) == 7
    rng = np.random.default_rng(0)
    for _ in range(40):
        origin = on_grid(*rng.integers([-8, -8], [(w - 96) // STEP + 8, (h - 96) // STEP + 8]))
        assert_crop_exact(page, origin, 96, 0.5)


@pytest.mark.parametrize("variant", range(3))
def test_page_slice_matches_a_direct_warp_of_the_crop(tmp_path, variant):
    """The crop image is the page slice; warping the source straight into the crop differs only by cv2's
    fixed-point rounding of the source coordinates (1/32 px): a few grey levels at sharp edges."""
    rec = page_record(tmp_path, WORDS, size=(320, 240), reason=REASONS)
    page = Page.make(rec, CFG, variant)
    params = sample_params(sample_rng(CFG.seed, rec.name, variant), rec.width, rec.height, CFG)
    rotate = rotation_matrix(params, rec.width, rec.height)
    d = decode_for(rec, rotate)
    x0, y0, w, h = page_frame(params, rec.width, rec.height, d.sx, d.sy, transform_points(rotate, rec.points), STEP)
    for origin in (on_grid(0, 0), on_grid((w - 96) // STEP, (h - 96) // STEP), on_grid(12, 5),
                   on_grid(-4, (h - 80) // STEP)):
        direct = warp(d, compose(np.array([[1.0, 0, -x0 - origin[0]], [0, 1, -y0 - origin[1]]]), rotate), (96, 96))
        diff = np.abs(direct.transpose(2, 0, 1).astype(int) - page.image.rect(*origin, 96, 96))
        assert diff.max() <= 32 and diff.mean() < 0.5, (origin, diff.max(), diff.mean())


@pytest.mark.parametrize("w, h", [(130, 97), (64, 64), (31, 200)])
@pytest.mark.parametrize("channels, tile, dtype", [((3,), TILE_PX, np.uint8), ((), 16, np.uint16), ((), 8, np.uint16)])
def test_tiles_give_every_rect_of_the_array(w, h, channels, tile, dtype):
    """Tiled (a page's image, its maps at map scale 0.5 and 0.25): a rect or a block of tiles cut anywhere, on
    the array, across its edges or off it, holds the array's values and zeros beyond it, bit for bit."""
    rng = np.random.default_rng(w)
    arr = rng.integers(1, 256 if dtype == np.uint8 else 1 << 16, (*channels, h, w)).astype(dtype)
    tiles = Tiled.from_array(arr, tile)
    assert tiles.shape == arr.shape and tiles.tiles.shape[2:] == (*channels, tile, tile) and tiles.tile == tile
    np.testing.assert_array_equal(tiles.array(), arr)
    for _ in range(40):
        x, y = (int(v) for v in rng.integers(-80, [w + 40, h + 40]))
        side = int(rng.integers(1, 100))
        want = padded_rect(arr, x, y, side, side, 0)
        np.testing.assert_array_equal(tiles.rect(x, y, side, side), want, err_msg=str((x, y, side)))
        block, (dx, dy) = tiles.block(x, y, side)
        n = block_tiles(side, tile)
        assert block.shape == (n, n, *channels, tile, tile) and 0 <= dx < tile and 0 <= dy < tile
        block = np.ascontiguousarray(block).view(np.int16 if dtype == np.uint16 else dtype)
        block = torch.from_numpy(block if channels else block[:, :, None])   # untile takes (n, n, C, T, T)
        got = untile(block[None], [(dx, dy, side)])[0].numpy()
        np.testing.assert_array_equal(got.view(dtype).reshape(want.shape), want, err_msg=str((x, y, side)))


@pytest.mark.parametrize("tile", [16, 8])
def test_put_rect_writes_any_rectangle_into_tiles(tile):
    """put_rect (how a crop's maps patch is written into its block of tiles): inside one tile, along tile edges,
    across many tiles, touching the block's edges; nothing outside the rectangle changes."""
    rng = np.random.default_rng(tile)
    arr = rng.integers(0, 1 << 16, (5 * tile, 5 * tile)).astype(np.uint16)
    for x, y, w, h in [(1, 2, 3, 4), (0, 0, tile, tile), (tile - 1, tile - 1, 2, 2), (3, 5, 4 * tile, 2 * tile + 3),
                       (tile, 2 * tile, 3 * tile, tile), (0, 0, 5 * tile, 5 * tile), (2, 0, 5 * tile - 2, 1)]:
        tiles = Tiled.from_array(arr, tile).tiles
        values = rng.integers(0, 1 << 16, (h, w)).astype(np.uint16)
        put_rect(tiles, x, y, values)
        want = arr.copy()
        want[y:y + h, x:x + w] = values
        np.testing.assert_array_equal(Tiled(tiles, 5 * tile, 5 * tile).array(), want, err_msg=str((x, y, w, h)))


def test_page_canvas_keeps_the_rotated_corners(tmp_path):
    """A white frame rotated into the page: nothing touches the canvas border, all four corners are there."""
    rec = page_record(tmp_path, [[[0, 0], [320, 0], [320, 240], [0, 240]]], size=(320, 240))
    for variant in range(4):
        page = Page.make(rec, BuildConfig(image_size=256, input_size=96, max_rotation=30), variant)
        img = page.image.array().max(axis=0)
        assert not img[[0, -1]].any() and not img[:, [0, -1]].any()
        ys, xs = np.nonzero(img > 128)
        assert xs.max() - xs.min() > 200 and ys.max() - ys.min() > 150


def test_no_page_exceeds_max_page_size(tmp_path):
    cfg = BuildConfig(image_size=128, input_size=64, height_jitter=0.3, max_rotation=20)
    limit = max_page_size(cfg)
    for size in ((320, 240), (240, 240), (100, 300)):
        rec = page_record(tmp_path, [[[-20, -20], [40, -20], [40, 10], [-20, 10]]], size=size, name=f"p{size[0]}")
        for variant in range(6):
            w, h = make_page(rec, cfg, variant).size
            assert w <= limit[0] and h <= limit[1]


@pytest.mark.parametrize("geometry", ["build", "read"])
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_page_round_trips_through_flat_record_fields(tmp_path, codec, geometry):
    """A page written at the start of a record's fixed-size fields reads back as the same page: its image's pixels
    (jpeg: the codec's, within its bound of the warped page), its maps (only raw pages stored warped keep them) and
    its words."""
    cfg = BuildConfig(image_size=128, input_size=64, image_codec=codec, geometry=geometry)
    maps = codec == "raw" and geometry == "build"
    rec = page_record(tmp_path, WORDS, size=(320, 240), reason=REASONS)
    content = make_page(rec, cfg, 2, maps=maps)
    page = Page.from_content(content, cfg.map_scale, codec_of(cfg), rec.name)
    if codec == "raw":
        np.testing.assert_array_equal(page.image.array(), content.image)
    else:
        assert psnr(page.image.array(), content.image) >= 40
    if maps:
        np.testing.assert_array_equal(page.owner, content.owner)
        np.testing.assert_array_equal(page.roi, content.roi)
    else:
        assert page.maps is None and "maps" not in record_spec(cfg).kind.names
    spec = record_spec(cfg)
    fields = {f: np.zeros(spec.dtype[f].shape, spec.dtype[f].base) for f in spec.kind.names}
    used = page.write_into(fields, codec_of(cfg))
    assert sorted(used) == sorted(spec.kind.names) and used["size"] == 2
    back = Page.from_fields(fields["image"][:used["image"]], fields.get("maps"), fields["size"], page.points,
                            page.offsets, page.care, page.weight, cfg.map_scale, codec=codec_of(cfg), where=rec.name)
    assert back.size == page.size
    np.testing.assert_array_equal(back.image.array(), page.image.array())
    if maps:
        np.testing.assert_array_equal(back.maps.array(), page.maps.array())
        assert page_bytes(page.size, 0.5) == page.image.tiles.nbytes + page.maps.tiles.nbytes
        assert used["image"] == page.image.tiles.size and used["maps"] == page.maps.tiles.size
    for name in ("theta", "weight"):
        np.testing.assert_array_equal(getattr(back, name), getattr(page, name), err_msg=name)
    inside = page_record(tmp_path, WORDS[:4], size=(320, 240), name="inside")   # no word off the image
    for v in range(3):
        expected, real = np.array(expected_page_size(320, 240, cfg, inside.name, v)), make_page(inside, cfg, v).size
        assert np.all(expected >= real) and np.all(expected - real <= 2 * MAX_BLEED_PX + STEP)


def test_a_page_with_more_legible_words_than_its_maps_hold_is_refused_before_decoding(tmp_path):
    n = MAX_LEGIBLE + 1
    quads = np.tile(np.array([[0, 0], [4, 0], [4, 4], [0, 4]], np.float32), (n, 1))
    rec = ImageRecord(name="dense.png", path=str(tmp_path / "absent.png"), source="train.json", width=8, height=8,
                      points=quads, offsets=np.arange(0, 4 * n + 1, 4, dtype=np.int64),
                      reason=np.full(n, CARE, np.uint8), fingerprint="f")
    with pytest.raises(DataError, match=f"dense.png has {n} legible words; a page holds at most {MAX_LEGIBLE}"):
        Page.make(rec, CFG, 0)


def test_page_words_are_make_sample_words_shifted(tmp_path):
    """Page v and make_sample's variant v draw the same augmentation: their words differ by a translation."""
    rec = page_record(tmp_path, WORDS, size=(320, 240), reason=REASONS)
    page, s = make_page(rec, CFG, 1), make_sample(rec, CFG, 1)
    params = sample_params(sample_rng(CFG.seed, rec.name, 1), rec.width, rec.height, CFG)
    expected = transform_points(rotation_matrix(params, rec.width, rec.height), rec.points)
    shift = expected - page.points
    np.testing.assert_allclose(shift, shift[:1].repeat(len(shift), 0), atol=1e-3)
    assert len(s.care) <= len(page.care)


def test_crop_words_are_the_overlapping_words_with_cuts_dont_care():
    page = random_page(3)
    boxes = legible_boxes(page)
    origin = on_grid(25, 20)
    cut = cuts_at(boxes, origin, 96)
    points, offsets, care = crop_words(page, origin, cut, 96)
    assert offsets[-1] == len(points) and len(care) == len(offsets) - 1
    lo = np.minimum.reduceat(points, offsets[:-1], axis=0)
    hi = np.maximum.reduceat(points, offsets[:-1], axis=0)
    assert np.all((hi > 0) & (lo < 96))
    legible_whole = np.all((lo >= 0) & (hi <= 96), axis=1) & (care > 0)
    assert legible_whole.sum() == care.sum() == np.sum(~cut & np.all((boxes[:, :2] >= origin) & (boxes[:, 2:] <= origin + 96), axis=1))


def test_crop_choice_is_deterministic_per_key():
    page = random_page(1)

    def crop(epoch):
        return epoch_crop(0, epoch, "x.jpg", 0, legible_boxes(page), page.size, 96, STEP, page.weight)
    a, b = crop(3), crop(3)
    np.testing.assert_array_equal(a[0], b[0])
    others = {tuple(crop(e)[0]) for e in range(20)}
    assert len(others) > 10, "epochs should draw different crops"


def dense_records(tmp_path, n: int, words: int, seed: int, size=(640, 360)):
    from east_cache.ingest.ufo import load_splits
    from east_cache.tools.sampledata import write_sample_dataset
    root = write_sample_dataset(tmp_path / f"dense-{seed}", n_images=n, words_per_page=words, page_size=size, seed=seed)
    return load_splits([root], "train", BuildConfig())[0]


def test_a_page_warped_at_read_time_weighs_its_words_in_its_warped_frames_too(tmp_path):
    """--geometry read: the draw weights are word_weights over the upright page and the four corner warps of the
    default draw (height 1 -/+ jitter, angle -/+ rotation, crop side: cfg.stored()'s, so that the reader-only options
    a build is given leave the stored page as it is); a pre-warped page (--geometry build), which the reader does not
    warp again, keeps the upright page's weights."""
    from east_cache.sample.crop_draw import word_boxes, word_weights
    from east_cache.sample.page import warped_frames
    (rec,) = dense_records(tmp_path, 1, 40, seed=5)
    cfg = BuildConfig(image_size=2048, input_size=256)
    page = make_page(rec, cfg, 0, maps=False)
    boxes, step = word_boxes(page.points, page.offsets)[page.care > 0], grid_step(cfg.map_scale)
    quads = gather_quads(page.points, page.offsets, page.care > 0)
    kept = cfg.stored()
    frames = warped_frames(quads, page.size, kept)
    assert len(frames) == 4 and all(b.shape == boxes.shape for b, _ in frames)
    assert {size for _, size in frames} != {page.size}, "the rotated canvas is larger than the page"
    np.testing.assert_allclose(page.weight, word_weights(boxes, page.size, kept.input_size, step, frames))
    upright = word_weights(boxes, page.size, kept.input_size, step)
    assert not np.allclose(page.weight, upright)
    still = BuildConfig(image_size=2048, input_size=512, height_jitter=0, max_rotation=0)
    np.testing.assert_array_equal(make_page(rec, still, 0, maps=False).weight, page.weight)
    prewarped = make_page(rec, BuildConfig(image_size=2048, input_size=256, geometry="build"), 0, maps=False)
    np.testing.assert_allclose(prewarped.weight, word_weights(word_boxes(prewarped.points, prewarped.offsets)[
        prewarped.care > 0], prewarped.size, cfg.input_size, step))
