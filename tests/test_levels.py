"""A page stored resized only (--geometry read) built with --levels keeps its half level beside it: the raw page's
2 x 2 means, or JPEG tiles of them; a crop that shrinks the page by about 2 or more reads it instead of the page (a
quarter of the px and of the tiles to decode), and verify and the reader check its bytes as the page's. Built without
(the default), a page stores no level, and such a crop reads the page itself at 1/2: the same px (raw) or nearly
(jpeg), and the reader says once that a build with --levels reads it faster."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from helpers import make_tiny_cache, psnr

import east_cache.reader.warped as warped
from east_cache.augment import Augment
from east_cache.errors import CacheError
from east_cache.reader.cache import CacheDataset
from east_cache.reader.warped import WarpedImage
from east_cache.store.format import JPEG_LEVELS_PAGE, JPEG_PAGE, RAW_LEVELS_PAGE, RAW_PAGE
from east_cache.store.formats.packed import extent_problem
from east_cache.store.jpeg_tiles import pack
from east_cache.store.page_jpeg import JpegImage
from east_cache.store.page_rows import PageRows
from east_cache.tools.verify import verify

SIZES = dict(image_size=256, input_size=128, map_scale=0.5)


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    """Built with --levels."""
    root = tmp_path_factory.mktemp("levels")
    return {codec: make_tiny_cache(sample_root, root / codec, image_codec=codec, image_quality=95, levels=True,
                                   **SIZES) for codec in ("raw", "jpeg")}


@pytest.fixture(scope="module")
def plain(sample_root, tmp_path_factory):
    """The same, built without --levels (the default)."""
    root = tmp_path_factory.mktemp("plain")
    return {codec: make_tiny_cache(sample_root, root / codec, image_codec=codec, image_quality=95, **SIZES)
            for codec in ("raw", "jpeg")}


def two_by_two_means(pixels: np.ndarray) -> np.ndarray:
    """The half level by its definition: each px the mean of a 2 x 2 block of page px on even px, rounded half up."""
    h, w = pixels.shape[0] // 2, pixels.shape[1] // 2
    blocks = pixels[:2 * h, :2 * w].astype(np.int32).reshape(h, 2, w, 2, 3)
    return ((blocks.sum(axis=(1, 3)) + 2) // 4).astype(np.uint8)


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_page_keeps_its_half_level_the_2x2_means_of_its_px(caches, codec):
    ds = CacheDataset(caches[codec])
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        full = np.ascontiguousarray(page.image.array().transpose(1, 2, 0))
        half = page.image.half_image().array().transpose(1, 2, 0)
        assert half.shape == (page.size[1] // 2, page.size[0] // 2, 3)
        if codec == "raw":   # exactly: the stored px are the means
            assert np.array_equal(half, two_by_two_means(full))
        else:   # its own JPEG encoding of the means (of the page before its encoding): close to the decoded page's
            assert psnr(half, two_by_two_means(full)) >= 35


def decoded_tiles(monkeypatch) -> list:
    """The list every decode_stream call in reader/warped.py appends to: the tiles a crop decodes."""
    calls = []
    real = warped.decode_stream
    monkeypatch.setattr(warped, "decode_stream", lambda *a, **k: (calls.append(a[3] if len(a) > 3 else 1),
                                                                    real(*a, **k))[1])
    return calls


def test_a_crop_at_scale_one_half_decodes_a_quarter_of_the_tiles_from_the_half_level(caches, monkeypatch):
    """libjpeg's own 1/2-scaled decode of the page's tiles saves only the inverse DCT, each tile's entropy decoding
    stays: a crop that halves the page decodes the half level's tiles at full size, a quarter as many."""
    ds = CacheDataset(caches["jpeg"], augment=Augment(height_jitter=0, max_rotation=10, input_size=128,
                                                      scale=(0.5, 0.5)))
    calls = decoded_tiles(monkeypatch)
    with_half, without = 0, 0
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        for epoch in range(1, 4):
            g = ds.cropper.geometry(i, 0, epoch)
            calls.clear()
            stored = np.asarray(WarpedImage(page.image, g.matrix, 128))
            assert calls and set(calls) == {1}   # the half level's tiles, each at its full size
            with_half += len(calls)
            calls.clear()
            reduced = np.asarray(WarpedImage(JpegImage(page.image.tiles, "page"), g.matrix, 128))   # no half level
            assert set(calls) == {2}
            without += len(calls)
            assert psnr(stored, reduced) >= 30   # two ways to the same level
    assert with_half <= 0.4 * without


def test_a_raw_crop_at_scale_one_half_reads_the_stored_half_level_in_place(caches, monkeypatch):
    """No averaging per crop: the stored means are warped as they are, the same px as averaging the page's."""
    ds = CacheDataset(caches["raw"], augment=Augment(height_jitter=0, max_rotation=10, input_size=128,
                                                     scale=(0.5, 0.5)))
    resized = []
    real = cv2.resize
    monkeypatch.setattr(warped.cv2, "resize", lambda *a, **k: (resized.append(1), real(*a, **k))[1])
    for i in range(len(ds)):
        page = ds.cropper.page(i, 0)
        g = ds.cropper.geometry(i, 0, 1)
        stored = np.asarray(WarpedImage(page.image, g.matrix, 128))
        assert not resized
        averaged = np.asarray(WarpedImage(PageRows(page.image.pixels), g.matrix, 128))   # no half level stored
        assert resized and np.array_equal(stored, averaged)
        resized.clear()


