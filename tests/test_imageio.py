"""Image decoding: RGB from any mode, EXIF orientation chosen by the frame size, DCT-scaled JPEG decode, bad files."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from preprocess.errors import DataError
from preprocess.ingest.imageio import decode_image, oriented_size

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def corner_image(w: int, h: int) -> Image.Image:
    """Grey image with a red top-left and a blue bottom-right block (16 px: survives JPEG)."""
    a = np.full((h, w, 3), 128, np.uint8)
    a[:16, :16] = RED
    a[-16:, -16:] = BLUE
    return Image.fromarray(a)


def save_jpeg(path, im: Image.Image, orientation: int | None = None):
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    im.save(path, quality=95, exif=exif)
    return path


def near(pixel, colour) -> bool:
    return bool(np.abs(pixel.astype(int) - colour).max() < 40)


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "CMYK", "I;16"])
def test_every_mode_decodes_to_rgb_uint8(tmp_path, mode):
    suffix = ".jpg" if mode == "CMYK" else ".png"
    path = tmp_path / f"img{suffix}"
    if mode == "I;16":
        Image.fromarray(np.full((6, 8), 40000, np.uint16)).save(path)
    else:
        Image.new("RGB", (8, 6), (200, 200, 200)).convert(mode).save(path)
    d = decode_image(path, 8, 6)
    assert d.image.dtype == np.uint8 and d.image.shape == (6, 8, 3)
    assert (d.sx, d.sy, d.exif_applied, d.warning) == (1.0, 1.0, False, None)
    assert np.ptp(d.image.astype(int), axis=2).max() <= 2, "grey stays grey"
    if mode == "I;16":
        assert d.image.max() == 40000 >> 8, "16-bit grey is rescaled, not clipped"


def test_grayscale_png_becomes_three_equal_channels(tmp_path):
    a = np.arange(48, dtype=np.uint8).reshape(6, 8) * 5
    Image.fromarray(a, "L").save(tmp_path / "g.png")
    d = decode_image(tmp_path / "g.png", 8, 6)
    assert (d.image == a[..., None]).all()


def test_exif_orientation_applied_when_the_frame_is_the_rotated_size(tmp_path):
    # Orientation 6: show the stored pixels rotated 90 degrees clockwise. The stored top-left goes
    # to the top-right, the stored bottom-right to the bottom-left.
    path = save_jpeg(tmp_path / "r.jpg", corner_image(64, 32), orientation=6)
    d = decode_image(path, 32, 64)
    assert d.exif_applied and d.warning is None and d.image.shape == (64, 32, 3) and (d.sx, d.sy) == (1, 1)
    assert near(d.image[8, 32 - 8], RED) and near(d.image[64 - 8, 8], BLUE)
    assert near(d.image[8, 8], (128, 128, 128))
    assert oriented_size(path) == (32, 64, True)


def test_exif_orientation_ignored_when_the_raw_size_is_the_frame(tmp_path):
    path = save_jpeg(tmp_path / "r.jpg", corner_image(64, 32), orientation=6)
    d = decode_image(path, 64, 32)
    assert not d.exif_applied and d.warning is None and d.image.shape == (32, 64, 3)
    assert near(d.image[8, 8], RED)


def test_size_matching_neither_layout_warns_and_scales(tmp_path):
    path = save_jpeg(tmp_path / "r.jpg", corner_image(64, 32), orientation=6)
    d = decode_image(path, 128, 48)
    assert not d.exif_applied and d.image.shape == (32, 64, 3)
    assert (d.sx, d.sy) == (64 / 128, 32 / 48)
    assert str(path) in d.warning and "64x32" in d.warning and "32x64" in d.warning and "128x48" in d.warning


@pytest.mark.parametrize("scale, size", [(0.3, (400, 300)), (0.1, (100, 75)), (1.0, (800, 600))])
def test_draft_decodes_jpeg_smaller_but_never_below_the_scale(tmp_path, scale, size):
    path = save_jpeg(tmp_path / "big.jpg", corner_image(800, 600))
    d = decode_image(path, 800, 600, scale=scale)
    assert d.image.shape[1::-1] == size
    assert (d.sx, d.sy) == (size[0] / 800, size[1] / 600) and min(d.sx, d.sy) >= scale
    assert near(d.image[1, 1], RED)


def test_draft_accounts_for_the_exif_rotation(tmp_path):
    path = save_jpeg(tmp_path / "r.jpg", corner_image(160, 80), orientation=6)
    d = decode_image(path, 80, 160, scale=0.25)
    assert d.exif_applied and d.image.shape == (40, 20, 3)
    assert d.sx == d.sy == 0.25
    d = decode_image(path, 90, 170, scale=0.25)   # frame matches nothing: stored layout, still >= scale
    assert d.warning and min(d.sx, d.sy) >= 0.25


def test_png_is_never_draft_scaled(tmp_path):
    corner_image(64, 32).save(tmp_path / "p.png")
    d = decode_image(tmp_path / "p.png", 64, 32, scale=0.1)
    assert d.image.shape == (32, 64, 3) and d.sx == 1


@pytest.mark.parametrize("damage", ["not-an-image", "truncated", "missing"])
def test_unreadable_file_raises_data_error_naming_path(tmp_path, damage):
    path = tmp_path / "bad.jpg"
    if damage == "not-an-image":
        path.write_bytes(b"not an image")
    elif damage == "truncated":
        save_jpeg(path, corner_image(256, 256))
        path.write_bytes(path.read_bytes()[:600])
    with pytest.raises(DataError, match="skip-bad") as e:
        decode_image(path, 256, 256)
    assert str(path) in str(e.value)
    if damage != "truncated":   # a truncated file still has a readable header
        with pytest.raises(DataError, match="skip-bad"):
            oriented_size(path)
