"""Image identity for duplicate and leak checks: a content hash of the file's bytes (exact copies) and a 64-bit
perceptual hash of its pixels (resized, re-encoded, slightly cropped or brightened copies), with a Hamming
distance threshold between them, and a cache of both keyed by the file's fingerprint.

The perceptual hash is a DCT hash (pHash): the image upright (EXIF applied), in gray, resized to 32 x 32, its
8 x 8 lowest 2-D DCT frequencies, one bit each for above or below their median. Low frequencies move little under
resizing, JPEG re-encoding, a crop of a few per cent or a brightness shift, and differ between distinct images.
benchmarks/bench_check.py measures it on planted copies beside dHash (9 x 8 gradient signs), which finds fewer
copies and pairs more distinct images at every threshold of its sweep. A JPEG is decoded at 1/8 of its size by the
DCT (ingest/imageio.py): its entropy decoding remains, most of the pixel work is skipped.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from east_cache.ingest.files import open_regular
from east_cache.ingest.imageio import decode_image, oriented_size
from east_cache.progress import Progress
from east_cache.atomic import write_atomic
from east_cache.store.fingerprint import file_fingerprint
from east_cache.store.format import IMAGE_HASHES

HASH_BITS = 64
DCT_SIDE = 32            # px, the gray image the DCT hash is taken of
LOW = 8                  # the LOW x LOW lowest frequencies give the 64 bits
DHASH_SIZE = (9, 8)      # (width, height): 8 horizontal gradient signs per row, 8 rows
DECODE_SIDE = 2 * DCT_SIDE   # px, the short side a decode keeps at least: a JPEG's DCT reduction stops above it
# Hamming distance (bits of 64) up to which two images count as copies of one another: where bench_check.py's sweep
# finds nearly every planted copy and few pairs of distinct images (docs/guide.md, "Checking a data set").
NEAR_DISTANCE = 10
HASH_VERSION = 1         # of the cached hashes: bump when the hash changes, so that cached ones are made again
CACHE_FILE = IMAGE_HASHES   # kept in a cache's folder (store/format.py names a cache's files)
PAIR_BLOCK = 1 << 22     # distances computed per block of rows: at most this many bytes at a time
THREADS = min(8, os.cpu_count() or 1)   # decoders release the GIL; a few threads overlap reading and decoding


@dataclass(frozen=True)
class ImageHash:
    content: str         # blake2b of the file's bytes
    pixels: int          # the 64-bit perceptual hash
    size: tuple[int, int]   # (width, height) upright, from the header
    stored: tuple[int, int]  # (width, height) as the pixels are stored (before EXIF orientation)


def dct_hash(gray: np.ndarray) -> int:
    """pHash of a gray uint8 (H, W) image."""
    import cv2
    small = cv2.resize(gray, (DCT_SIDE, DCT_SIDE), interpolation=cv2.INTER_AREA).astype(np.float32)
    low = cv2.dct(small)[:LOW, :LOW].ravel()
    return bits_to_int(low > np.median(low[1:]))   # the DC term (mean brightness) left out of the median


def gradient_hash(gray: np.ndarray) -> int:
    """dHash of a gray uint8 (H, W) image: whether each pixel of a 9 x 8 resize is brighter than its right one."""
    import cv2
    small = cv2.resize(gray, DHASH_SIZE, interpolation=cv2.INTER_AREA).astype(np.int16)
    return bits_to_int((small[:, :-1] > small[:, 1:]).ravel())


def bits_to_int(bits: np.ndarray) -> int:
    return int.from_bytes(np.packbits(bits.astype(np.uint8)).tobytes(), "big")


def gray_of(path) -> tuple[np.ndarray, tuple[int, int]]:
    """(the image upright (EXIF orientation applied) in gray, decoded reduced to DECODE_SIDE px or more a side;
    its upright (width, height) from the header)."""
    import cv2
    w, h, _ = oriented_size(path)
    image = decode_image(path, w, h, scale=min(1.0, DECODE_SIDE / min(w, h))).image
    return cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY), (w, h)


def hash_file(path) -> ImageHash:
    """Both hashes of one image file; a file that cannot be read or decoded raises DataError naming it."""
    from PIL import Image
    gray, size = gray_of(path)   # first: its errors name the file and say what to do
    with open_regular(path) as f:
        content = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
        f.seek(0)
        with Image.open(f) as im:
            stored = im.size
    return ImageHash(content, dct_hash(gray), size, stored)


def distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def near_pairs(hashes: list[int], limit: int = NEAR_DISTANCE) -> list[tuple[int, int, int]]:
    """(i, j, distance) for i < j whose hashes lie within limit bits."""
    return [(i, j, d) for i, j, d in cross_pairs(hashes, hashes, limit) if j > i]


def cross_pairs(a: list[int], b: list[int], limit: int = NEAR_DISTANCE) -> list[tuple[int, int, int]]:
    """(i, j, distance) of every a[i], b[j] within limit bits, by blocks of rows (memory stays bounded)."""
    ha, hb = np.array(a, np.uint64), np.array(b, np.uint64)
    rows, found = max(1, PAIR_BLOCK // max(1, len(hb))), []
    for start in range(0, len(ha), rows):
        d = np.bitwise_count(ha[start:start + rows, None] ^ hb[None, :])
        found += [(int(i) + start, int(j), int(d[i, j])) for i, j in zip(*np.nonzero(d <= limit))]
    return found


class HashStore:
    """Hashes of image files, kept in folder/CACHE_FILE between runs (when folder is given) and made again only for a
    file whose fingerprint (size + mtime, store/fingerprint.py) changed. Read-only stores never write."""

    def __init__(self, folder: Path | None = None, writable: bool = True):
        self.path = Path(folder) / CACHE_FILE if folder is not None else None
        self.writable = writable and self.path is not None
        self.known: dict[str, list] = {}
        self.asked: set[str] = set()   # the files of this run: those saved, so that removed images drop out
        self.changed = False
        if self.path is not None:
            try:
                kept = json.loads(self.path.read_text())
                if kept.get("version") == HASH_VERSION and isinstance(kept.get("files"), dict):
                    self.known = kept["files"]
            except (OSError, ValueError, AttributeError):   # missing or damaged: every hash is made again
                pass

    def hashes(self, paths: list, quiet: bool = False, desc: str = "hashing images") -> list[ImageHash | Exception]:
        """One ImageHash per path, or the DataError of a file that cannot be hashed, in the order of paths."""
        prints = [self._fingerprint(p) for p in paths]
        keys = [file_key(p) for p in paths]   # a file by its absolute path: the same whichever folder named it
        self.asked.update(keys)
        out: list = [self._cached(k, fp) for k, fp in zip(keys, prints)]
        todo = [k for k, h in enumerate(out) if h is None]
        with Progress(len(todo), "images", quiet or len(todo) < 2, desc) as bar, ThreadPoolExecutor(THREADS) as pool:
            for k, h in zip(todo, pool.map(_hash_or_error, [paths[k] for k in todo])):
                out[k] = h
                bar.update()
                if isinstance(h, ImageHash) and prints[k] is not None:
                    self.known[keys[k]] = [prints[k], h.content, f"{h.pixels:016x}", list(h.size),
                                                 list(h.stored)]
                    self.changed = True
        return out

    def save(self) -> None:
        """Keep the hashes of this run's files, where the store is writable and something changed."""
        if not (self.writable and (self.changed or set(self.known) - self.asked)):
            return
        kept = {k: v for k, v in self.known.items() if k in self.asked}
        try:
            write_atomic(self.path, json.dumps({"version": HASH_VERSION, "files": kept}))
        except OSError:   # a folder that cannot be written: the next run hashes again, nothing is lost
            return
        self.changed = False

    def _cached(self, key: str, fp: str | None) -> ImageHash | None:
        kept = self.known.get(key)
        if fp is None or not isinstance(kept, list) or len(kept) != 5 or kept[0] != fp:
            return None
        try:
            return ImageHash(kept[1], int(kept[2], 16), tuple(kept[3]), tuple(kept[4]))
        except (TypeError, ValueError):
            return None

    @staticmethod
    def _fingerprint(path) -> str | None:
        try:
            return file_fingerprint(path)
        except (OSError, ValueError):
            return None


def file_key(path) -> str:
    """How the store names a file: its absolute path (a URL as it is)."""
    text = str(path)
    return text if "://" in text else os.path.abspath(text)


def _hash_or_error(path) -> ImageHash | Exception:
    from east_cache.errors import UserError
    try:
        return hash_file(path)
    except (UserError, OSError, ValueError) as e:
        return e