def test_a_damaged_half_level_is_named_by_verify_and_refused_when_read(caches, tmp_path, sample_root):
    out = make_tiny_cache(sample_root, tmp_path / "c", image_codec="jpeg", image_quality=95, levels=True, **SIZES)
    ds = CacheDataset(out)
    f, r = ds.locate(0, 0)
    records = ds.file_records(f)
    image = records[r]["image"]
    half = ds.cropper.page(0, 0).image.half
    at = image.ctypes.data - records.data.ctypes.data + image.size - half.data.size // 2   # in the half level's scans
    path = ds.path(f)
    header = len(path.read_bytes()) - records.data.size
    with open(path, "r+b") as fh:
        fh.seek(header + at)
        byte = fh.read(1)[0]
        fh.seek(header + at)
        fh.write(bytes([byte ^ 0x10]))
    bad = verify(out)
    assert [name for name, _ in bad] == [path.name]
    assert f"image {ds.names[0]}, variant 0 (half level): tile (column" in bad[0][1] and "CRC32" in bad[0][1], bad
    ds = CacheDataset(out)
    ds.cropper.page(0, 0).image.array()   # the page's own tiles are whole
    with pytest.raises(CacheError, match=r"\(half level\): tile .* damaged .*verify CACHE"):
        ds.cropper.page(0, 0).image.half_image().array()


def test_a_levels_page_without_its_half_level_is_a_short_record():
    from east_cache.config import BuildConfig
    from east_cache.store.page_jpeg import JpegCodec
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (3, 60, 100), np.uint8)
    page = JpegCodec(90, "444", levels=True).encode(image, "x")
    spec = JPEG_LEVELS_PAGE.spec(BuildConfig(image_size=96, input_size=64))
    both = np.concatenate([pack(page.tiles), pack(page.half)])
    size = np.array([100, 60], np.int32)
    assert extent_problem({"image": both, "size": size}, spec, 0.5) is None
    assert "half level has no head" in extent_problem({"image": pack(page.tiles), "size": size}, spec, 0.5)


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_build_without_levels_stores_no_half_level(caches, plain, codec):
    """The default build's pages hold the page alone (their kind says so, and so does their length), a quarter fewer
    px than a --levels build's, and the reader's page has no level to read."""
    ds, with_levels = CacheDataset(plain[codec]), CacheDataset(caches[codec])
    assert ds.spec.kind is {"raw": RAW_PAGE, "jpeg": JPEG_PAGE}[codec]
    assert with_levels.spec.kind is {"raw": RAW_LEVELS_PAGE, "jpeg": JPEG_LEVELS_PAGE}[codec]
    stored = kept = 0
    for i in range(len(ds)):
        page, other = ds.cropper.page(i, 0), with_levels.cropper.page(i, 0)
        assert page.image.half is None and page.image.half_image() is None and other.image.half is not None
        f, r = ds.locate(i, 0)
        image = ds.file_records(f)[r]["image"]
        if codec == "raw":
            assert image.size == 3 * page.size[0] * page.size[1]
        else:   # the page's packed tiles and nothing after them
            assert image.size == page.image.tiles.nbytes
        stored, kept = stored + image.size, kept + with_levels.file_records(f)[r]["image"].size
    assert stored < 0.85 * kept


@pytest.mark.parametrize("codec, bound", [("raw", float("inf")), ("jpeg", 35)])
def test_a_crop_at_scale_0_6_without_levels_is_the_level_path_s_crop(caches, plain, codec, bound, monkeypatch):
    """Without a stored level, a crop at scale 0.6 reads the page at 1/2 (raw: its px averaged over 2 x 2 on even px,
    the stored level's very px; jpeg: its tiles decoded at 1/2 by libjpeg, not the level's own encoding): the same
    crop as the --levels cache's, within the bound; its words are the same."""
    monkeypatch.setattr(warped, "_told", [False])
    augment = Augment(height_jitter=0.1, max_rotation=10, input_size=128, scale=(0.6, 0.6))
    ds = CacheDataset(plain[codec], augment=augment)
    ref = CacheDataset(caches[codec], augment=augment)
    worst = float("inf")
    with pytest.warns(warped.NoLevelsWarning):
        for i in range(len(ds)):
            for epoch in range(3):
                got, want = ds[(epoch, i)], ref[(epoch, i)]
                for k in ("score", "geo", "roi"):
                    np.testing.assert_array_equal(got[k], want[k])
                worst = min(worst, psnr(got["image"], want["image"]))
    assert worst >= bound, worst


def test_the_reader_says_once_per_process_that_levels_read_faster(caches, plain, recwarn, monkeypatch):
    """The first crop that reads a page at 1/2 for want of a stored level says so, once; crops at scale 1, and
    those of a --levels cache, say nothing."""
    monkeypatch.setattr(warped, "_told", [False])
    shrunk = Augment(height_jitter=0, max_rotation=10, input_size=128, scale=(0.55, 0.65))
    for augment, cache in ((Augment(height_jitter=0, max_rotation=10, input_size=128), plain["raw"]),
                           (shrunk, caches["raw"]), (shrunk, caches["jpeg"])):
        ds = CacheDataset(cache, augment=augment)
        for i in range(len(ds)):
            ds[(1, i)]
    assert not [w for w in recwarn if issubclass(w.category, warped.NoLevelsWarning)]
    for cache in (plain["raw"], plain["jpeg"]):
        ds = CacheDataset(cache, augment=shrunk)
        for epoch in range(2):
            for i in range(len(ds)):
                ds[(epoch, i)]
    told = [w for w in recwarn if issubclass(w.category, warped.NoLevelsWarning)]
    assert len(told) == 1 and "--levels" in str(told[0].message) and "build --out CACHE" in str(told[0].message)
