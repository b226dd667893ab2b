"""Image decoding: RGB from any mode, EXIF orientation chosen by the frame size, DCT-scaled JPEG decode, bad files."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from east_cache.errors import DataError
from east_cache.ingest import imageio
from east_cache.ingest.imageio import contiguous_source, decode_image, oriented_size

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


def photo_like(w: int, h: int, seed: int = 0) -> np.ndarray:
    """Gradients, blotchy texture, sensor noise and dark text: what a camera gives, at test size."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x / w * 200, y / h * 180 + 40, (x + y) / (w + h) * 150 + 50], -1)
    a += cv2.resize(rng.uniform(-30, 30, (h // 16, w // 16, 3)).astype(np.float32), (w, h),
                    interpolation=cv2.INTER_CUBIC)
    a = np.clip(a + rng.normal(0, 4, a.shape), 0, 255).astype(np.uint8)
    cv2.putText(a, "Total 12.50", (w // 20, h // 2), cv2.FONT_HERSHEY_SIMPLEX, w / 300, (20, 20, 20), max(1, w // 150))
    return a


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


@pytest.mark.parametrize("scale, reduction", [(0.5, 2), (0.25, 4), (0.125, 8)])
def test_reduced_jpeg_decode_matches_a_downscaled_full_decode(tmp_path, scale, reduction):
    # DCT scaling is a different low-pass from an area average: on photo-like content the two agree to
    # a mean of 1.5 levels and 6 levels at the 99th percentile; only text edges differ more.
    Image.fromarray(photo_like(512, 384)).save(tmp_path / "p.jpg", quality=90)
    full = decode_image(tmp_path / "p.jpg", 512, 384).image
    d = decode_image(tmp_path / "p.jpg", 512, 384, scale=scale)
    assert d.image.shape == (384 // reduction, 512 // reduction, 3) and d.sx == d.sy == 1 / reduction
    err = np.abs(d.image.astype(int) - cv2.resize(full, d.image.shape[1::-1], interpolation=cv2.INTER_AREA))
    assert err.mean() <= 1.5 and np.percentile(err, 99) <= 6


@pytest.mark.parametrize("scale", [1.0, 0.5])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_matches_pil_exif_transpose(tmp_path, orientation, scale):
    path = save_jpeg(tmp_path / "o.jpg", Image.fromarray(photo_like(96, 64)), orientation)
    with Image.open(path) as im:
        if scale < 1:
            im.draft("RGB", (48, 32))
        upright = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    h, w = upright.shape[:2]
    d = decode_image(path, round(w / scale), round(h / scale), scale=scale)
    assert d.exif_applied == (orientation != 1) and d.warning is None
    # Both decode with libjpeg-turbo's accurate integer DCT: at most a rounding step apart across builds.
    assert d.image.shape == upright.shape and np.abs(d.image.astype(int) - upright).max() <= 1


@pytest.mark.skipif(imageio._opencv() is None, reason="this OpenCV leaves JPEG decoding to PIL")
def test_rgb_jpeg_decodes_into_its_own_array_once(tmp_path):
    """OpenCV writes the RGB pixels into the array returned: no PIL buffer, no bytes joined, no convert."""
    Image.fromarray(photo_like(64, 48)).save(tmp_path / "p.jpg", quality=90)
    d = decode_image(tmp_path / "p.jpg", 64, 48)
    assert d.image.flags.owndata and d.image.flags.c_contiguous and d.image.base is None


@pytest.mark.parametrize("orientation", range(1, 9))
def test_contiguous_source_maps_an_exif_view_to_the_stored_pixels(tmp_path, orientation):
    path = save_jpeg(tmp_path / "o.jpg", Image.fromarray(photo_like(48, 32)), orientation)
    with Image.open(path) as im:
        w, h = ImageOps.exif_transpose(im).size
    image = decode_image(path, w, h).image
    pixels, to_pixels = contiguous_source(image)
    assert pixels.flags.c_contiguous and np.shares_memory(pixels, image), "the turn undone, not copied"
    y, x = np.mgrid[0:h, 0:w]
    px, py = (np.rint(to_pixels @ np.stack([x.ravel(), y.ravel(), np.ones(x.size)])).astype(int))
    assert (pixels[py, px].reshape(image.shape) == image).all()
    # A warp through the map reads the same image as a warp of the upright copy (fixed-point rounding aside).
    m = np.array([[0.7, 0.2, 3.0], [-0.1, 0.8, 2.0]])
    via_map = cv2.warpAffine(pixels, m @ np.vstack([cv2.invertAffineTransform(to_pixels), [0, 0, 1]]), (40, 40))
    assert np.abs(via_map.astype(int) - cv2.warpAffine(np.ascontiguousarray(image), m, (40, 40))).max() <= 1


def test_mpo_decodes_its_first_picture_like_a_jpeg(tmp_path):
    """Some cameras save MPO: a JPEG with more pictures after it. The first one is the photo."""
    first, second = Image.fromarray(photo_like(64, 48, seed=1)), Image.fromarray(photo_like(64, 48, seed=2))
    first.save(tmp_path / "m.mpo", format="MPO", save_all=True, append_images=[second], quality=95)
    with Image.open(tmp_path / "m.mpo") as im:
        assert im.format == "MPO"
        expected = np.asarray(im.convert("RGB"))
    d = decode_image(tmp_path / "m.mpo", 64, 48)
    assert np.abs(d.image.astype(int) - expected).max() <= 1
    assert decode_image(tmp_path / "m.mpo", 64, 48, scale=0.5).image.shape == (24, 32, 3)
