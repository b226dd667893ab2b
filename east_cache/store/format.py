"""The on-disk format, declared once: the fields of a record, and the names of a cache's files.

A sample is a fixed-size record of the fields of its record kind. A data file holds RECORDS of one
structured dtype (record_dtype), written and read by a file format (formats/: npy, one memory-mappable
array; zarr, one array per field). A strategy only decides how many records a file holds and in what
order (layout.py). Each data file has a sidecar `.quads.npz` with its samples' words (sidecar.py).

A field's shape is a function of the build config, so a new record kind (a warped page whose size
depends on the config, a per-pixel word index instead of float16 geometry) is one more RecordKind
here, picked in record_spec: formats, checksums and the Dataset iterate the fields of whatever kind
they are given, and a worker stores attribute `name` of the sample it made into each field.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from east_cache.config import BuildConfig
from east_cache.inputs import Input

# Bump when the record layout, the file naming or the manifest schema changes.
FORMAT_VERSION = 7   # 7: a page warped at read time stores its half level only when built with --levels (kinds
#                      raw-levels-page, jpeg-levels-page); 6: a page warped at read time stores its half level after
#                      it; 5: a packed file's head names its record kind, a sidecar its data file's checksum; 4: pages
#                      stored resized only, warped at read time (--geometry read); 3: packed page files
MANIFEST = "manifest.json"
DATA_DIR = "data"            # data files live in CACHE/data/, the manifest in CACHE/
QUADS_SUFFIX = ".quads.npz"  # sidecar of a data file (sidecar.py)
MAP_CODEC = "zstd:1"         # codec of the target maps, where a format compresses (formats/zarr.py)
IMAGE_HASHES = "image_hashes.json"   # in CACHE/: the train/val check's image hashes (tools/phash.py)


@dataclass(frozen=True)
class Field:
    name: str
    dtype: np.dtype                                       # stored dtype; a sample's value is cast to it on write
    shape: Callable[[BuildConfig], tuple[int, ...]]       # per-record shape, from the build config
    codec: str | None = None                              # "zstd:LEVEL" where a format may compress; None: raw
    doc: str = ""                                         # units and meaning

    def stored(self, value: np.ndarray) -> np.ndarray:
        """value as it is stored: the sample's array cast to the field's dtype (float32 geometry -> float16)."""
        return np.asarray(value).astype(self.dtype, copy=False)


# Shapes as functions of the config; classes, not lambdas, so that a Dataset holding them pickles.
@dataclass(frozen=True)
class InputShape:
    channels: int

    def __call__(self, c: BuildConfig) -> tuple[int, ...]:
        return (self.channels, c.input_size, c.input_size)


@dataclass(frozen=True)
class MapShape:
    channels: int

    def __call__(self, c: BuildConfig) -> tuple[int, ...]:
        return (self.channels, c.map_size, c.map_size)


@dataclass(frozen=True)
class RecordKind:
    name: str
    fields: tuple[Field, ...]
    page_codec: str | None = None   # a page kind's image codec (store/page_record.py, page_jpeg.py); None: crops

    @property
    def packed(self) -> bool:
        """Records that use a prefix of each field (pages): a file holds only those (formats/packed.py)."""
        return self.page_codec is not None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def code(self) -> int:
        """The kind as a number a data file's own head carries (formats/packed.py): CRC32 of its name, image codec
        and fields' names and dtypes, so that a manifest edited to another kind or codec is caught by the file."""
        text = ";".join([self.name, str(self.page_codec), *(f"{f.name}:{f.dtype.str}" for f in self.fields)])
        return zlib.crc32(text.encode())

    @property
    def half_level(self) -> bool:
        """A page kind whose image field holds the page's half level after the page (pages warped at read time, built
        with --levels: raw rows, or JPEG tiles)."""
        return self.packed and self.field("image").shape.what in ("rows-levels", "jpeg-levels")

    def dtype(self, cfg: BuildConfig) -> np.dtype:
        return np.dtype([(f.name, f.dtype, f.shape(cfg)) for f in self.fields])

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def spec(self, cfg: BuildConfig) -> "RecordSpec":
        return RecordSpec(self, self.dtype(cfg))


