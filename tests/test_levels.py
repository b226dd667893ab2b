"""A page stored resized only (--geometry read) keeps its half level beside it: the raw page's 2 x 2 means, or JPEG
tiles of them; a crop that shrinks the page by about 2 or more reads it instead of the page (a quarter of the px
and of the tiles to decode), and verify and the reader check its bytes as the page's."""
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
from east_cache.store.format import JPEG_LEVELS_PAGE
from east_cache.store.formats.packed import extent_problem
from east_cache.store.jpeg_tiles import pack
from east_cache.store.page_jpeg import JpegImage
from east_cache.store.page_rows import PageRows
from east_cache.tools.verify import verify

SIZES = dict(image_size=256, input_size=128, map_scale=0.5)


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("levels")
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
    out = make_tiny_cache(sample_root, tmp_path / "c", image_codec="jpeg", image_quality=95, **SIZES)
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
