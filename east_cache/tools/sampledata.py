"""Built-in sample dataset: synthetic UFO pages with every kind of word real sets have.
Default input of `python -m preprocess build`, data of the tests and pages of the benchmarks. Same arguments,
byte-identical files: every draw comes from a Generator seeded by (seed, split, page index).
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from east_cache.atomic import write_atomic, writing
from east_cache.config import DEFAULT_IGNORE_TAGS

DEFAULT_SAMPLE_DIR = Path("sample_data")
DEFAULT_SPLITS = (("train", 12), ("val", 4))  # (split, pages) of the default set, sharing images/
DEFAULT_PAGE_SIZE = (1536, 2048)   # (W, H) of the default set's pages: the default --image-size, so not enlarged
MARKER = ".sample-ok"         # JSON {split: arguments}, written last: its presence means the split is complete
VERSION = 1                   # recorded in the marker: bump when the generator changes so old sets are rewritten
TAGS = DEFAULT_IGNORE_TAGS + ("occlusion", "inferred")  # real sets also carry tags that do not ignore a word
TEXT_HEIGHT = (12, 60)        # px, font sizes on a page large enough; smaller pages scale the top down
GAP = 3                       # px kept free around every word, so no two words touch
PAD = 2                       # px of blank border around a rendered word, so anti-aliased edges are kept
JPEG_QUALITY = 90
EXIF_ORIENTATION = 0x0112     # EXIF tag; value 6 = "rotate 90 degrees clockwise to display"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class Word:
    mask: Image.Image         # "L" ink coverage, already rotated
    quad: np.ndarray          # float (4, 2): text box corners in mask pixels, clockwise from reading top-left
    text: str
    top: int = 0              # px from the font's ascender line to the ink top: aligns a line on its baseline
    xy: tuple = (0, 0)        # paste offset of the mask on the page
    kind: str = ""            # "", "tiny" or "outside": special words that keep their own annotation
    role: str = ""            # "", "illegible", "poly5", "poly6" or a tag


@lru_cache(maxsize=None)
def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size only
        return ImageFont.load_default()


def _text(rng: np.random.Generator) -> str:
    if rng.random() < 0.1:  # numbers: dates, prices, page numbers
        return str(int(rng.integers(1, 100000)))
    s = "".join(LETTERS[k] for k in rng.integers(0, len(LETTERS), int(rng.integers(2, 11))))
    return s.capitalize() if rng.random() < 0.25 else s


def _make_word(rng: np.random.Generator, size: int, angle: float) -> Word:
    text, font = _text(rng), _font(size)
    l, t, r, b = font.getbbox(text)
    mask = Image.new("L", (r - l + 2 * PAD, b - t + 2 * PAD))
    ImageDraw.Draw(mask).text((PAD - l, PAD - t), text, fill=255, font=font)
    quad = np.array([[PAD, PAD], [PAD + r - l, PAD], [PAD + r - l, PAD + b - t], [PAD, PAD + b - t]], float)
    if angle:  # PIL turns counter-clockwise about the centre, which becomes the centre of the expanded canvas
        rotated = mask.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True)
        c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        quad = (quad - np.array(mask.size) / 2) @ np.array([[c, -s], [s, c]]) + np.array(rotated.size) / 2
        mask = rotated
    return Word(mask, quad, text, top=t)


class Layout:
    """The words placed on one page so far, with their boxes as an array for fast overlap tests."""

    def __init__(self, size: tuple):
        self.size = size                  # (width, height) px
        self.words: list[Word] = []
        self.boxes = np.empty((0, 4))     # x0, y0, x1, y1 of each placed mask

    def hits(self, box: tuple) -> np.ndarray:
        """Boxes of placed words closer than GAP to box (none: the box is free)."""
        x0, y0, x1, y1 = (self.boxes + [-GAP, -GAP, GAP, GAP]).T
        return self.boxes[(box[0] < x1) & (x0 < box[2]) & (box[1] < y1) & (y0 < box[3])]

    def place(self, word: Word, xy: tuple) -> None:
        x, y = word.xy = (int(xy[0]), int(xy[1]))
        self.words.append(word)
        self.boxes = np.vstack([self.boxes, (x, y, x + word.mask.width, y + word.mask.height)])


def _scatter(rng: np.random.Generator, page: Layout, word: Word, tries: int = 30) -> None:
    """Rejection sampling: the first random position that overlaps no earlier word."""
    (W, H), (w, h) = page.size, word.mask.size
    for _ in range(tries if w < W and h < H else 0):
        x, y = int(rng.integers(0, W - w)), int(rng.integers(0, H - h))
        if not len(page.hits((x, y, x + w, y + h))):
            page.place(word, (x, y))
            return


def _scattered(rng, page: Layout, n: int, sizes: tuple) -> None:
    """Words of any size anywhere: half horizontal, a third skewed (photos, stamps), the rest vertical."""
    for _ in range(3 * n):  # bounded: a full page simply gets fewer words
        if len(page.words) >= n:
            return
        u, size = rng.random(), int(rng.integers(sizes[0], sizes[1] + 1))
        angle = 0.0 if u < 0.5 else round(float(rng.uniform(-45, 45)), 1) if u < 0.85 else 90.0 * rng.choice([-1, 1])
        _scatter(rng, page, _make_word(rng, size, float(angle)))


def _document(rng, page: Layout, n: int, sizes: tuple) -> None:
    """Lines of horizontal words on a common baseline, left to right, stepping over words already placed."""
    W, H = page.size
    margin = max(GAP, W // 20)
    body = int(rng.integers(sizes[0], (2 * sizes[0] + sizes[1]) // 3 + 1))  # body text at the small end
    x, y, h = margin, margin, body
    while len(page.words) < n and y + 1.3 * h < H - margin:
        word = _make_word(rng, h, 0.0)
        top = y + word.top - PAD  # the mask's top when the ink sits on this line's baseline
        box = (x, top, x + word.mask.width, top + word.mask.height)
        if box[2] > W - margin or rng.random() < 0.02:  # line full or paragraph end; now and then a heading
            y += int(1.6 * h)
            x, h = margin, min(sizes[1], int(1.8 * body)) if rng.random() < 0.1 else body
        elif len(hits := page.hits(box)):
            x = int(hits[:, 2].max()) + GAP + 1
        else:
            page.place(word, box[:2])
            x = box[2] + max(GAP + 1, int(0.4 * h))


def _assign_roles(rng, words: list[Word], index: int) -> None:
    """~10% illegible, a few tagged (cycling through TAGS across pages), one 5- or 6-point polygon."""
    plain = [w for w in words if not w.kind]
    n_ill, n_tag = max(1, round(0.1 * len(plain))), max(2, round(0.1 * len(plain)))
    roles = ["illegible"] * n_ill + [TAGS[(index * n_tag + j) % len(TAGS)] for j in range(n_tag)]
    roles.append("poly5" if index % 2 == 0 else "poly6")
    for k, role in zip(rng.permutation(len(plain)), roles):
        plain[k].role = role


def _annotation(word: Word) -> dict:
    q = word.quad + word.xy
    if word.role in ("poly5", "poly6"):  # the quad with extra points mid-edge, still clockwise
        top, bottom = (q[0] + q[1]) / 2, (q[2] + q[3]) / 2
        q = np.array([q[0], top, q[1], q[2], bottom, q[3]] if word.role == "poly6" else [q[0], top, q[1], q[2], q[3]])
    illegible = word.role == "illegible"
    return {"points": [[round(float(x), 2), round(float(y), 2)] for x, y in q],
            "transcription": "###" if illegible else word.text, "illegibility": illegible,
            "tags": [word.role] if word.role in TAGS else [], "orientation": "Horizontal", "language": ["en"]}


def _background(rng, size: tuple) -> Image.Image:
    """Light paper: a base grey, a gentle linear gradient, fine noise and a slight colour tint. The noise is
    a tiled 128 px patch: drawing a full page of normals costs more than all the rest of the page."""
    (W, H), (gx, gy) = size, rng.uniform(-15, 15, size=2)
    noise = np.tile(3 * rng.standard_normal((128, 128), np.float32), (H // 128 + 1, W // 128 + 1))[:H, :W]
    grey = (np.linspace(-gx / 2, gx / 2, W, dtype=np.float32)[None, :] + rng.uniform(215, 240)
            + np.linspace(-gy / 2, gy / 2, H, dtype=np.float32)[:, None] + noise)
    tint = np.clip(np.arange(256)[None, :] + rng.uniform(-6, 6, size=(3, 1)), 0, 255).astype(np.uint8)
    return Image.fromarray(np.clip(grey, 0, 255).astype(np.uint8)).convert("RGB").point(tint.ravel().tolist())


def _ink(rng, role: str) -> tuple:
    """Dark, slightly coloured ink; faded print for illegible words, red for stamps."""
    ink = rng.integers(140, 170, size=3) if role == "illegible" else rng.integers(0, 60) + rng.integers(0, 20, size=3)
    return (170, 30, 40) if role == "stamp" else tuple(int(v) for v in ink)


def _layout(rng, index: int, n_images: int, n_words: int, size: tuple) -> list[Word]:
    """Even pages are documents (a tenth of their words scattered afterwards), odd pages scattered words."""
    sizes = (min(TEXT_HEIGHT[0], min(size) // 10), min(TEXT_HEIGHT[1], min(size) // 5))
    page, n_tiny = Layout(size), int(index < 2)
    if index == n_images - 1:  # box starts 2 px left of the image: real sets have coordinates a little outside
        word, word.kind = _make_word(rng, sizes[0], 0.0), "outside"
        page.place(word, (-PAD - 2, rng.integers(0, size[1] - word.mask.height)))
    if index % 2 == 0:
        _document(rng, page, n_words - n_tiny - n_words // 10, sizes)
    _scattered(rng, page, n_words - n_tiny, sizes)
    if n_tiny:  # a 3x2 px dot annotated as a word: area 6 px^2, under any sensible minimum area
        dot = Word(Image.new("L", (3, 2), 255), np.array([[0, 0], [3, 0], [3, 2], [0, 2]], float), ".", kind="tiny")
        _scatter(rng, page, dot, tries=200)
    _assign_roles(rng, page.words, index)
    return page.words


def _make_page(rng, index: int, n_images: int, n_words: int, size: tuple) -> tuple:
    """One page image and its UFO words."""
    words = _layout(rng, index, n_images, n_words, size)
    image = _background(rng, size)
    for word in words:
        image.paste(_ink(rng, word.role), word.xy, word.mask)
    return image, {f"{k + 1:04d}": _annotation(w) for k, w in enumerate(words)}


def _save(image: Image.Image, path: Path, index: int) -> str:
    """Page 0 is the EXIF-rotated JPEG, pages 1, 7, ... PNG, pages 2, 8, ... grayscale, the rest RGB JPEG."""
    png = index % 6 == 1
    with writing(path := path.with_suffix(".png") if png else path, "wb", sync=False) as f:
        if png:  # noisy pages barely compress: the fastest level saves time
            image.save(f, format="PNG", compress_level=1)
        elif index == 0:  # stored pixels are the upright page turned 90 degrees counter-clockwise
            exif = Image.Exif()
            exif[EXIF_ORIENTATION] = 6
            image.transpose(Image.Transpose.ROTATE_90).save(f, format="JPEG", quality=JPEG_QUALITY,
                                                            exif=exif.tobytes())
        else:
            (image.convert("L") if index % 6 == 2 else image).save(f, format="JPEG", quality=JPEG_QUALITY)
    return path.name


def _write_json(path: Path, obj) -> None:
    """Through the door: no reader ever sees half a file."""
    write_atomic(path, json.dumps(obj, indent=1) + "\n")


def write_sample_dataset(root, n_images: int = 12, words_per_page: int = 40, page_size=(1200, 1600),
                         seed: int = 0, split: str = "train") -> Path:
    """Write root/ufo/{split}.json and its pages into root/images/ (page_size = (width, height) px).
    Does nothing when root/.sample-ok records these arguments for this split."""
    if min(page_size) < 80 or n_images < 1 or words_per_page < 1:
        raise ValueError(f"sample pages need sides >= 80 px, n_images >= 1 and words_per_page >= 1; "
                         f"got page_size={page_size}, n_images={n_images}, words_per_page={words_per_page}")
    root = Path(root)
    args = dict(version=VERSION, n_images=n_images, words_per_page=words_per_page,
                page_size=list(page_size), seed=seed, split=split)
    marker = root / MARKER
    done = json.loads(marker.read_text()) if marker.exists() else {}
    if done.get(split) == args:
        return root
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "ufo").mkdir(exist_ok=True)
    done.pop(split, None)  # a crash while rewriting must not leave this split marked complete
    _write_json(marker, done)
    images = {}
    for i in range(n_images):
        rng = np.random.default_rng([seed, zlib.crc32(split.encode()), i])
        image, words = _make_page(rng, i, n_images, words_per_page, tuple(page_size))
        name = _save(image, root / "images" / f"{split}_{i:03d}.jpg", i)
        images[name] = {"img_w": page_size[0], "img_h": page_size[1], "words": words,
                        "paragraphs": {}, "tags": [], "relations": {}}
    _write_json(root / "ufo" / f"{split}.json", {"images": images})
    _write_json(marker, {**done, split: args})  # last: the split is complete
    return root


def ensure_default_sample(root=DEFAULT_SAMPLE_DIR) -> Path:
    """The default set (train: 12 pages, val: 4 pages, one images/ folder, DEFAULT_PAGE_SIZE), written if not
    present."""
    for split, n in DEFAULT_SPLITS:
        write_sample_dataset(root, n_images=n, split=split, page_size=DEFAULT_PAGE_SIZE)
    return Path(root)


def sample_for_build(say) -> Path:
    """The default set for a build without --data, written into ./sample_data if not there yet; `say` tells which
    (it ships with no release: a build generates it; the project's .gitignore leaves it out)."""
    made = not DEFAULT_SAMPLE_DIR.exists()
    root = ensure_default_sample()
    say(f"no --data given: the synthetic sample set in {root}/, "
        + ("generated now (the next build without --data uses it)" if made
           else "generated by an earlier build without --data"))
    return root