@dataclass(frozen=True)
class RecordSpec:
    """What every data file of one cache holds: a record kind at one config. Formats write and read these."""
    kind: RecordKind
    dtype: np.dtype      # the structured record dtype, one entry per field

    def codec(self, name: str) -> str | None:
        return self.kind.field(name).codec

    def raw_bytes(self) -> int:
        """Bytes of a record's uncompressed fields (codec None): the least a record takes in any format."""
        return sum(self.dtype[f.name].itemsize for f in self.kind.fields if f.codec is None)


# A training crop and its EAST targets at map scale (see east_cache/sample/targets.py for the maths).
CROP = RecordKind("crop", (
    Field("image", np.dtype(np.uint8), InputShape(3), doc="RGB crop, CHW, 0..255"),
    Field("score", np.dtype(np.uint8), MapShape(1), MAP_CODEC, doc="1 inside a legible word's shrunk quad"),
    Field("geo", np.dtype(np.float16), MapShape(5), MAP_CODEC,
          doc="distances to the word box's top, bottom, left, right edges in input px, then its angle in rad"),
    Field("roi", np.dtype(np.uint8), MapShape(1), MAP_CODEC, doc="0 inside don't-care words, else 1 (past the image too)"),
))


@dataclass(frozen=True)
class PageShape:
    """A flat field as long as the largest page under the config (sample.page.max_page_size) needs: a page is
    written at the start of it (the rest of a build's fixed slot stays a hole of its sparse staging file, and a
    packed file holds the prefix alone). What: "image", the page's raw image tiles (page_record.image_values); "rows",
    its raw pixels row after row (page_rows.RawRows); "rows-levels", those and its half level's after them; "maps",
    its maps' tiles (page_record.map_values); "jpeg", its JPEG tiles packed (page_jpeg.jpeg_values); "jpeg-levels",
    those and its half level's packed after them (page_jpeg.JpegCodec with levels)."""
    what: str = "image"

    def __call__(self, c: BuildConfig) -> tuple[int, ...]:
        # sample code (cv2) loads where pages are made or read
        from east_cache.sample.page import max_page_size
        from east_cache.store.page_jpeg import jpeg_values
        from east_cache.store.page_record import image_values, map_values
        from east_cache.store.page_rows import RAW_LEVELS_ROWS, RAW_ROWS, half_size
        size = max_page_size(c)
        return ({"image": image_values(size), "maps": map_values(size, c.map_scale), "rows": RAW_ROWS.values(size),
                 "rows-levels": RAW_LEVELS_ROWS.values(size), "jpeg": jpeg_values(size),
                 "jpeg-levels": jpeg_values(size) + jpeg_values(half_size(size))}[self.what],)


@dataclass(frozen=True)
class Fixed:
    shape: tuple[int, ...]

    def __call__(self, c: BuildConfig) -> tuple[int, ...]:
        return self.shape


