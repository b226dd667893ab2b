"""JPEG tiles of a page image: the image within a PSNR bound of the raw page on photo-like content, any block of
tiles equal to the same window of the whole decoded page (zeros off the page), and every kind of damage a
CacheError that says what to run."""
from __future__ import annotations

import zlib

import cv2
import numpy as np
import pytest

import east_cache.store.jpeg_tiles as jt
from east_cache.errors import CacheError
from east_cache.store.jpeg_tiles import (
    JpegSettings,
    JpegTiles,
    block_of,
    check_tiles,
    decode_block,
    decode_window,
    encode_tiles,
    pack,
    unpack,
)

PSNR_BOUND_DB = 40.0   # the image error a compressed page may add, against the raw page
WHERE = "data/page-00000.npy record 3 (image a.jpg, variant 0)"


def photo(h: int = 232, w: int = 300, seed: int = 0) -> np.ndarray:
    """(h, w, 3) uint8 like a page warped from a camera photo: a photo at twice the size (uneven light over a
    textured table, a paper rectangle with lines of dark, slightly coloured text and a red stamp, lens blur, sensor
    noise) shrunk by half, as a phone's 12 MP photo is to a 2048 px page. Its JPEG takes more bytes than a page of
    real receipt photos at the same quality (harder to compress, so a fair test of the bound)."""
    rng = np.random.default_rng(seed)
    H, W = 2 * h, 2 * w
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    light = 0.8 + 0.2 * np.sin(xx / W * 3 + rng.uniform(0, 6)) * np.cos(yy / H * 2)
    grain = cv2.resize(rng.uniform(-15, 15, (H // 8, W // 40)).astype(np.float32), (W, H))
    img = np.array([120, 80, 50], np.float32) + grain[..., None]
    x0, y0 = W // 8, H // 10
    img[y0:H - y0, x0:W - x0] = rng.uniform(215, 240)
    img = img.astype(np.uint8)   # cv2 draws text on 8 bits
    for k, y in enumerate(range(y0 + 28, H - y0 - 8, 48)):
        text = "".join(chr(c) for c in rng.integers(97, 123, 12))
        ink = (170, 30, 40) if k == 3 else tuple(int(v) for v in rng.integers(0, 60) + rng.integers(0, 20, 3))
        cv2.putText(img, text, (x0 + 12, y), cv2.FONT_HERSHEY_SIMPLEX, 0.9, ink, 2, cv2.LINE_AA)
    img = cv2.GaussianBlur(img * light[..., None], (0, 0), 0.8) + rng.normal(0, 3, (H, W, 3))
    return cv2.resize(np.clip(img, 0, 255).astype(np.uint8), (w, h), interpolation=cv2.INTER_AREA)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


@pytest.fixture(params=["simplejpeg", "opencv"])
def decoder(request, monkeypatch):
    """Each test runs with both decoders: simplejpeg (into the buffer) where installed, and OpenCV's fallback."""
    if request.param == "opencv":
        monkeypatch.setattr(jt, "simplejpeg", None)
    elif jt.simplejpeg is None:
        pytest.skip("simplejpeg is not installed")
    return request.param


@pytest.mark.parametrize("settings", [JpegSettings(), JpegSettings(tile=64, quality=95)])
def test_round_trip_is_within_the_psnr_bound(settings, decoder):
    img = photo()
    tiles = unpack(pack(encode_tiles(img, settings)), WHERE)
    whole = decode_window(tiles, 0, 0, img.shape[1], img.shape[0], WHERE)
    assert whole.shape == img.shape
    assert psnr(whole, img) >= PSNR_BOUND_DB
    assert tiles.nbytes < img.nbytes / 4   # compressed, or the codec is pointless


def test_both_decoders_give_the_same_pixels(monkeypatch):
    if jt.simplejpeg is None:
        pytest.skip("simplejpeg is not installed")
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    ours = decode_window(tiles, 0, 0, tiles.width, tiles.height, WHERE)
    monkeypatch.setattr(jt, "simplejpeg", None)
    np.testing.assert_array_equal(decode_window(tiles, 0, 0, tiles.width, tiles.height, WHERE), ours)


def test_any_block_is_that_window_of_the_whole_page(decoder):
    img = photo(200, 260, seed=1)
    tiles = encode_tiles(img, JpegSettings(tile=64))
    t, (w, h) = tiles.tile, (tiles.width, tiles.height)
    m = 5 * t   # the whole page with zeros around it: every window below lies inside
    padded = np.zeros((h + 2 * m, w + 2 * m, 3), np.uint8)
    padded[m:m + h, m:m + w] = decode_window(tiles, 0, 0, w, h, WHERE)
    rng = np.random.default_rng(2)
    windows = [(int(x), int(y), int(rng.integers(1, 200)), int(rng.integers(1, 200)))
               for x, y in rng.integers(-2 * t, 260 + t, (40, 2))]
    windows += [(0, 0, w, h), (-t, -t, w + 2 * t, h + 2 * t), (w - 1, h - 1, 1, 1), (w, h, 30, 30)]
    for x, y, ww, hh in windows:
        want = padded[m + y:m + y + hh, m + x:m + x + ww]
        np.testing.assert_array_equal(decode_window(tiles, x, y, ww, hh, WHERE), want, err_msg=str((x, y, ww, hh)))
        tx, ty, nx, ny = block_of(tiles, x, y, ww, hh)
        block = np.full((ny, nx, t, t, 3), 77, np.uint8)   # whatever a reused batch slot held before
        decode_block(tiles, tx, ty, nx, ny, block, WHERE)
        pixels = block.transpose(0, 2, 1, 3, 4).reshape(ny * t, nx * t, 3)
        np.testing.assert_array_equal(pixels, padded[m + ty * t:m + (ty + ny) * t, m + tx * t:m + (tx + nx) * t])


def test_pack_is_read_back_as_views_of_the_buffer():
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    buffer = np.concatenate([pack(tiles), np.zeros(100, np.uint8)])   # a record's field is longer than the page
    back = unpack(buffer, WHERE)
    for a, b in zip(back, tiles):
        np.testing.assert_array_equal(a, b)
        if isinstance(a, np.ndarray):
            assert np.shares_memory(a, buffer)
    assert pack(tiles).size == tiles.nbytes


def flip(buffer: np.ndarray, at: int) -> np.ndarray:
    damaged = buffer.copy()
    damaged[at] ^= 0x10
    return damaged


def test_a_damaged_scan_is_a_cache_error_naming_the_tile_and_the_repair(decoder):
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    packed = pack(tiles)
    k = 5   # column 0, row 1 of a 5 x 4 grid
    at = packed.size - tiles.data.size + int(tiles.offsets[k]) + 40   # inside the tile's entropy-coded data
    damaged = unpack(flip(packed, at), WHERE)
    block = np.empty((2, 2, 64, 64, 3), np.uint8)
    with pytest.raises(CacheError, match=r"column 0, row 1\).*damaged.*verify CACHE") as e:
        decode_block(damaged, 0, 0, 2, 2, block, WHERE)
    assert str(e.value).startswith(WHERE)
    decode_block(damaged, 2, 0, 2, 2, block, WHERE)   # tiles away from the damage still decode
    assert "column 0, row 1" in check_tiles(damaged, WHERE)
    assert check_tiles(tiles, WHERE) is None


@pytest.mark.parametrize("part", ["head", "index", "header"])
def test_damage_outside_the_scans_is_found_when_the_page_is_read(part):
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    packed = pack(tiles)
    at = {"head": 6, "index": jt.PACK_HEAD.itemsize + 4 * 3 + 1,
          "header": packed.size - tiles.data.size - tiles.header.size + 30}[part]
    with pytest.raises(CacheError, match="damaged.*verify CACHE"):
        unpack(flip(packed, at), WHERE)


def test_a_truncated_page_is_a_cache_error():
    packed = pack(encode_tiles(photo(), JpegSettings(tile=64)))
    for size in (packed.size - 1, packed.size // 2, 10, 0):
        with pytest.raises(CacheError, match="truncated.*verify CACHE"):
            unpack(packed[:size], WHERE)


def test_a_scan_the_decoder_refuses_is_a_cache_error_not_its_traceback(decoder):
    """A stream whose CRC32 matches (a codec bug, not damage on disk) but that ends early."""
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    scan = tiles.data[tiles.offsets[0]:tiles.offsets[1]][:100]
    broken = JpegTiles(tiles.header, scan, np.array([0, scan.size], np.uint32),
                       np.array([zlib.crc32(scan)], np.uint32), 64, 64, 64)
    with pytest.raises(CacheError, match="does not decode.*verify CACHE"):
        decode_window(broken, 0, 0, 64, 64, WHERE)


def test_a_block_buffer_of_the_wrong_shape_is_refused():
    tiles = encode_tiles(photo(), JpegSettings(tile=64))
    with pytest.raises(ValueError, match="needs a uint8 buffer"):
        decode_block(tiles, 0, 0, 2, 2, np.empty((2, 2, 64, 64, 4), np.uint8), WHERE)


@pytest.mark.parametrize("bad", [dict(tile=40), dict(tile=0), dict(quality=0), dict(quality=101),
                                 dict(subsampling="422")])
def test_settings_are_validated(bad):
    with pytest.raises(ValueError):
        JpegSettings(**bad)
