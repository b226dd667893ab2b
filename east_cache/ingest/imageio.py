"""Image decoding: RGB uint8 in the annotation frame's orientation, at reduced size when the warp allows.

UFO points refer to an img_w x img_h frame. Photos often store their pixels rotated and say so in
EXIF orientation; the frame size tells whether the annotator saw the stored or the rotated layout.

8-bit RGB and grey JPEG files decode with OpenCV straight into the array that is returned, as RGB
(libjpeg-turbo's RGB output, its 1/2, 1/4, 1/8 DCT scaling), and EXIF turns are views of it: one copy from
the file's bytes. PIL reads the header (size, EXIF), decodes every other kind, and decides about any file
OpenCV refuses, so that a damaged file gets PIL's error. Both use libjpeg-turbo: the pixels are the same.
"""
from __future__ import annotations

import functools
import math
import struct
from typing import NamedTuple

import numpy as np
from PIL import Image

from east_cache.errors import DataError, RemoteError
from east_cache.ingest.files import NotAllowed, open_regular

# Pixels a decode may produce (after a JPEG's DCT reduction): ~0.3 GB of RGB plus PIL's intermediates per worker.
# A 100-byte PNG can declare 3.6 Gpx; the header is checked before any pixel is decoded. PIL's own check looks
# at the stored size, which refuses a 200 Mpx phone JPEG that DCT scaling decodes at 3 Mpx, so it is off.
MAX_DECODED_PIXELS = 100_000_000
# Suffixes of the image files in a source folder (what convert links; what a look at a folder counts as images).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
Image.MAX_IMAGE_PIXELS = None
# The value ranges a float or 32-bit grayscale image may use, and the 8-bit scale of each: the smallest that
# holds the pixels is taken (a float page in [0, 1] would otherwise decode all black).
HIGH_DEPTH_RANGES = ((1.0, 255.0), (255.0, 1.0), (65535.0, 1 / 257))

ORIENTATION_TAG = 0x0112
# EXIF orientation -> the transpose that shows the stored pixels upright (EXIF 2.3, tag 0x0112).
_UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,     # PIL rotates counter-clockwise: 270 is 90 degrees clockwise
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_AXES = (5, 6, 7, 8)
# The same turns on an (H, W, C) array, as views: a[y, x] of the upright image.
_UPRIGHT_VIEW = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: a.transpose(1, 0, 2)[:, ::-1],
    7: lambda a: a.transpose(1, 0, 2)[::-1, ::-1],
    8: lambda a: a.transpose(1, 0, 2)[::-1],
}
# OpenCV decodes JPEGs itself (MPO: a camera's JPEG with more pictures appended); 8-bit RGB and grey only, so
# that PIL's mode rules (CMYK) stay the only ones. Not PNG: PIL must decode a PNG anyway to find an EXIF
# chunk after its pixels.
_JPEG_FORMATS = ("JPEG", "MPO")
_FAST_MODES = ("RGB", "L")
# What PIL raises on a file it cannot identify or decode (truncated, not an image, bad header).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)


class Decoded(NamedTuple):
    image: np.ndarray       # uint8 (H, W, 3) RGB; may be read-only, or a turned view (contiguous_source)
    sx: float               # decoded width / frame width: the pixel grid is the frame scaled by (sx, sy)
    sy: float               # decoded height / frame height
    exif_applied: bool      # the EXIF orientation was applied to match the frame
    warning: str | None     # set when neither the stored nor the EXIF-oriented size matches the frame


