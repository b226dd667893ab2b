"""Image decoding: RGB uint8 in the annotation frame's orientation, at reduced size when the warp allows.

UFO points refer to an img_w x img_h frame. Photos often store their pixels rotated and say so in
EXIF orientation; the frame size tells whether the annotator saw the stored or the rotated layout.
"""
from __future__ import annotations

import math
import struct
from typing import NamedTuple

import numpy as np
from PIL import Image

from preprocess.errors import DataError

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
# What PIL raises on a file it cannot identify or decode (truncated, not an image, bad header).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)


class Decoded(NamedTuple):
    image: np.ndarray       # uint8 (H, W, 3) RGB; may be read-only
    sx: float               # decoded width / frame width: the pixel grid is the frame scaled by (sx, sy)
    sy: float               # decoded height / frame height
    exif_applied: bool      # the EXIF orientation was applied to match the frame
    warning: str | None     # set when neither the stored nor the EXIF-oriented size matches the frame


def decode_image(path, frame_w: int, frame_h: int, scale: float = 1.0) -> Decoded:
    """Decode `path` to RGB for annotations in a frame_w x frame_h frame.

    `scale` is the largest linear scale the caller applies to the frame afterwards; a JPEG is then
    decoded with DCT scaling to the smallest size that still has >= scale * frame pixels per axis.
    """
    try:
        with Image.open(path) as im:
            orientation = _orientation(im)
            apply, warning = _match_frame(path, im.size, orientation, frame_w, frame_h)
            if im.format == "JPEG":
                _draft(im, apply and orientation in _SWAPS_AXES, frame_w, frame_h, scale)
            rgb = _to_rgb(im)
        if apply:
            rgb = rgb.transpose(_UPRIGHT[orientation])
        image = np.asarray(rgb)
    except _DECODE_ERRORS as e:
        raise _unreadable(path, e) from None
    return Decoded(image, image.shape[1] / frame_w, image.shape[0] / frame_h, apply, warning)


def oriented_size(path) -> tuple[int, int, bool]:
    """(width, height) as EXIF orientation says to show the image, and whether an orientation
    other than 'upright' applies. Reads the header only."""
    try:
        with Image.open(path) as im:
            (w, h), orientation = im.size, _orientation(im)
    except _DECODE_ERRORS as e:
        raise _unreadable(path, e) from None
    return (h, w, True) if orientation in _SWAPS_AXES else (w, h, orientation != 1)


def _unreadable(path, e: Exception) -> DataError:
    return DataError(f"{path}: cannot read the image ({type(e).__name__}: {e}); replace the file, "
                     f"or pass --skip-bad to leave it out")


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


def _draft(im: Image.Image, swapped: bool, frame_w: int, frame_h: int, scale: float) -> None:
    """Ask the JPEG decoder for a 1/2, 1/4 or 1/8 size that keeps >= scale * frame pixels per axis."""
    w, h = im.size
    shown_w, shown_h = (h, w) if swapped else (w, h)
    need = max(scale * frame_w / shown_w, scale * frame_h / shown_h)   # fraction of the stored size
    if need < 1:
        # PIL picks the largest reduction whose result is still >= the size asked for.
        im.draft("RGB", (max(1, math.ceil(w * need)), max(1, math.ceil(h * need))))


def _to_rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("I", "I;16", "I;16L", "I;16B"):
        # 16-bit grayscale: PIL's convert clips to 255 instead of rescaling.
        gray = (np.clip(np.asarray(im), 0, 65535).astype(np.uint32) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(gray[..., None], 3, axis=2))
    return im.convert("RGB")