# A warped page that crops are cut from at read time: its layout is store/page_record.py's.
PAGE = RecordKind("page", (
    Field("image", np.dtype(np.uint8), PageShape("image"),
          doc="RGB page, 0..255, in square tiles of page_record.TILE_PX, each CHW, row after row of tiles, zero "
              "past (W, H): the first page_record.image_values(W, H) values"),
    Field("maps", np.dtype(np.uint16), PageShape("maps"),
          doc="per map pixel: 1 + the legible word whose shrunk quad covers it (low 15 bits), 1 on don't-care "
              "words (top bit); in square tiles of page_record.map_tile(s) map px, the same page px as the "
              "image's, row after row of tiles: the first page_record.map_values((W, H), s) values"),
    Field("size", np.dtype(np.int32), Fixed((2,)), doc="the page's width and height W, H in page px"),
), page_codec="raw")
# The same page with its image as JPEG tiles and no maps: a reader draws a crop's maps from the page's words.
JPEG_PAGE = RecordKind("jpeg-page", (
    Field("image", np.dtype(np.uint8), PageShape("jpeg"),
          doc="RGB page as JPEG tiles of page_jpeg.JPEG_TILE_PX at the config's image_quality and image_chroma, "
              "packed by jpeg_tiles.pack (shared header, CRC32 per tile)"),
    Field("size", np.dtype(np.int32), Fixed((2,)), doc="the page's width and height W, H in page px"),
), page_codec="jpeg")
# A page stored resized only (--geometry read): its raw pixels row after row, and no maps, as a jpeg page has none: a
# reader draws each crop's maps from the page's words under that epoch's warp. A jpeg one is a JPEG_PAGE.
RAW_PAGE = RecordKind("raw-page", (
    Field("image", np.dtype(np.uint8), PageShape("rows"),
          doc="RGB page, 0..255, row after row, (H, W, 3) channels last: the first 3 W H values"),
    PAGE.field("size"),
), page_codec="raw")
# The same built with --levels: its half level's px after the page's.
RAW_LEVELS_PAGE = RecordKind("raw-levels-page", (
    Field("image", np.dtype(np.uint8), PageShape("rows-levels"),
          doc="RGB page as RAW_PAGE's image, then its half level (page_rows.half_level), (H // 2, W // 2, 3) the "
              "same way"),
    PAGE.field("size"),
), page_codec="raw")
# A jpeg page stored resized only (--geometry read) built with --levels: its JPEG tiles and its half level's, packed
# one after the other.
JPEG_LEVELS_PAGE = RecordKind("jpeg-levels-page", (
    Field("image", np.dtype(np.uint8), PageShape("jpeg-levels"),
          doc="RGB page as JPEG_PAGE's image, then its half level (page_rows.half_level) the same way, packed "
              "after it"),
    PAGE.field("size"),
), page_codec="jpeg")
RECORD_KINDS = {k.name: k for k in (CROP, PAGE, JPEG_PAGE, RAW_PAGE, RAW_LEVELS_PAGE, JPEG_LEVELS_PAGE)}
FIELDS = CROP.names   # the fields a crop record and a Dataset item hold


def record_kind(cfg: BuildConfig) -> RecordKind:
    """The one place that picks the record kind: --crop read caches pages (raw or JPEG images, by the resolved
    image_codec; raw ones with their maps only when stored warped, --geometry build; those warped at read time with
    their half level where built with --levels), --crop build crops."""
    if cfg.crop == "build":
        return CROP
    levels = cfg.warps_at_read and cfg.levels
    if cfg.image_codec == "jpeg":
        return JPEG_LEVELS_PAGE if levels else JPEG_PAGE
    if not cfg.warps_at_read:
        return PAGE
    return RAW_LEVELS_PAGE if levels else RAW_PAGE


def record_spec(cfg: BuildConfig, kind: RecordKind | None = None) -> RecordSpec:
    """What the data files of a cache built with cfg hold; the build and the Dataset follow the kind."""
    return (kind or record_kind(cfg)).spec(cfg)


def record_dtype(cfg: BuildConfig, kind: RecordKind | None = None) -> np.dtype:
    return record_spec(cfg, kind).dtype


PACKED_OVERHEAD_BYTES = 256   # a packed page's index entries and its fields' alignment (formats/packed.py)
STAGING_OVERHEAD_BYTES = 3 * 4096   # a staging slot's partly used blocks at the ends of its field prefixes


def sample_bytes(cfg: BuildConfig, records, members, staging: bool = False) -> int:
    """Bytes the samples (image index into records, variant) take on disk: a record each, or for pages (packed
    records) the pages' own bytes, from each image's frame size and augmentation draw (expected_page_size) under
    the config's image codec (page_jpeg.page_estimate: an estimate above what JPEG tiles of photos take). staging:
    in a build's staging file of fixed slots instead."""
    spec = record_spec(cfg)
    if not spec.kind.packed:
        return len(members) * spec.dtype.itemsize
    from east_cache.sample.page import expected_page_size   # sample code loads only for pages
    from east_cache.store.page_jpeg import page_estimate
    extra = STAGING_OVERHEAD_BYTES if staging else PACKED_OVERHEAD_BYTES
    return sum(page_estimate(expected_page_size(records[i].width, records[i].height, cfg, records[i].name, v), cfg)
               + extra for i, v in members)


def cache_inputs(cache, flag: str) -> list[Input]:
    """What a command reading the cache at `flag` must never write over (inputs.refuse_overwrite): the folder, its
    manifest and every file of its data/. Nothing for a URL."""
    if cache is None or "://" in str(cache):
        return []
    return [Input(f"the cache {flag}", cache), Input(f"the manifest of the cache {flag}", Path(cache) / MANIFEST),
            Input(f"the data of the cache {flag}", Path(cache) / DATA_DIR, tree=True)]