def decode_image(path, frame_w: int, frame_h: int, scale: float = 1.0) -> Decoded:
    """Decode `path` to RGB for annotations in a frame_w x frame_h frame.

    `scale` is the largest linear scale the caller applies to the frame afterwards; a JPEG is then
    decoded with DCT scaling to the smallest size that still has >= scale * frame pixels per axis.
    An EXIF-turned image comes back as a view (see contiguous_source).
    """
    try:
        with open_regular(path) as f, Image.open(f) as im:
            jpeg = im.format in _JPEG_FORMATS
            if not jpeg:   # before _orientation, which decodes a PNG to look for EXIF after its pixels
                _check_pixels(path, im.size)
            orientation = _orientation(im)
            apply, warning = _match_frame(path, im.size, orientation, frame_w, frame_h)
            swapped = apply and orientation in _SWAPS_AXES
            reduction = _reduction(im.size, swapped, frame_w, frame_h, scale) if jpeg else 1
            _check_pixels(path, (math.ceil(im.size[0] / reduction), math.ceil(im.size[1] / reduction)))
            fast = jpeg and im.mode in _FAST_MODES and _opencv() is not None
            image = _fast_decode(_all_bytes(f), reduction) if fast else None
            if image is None:   # PIL decodes it, or says why it cannot
                if reduction > 1:
                    im.draft("RGB", (im.size[0] // reduction, im.size[1] // reduction))
                image = np.asarray(_to_rgb(path, im))
        if apply:
            image = _UPRIGHT_VIEW[orientation](image)
    except (DataError, RemoteError):   # a store that failed for good: not the image's fault, never skipped
        raise
    except _DECODE_ERRORS as e:
        raise _unreadable(path, e) from None
    return Decoded(image, image.shape[1] / frame_w, image.shape[0] / frame_h, apply, warning)


def contiguous_source(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(C-contiguous (h, w, C) pixels, 2x3 affine: image px -> their px). decode_image turns EXIF-oriented
    images by flipped or transposed views; a warp reads the pixels where they lie through this map instead
    of copying them upright first. Any other layout comes back copied contiguous, with the identity."""
    h, w = image.shape[:2]
    src, m = image, np.eye(3)
    if src.strides[0] < 0:   # undo a vertical flip: row y is row h - 1 - y
        src, m = src[::-1], np.array([[1, 0, 0], [0, -1, h - 1], [0, 0, 1]]) @ m
    if src.strides[1] < 0:
        src, m = src[:, ::-1], np.array([[-1, 0, w - 1], [0, 1, 0], [0, 0, 1]]) @ m
    if src.strides[0] < src.strides[1]:   # undo a transpose: (x, y) is (y, x)
        src, m = src.transpose(1, 0, 2), np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]]) @ m
    if not src.flags.c_contiguous:
        return np.ascontiguousarray(image), np.eye(3)[:2]
    return src, m[:2]


def oriented_size(path) -> tuple[int, int, bool]:
    """(width, height) as EXIF orientation says to show the image, and whether an orientation
    other than 'upright' applies. Reads the header only."""
    try:
        with open_regular(path) as f, Image.open(f) as im:
            if im.format not in _JPEG_FORMATS:   # _orientation decodes a PNG: not one that declares gigapixels
                _check_pixels(path, im.size)
            (w, h), orientation = im.size, _orientation(im)
    except RemoteError:
        raise
    except _DECODE_ERRORS as e:
        raise _unreadable(path, e) from None
    return (h, w, True) if orientation in _SWAPS_AXES else (w, h, orientation != 1)


def _unreadable(path, e: Exception) -> DataError:
    if isinstance(e, NotAllowed):
        return DataError(f"{path}: refused: {e}; replace it with an image file, or pass --skip-bad to leave it out")
    return DataError(f"{path}: cannot read the image ({type(e).__name__}: {e}); replace the file, "
                     f"or pass --skip-bad to leave it out")


def _check_pixels(path, size: tuple[int, int]) -> None:
    w, h = size
    if w * h > MAX_DECODED_PIXELS:
        raise DataError(f"{path}: the image header declares {w}x{h} = {w * h / 1e6:.0f} Mpx, more than the "
                        f"{MAX_DECODED_PIXELS / 1e6:.0f} Mpx one decode may produce (about {3 * w * h / 2**30:.1f} GiB "
                        f"per worker); downscale it (a JPEG is decoded reduced when the image size allows), or pass "
                        f"--skip-bad to leave it out")


def _all_bytes(f) -> bytes:
    """The whole file, from the handle already checked to be a regular file (not the path again)."""
    f.seek(0)
    return f.read()


def _orientation(im: Image.Image) -> int:
    """EXIF orientation 1..8; 1 (upright) when absent or out of range."""
    value = im.getexif().get(ORIENTATION_TAG, 1)
    return value if value in _UPRIGHT else 1


def _match_frame(path, size: tuple[int, int], orientation: int, frame_w: int, frame_h: int) -> tuple[bool, str | None]:
    """(apply the EXIF orientation?, warning): apply it when that gives the frame size, compared on
    the header size (before any draft reduction)."""
    frame = (frame_w, frame_h)
    shown = size[::-1] if orientation in _SWAPS_AXES else size
    if orientation != 1 and shown == frame:
        return True, None
    if size == frame:
        return False, None
    return False, (f"{path}: image is {size[0]}x{size[1]} (EXIF orientation {orientation}: {shown[0]}x{shown[1]}), "
                   f"but img_w x img_h is {frame_w}x{frame_h}; used the stored layout stretched to the frame, "
                   f"check img_w/img_h")


def _reduction(size: tuple[int, int], swapped: bool, frame_w: int, frame_h: int, scale: float) -> int:
    """The largest JPEG DCT reduction (1, 2, 4 or 8) that keeps >= scale * frame pixels per axis."""
    w, h = size
    shown_w, shown_h = (h, w) if swapped else (w, h)
    need = max(scale * frame_w / shown_w, scale * frame_h / shown_h)   # fraction of the stored size
    if need >= 1:
        return 1
    fits = min(w // max(1, math.ceil(w * need)), h // max(1, math.ceil(h * need)))
    return next(r for r in (8, 4, 2, 1) if fits >= r)   # as PIL's draft() picks it


@functools.cache
def _opencv():
    """cv2 when it decodes JPEG as this module needs, else None: OpenCV 5 refuses a truncated JPEG as PIL does
    (tests/test_imageio.py) and has RGB output; older versions are not relied on, and PIL decodes everything.
    Imported on the first decode, not with this module: ingest reads headers only."""
    import cv2
    return cv2 if int(cv2.__version__.split(".")[0]) >= 5 and hasattr(cv2, "IMREAD_COLOR_RGB") else None


def _fast_decode(data: bytes, reduction: int) -> np.ndarray | None:
    """RGB (H, W, 3) at 1/reduction of the stored size, pixels as stored (EXIF ignored); None when OpenCV
    cannot, or will not, decode the bytes."""
    cv2 = _opencv()
    scale = {1: 0, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
    # The DCT scale bits alone: IMREAD_REDUCED_COLOR_n also sets IMREAD_COLOR (BGR), which RGB output excludes.
    flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION | (scale[reduction] & ~cv2.IMREAD_COLOR)
    try:
        return cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error:   # e.g. over OpenCV's pixel limit: PIL's rules decide
        return None


def _to_rgb(path, im: Image.Image) -> Image.Image:
    """RGB; PIL's convert clips deeper grayscale to 255 instead of rescaling it, so those are scaled here."""
    if im.mode in ("I;16", "I;16L", "I;16B"):
        gray = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
    elif im.mode in ("I", "F"):   # 32-bit integer or float: no nominal range, so the data's own is used
        gray = _high_depth_gray(path, np.asarray(im))
    else:
        return im if im.mode == "RGB" else im.convert("RGB")
    return Image.fromarray(np.repeat(gray[..., None], 3, axis=2))


def _high_depth_gray(path, a: np.ndarray) -> np.ndarray:
    """8-bit gray of a float or 32-bit image, scaled from the smallest of HIGH_DEPTH_RANGES that holds it."""
    a = a.astype(np.float64)
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if np.isfinite(lo) and np.isfinite(hi) and lo >= 0:
        for top, scale in HIGH_DEPTH_RANGES:
            if hi <= top:
                return np.clip(np.rint(a * scale), 0, 255).astype(np.uint8)
    raise DataError(f"{path}: a float or 32-bit grayscale image with values from {lo:g} to {hi:g}; only [0, 1], "
                    f"[0, 255] and [0, 65535] have a known meaning. Convert it to 8-bit, or pass --skip-bad to "
                    f"leave it out")
