"""Image codec "jpeg": a page's image as JPEG tiles (store/jpeg_tiles.py), a crop decoding only the tiles it covers.

A jpeg page record (store/format.py JPEG_PAGE) holds the packed tiles (jpeg_tiles.pack: a shared header, a CRC32
per tile) and the page's size, and no maps: a reader draws a crop's maps from the page's words
(east_cache/reader/raster.py), bit for bit what a raw page's stored maps give. The codec answers what Page asks of
one (values, encode, write, view, stores_maps); its page image (JpegImage) what a reader asks of a page image
(width, height, block, rect, array), as page_record.Tiled does for raw tiles. A crop's block of tiles is handed
out undecoded (JpegBlock): whoever holds the buffer it goes to decodes it there (a loader worker, into its batch
slot), or sends its streams to the device (east_cache/reader/jpeg_device.py).

codec_of picks a config's codec; page_estimate says how many bytes a page takes under it (the plan, the
disk-space check and --strategy auto use it before any page is made).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import CacheError, DataError
from east_cache.store.jpeg_tiles import (
    PACK_HEAD,
    REPAIR,
    JpegSettings,
    JpegTiles,
    block_streams,
    check_tiles,
    decode_block,
    decode_window,
    encode_tiles,
    pack,
    unpack,
)
from east_cache.store.page_record import RAW_TILES, RawTiles, block_tiles, page_bytes, tile_grid
from east_cache.store.page_rows import RAW_LEVELS_ROWS, RAW_ROWS, RawRows, half_level, half_size

JPEG_TILE_PX = 128        # side of a page's JPEG tiles, page px: a multiple of the JPEG MCU and of page_record.TILE_PX
# A page's packed tiles may take at most this many times its raw tiles' bytes (plus the pack's index): the size of
# its slot while the build writes it. JPEG exceeds raw pixels only for noise at the highest qualities; an encoding
# past the bound is refused, naming the image.
JPEG_BOUND = 2
MAX_HEADER_BYTES = 1024   # the shared JPEG header (quantisation and standard Huffman tables)
# Bytes per page px of packed JPEG tiles at a quality (anchors, linear between), set above what photos and dense
# text pages take (benchmarks/bench_codec.py measures them), so that plans and disk checks estimate high.
JPEG_BYTES_PER_PX = ((1, 0.05), (50, 0.10), (75, 0.15), (90, 0.25), (95, 0.35), (100, 0.80))


def jpeg_values(size: tuple[int, int]) -> int:
    """uint8 values the packed JPEG tiles of a page of size (W, H) may take at most (JPEG_BOUND)."""
    cols, rows = tile_grid(size, JPEG_TILE_PX)
    tiles = cols * rows
    return JPEG_BOUND * 3 * JPEG_TILE_PX ** 2 * tiles + PACK_HEAD.itemsize + 4 * (2 * tiles + 1) + MAX_HEADER_BYTES


def jpeg_estimate(size: tuple[int, int], quality: int) -> int:
    """Bytes the packed JPEG tiles of a page of size (W, H) take, estimated high (JPEG_BYTES_PER_PX)."""
    q, bpp = zip(*JPEG_BYTES_PER_PX)
    return min(jpeg_values(size), int(np.interp(quality, q, bpp) * size[0] * size[1]) + MAX_HEADER_BYTES)


def page_estimate(size: tuple[int, int], cfg: BuildConfig, codec: str | None = None) -> int:
    """Bytes a page of size (W, H) takes in a record under codec (default: the config's, resolved); a page warped
    at read time built with --levels with its half level's (JpegCodec, RawRows)."""
    codec = codec or cfg.image_codec
    levels = cfg.warps_at_read and cfg.levels
    if codec == "jpeg":
        half = jpeg_estimate(half_size(size), cfg.image_quality) if levels else 0
        return jpeg_estimate(size, cfg.image_quality) + half
    if not cfg.warps_at_read:
        return page_bytes(size, cfg.map_scale)
    return (RAW_LEVELS_ROWS if levels else RAW_ROWS).values(size)


class JpegBlock(NamedTuple):
    """The n x n JPEG tiles of a page from tile (tx, ty) on (tiles off the page read 0): a crop's block, not decoded
    yet. `into` decodes it into a buffer (n, n, T, T, 3) uint8 RGB, each tile C-contiguous; np.asarray decodes it
    into a new one."""
    tiles: JpegTiles
    tx: int
    ty: int
    n: int
    where: str    # the file and page it was read from, for errors

    @property
    def shape(self) -> tuple[int, ...]:
        return self.n, self.n, self.tiles.tile, self.tiles.tile, 3

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    def into(self, out: np.ndarray) -> None:
        decode_block(self.tiles, self.tx, self.ty, self.n, self.n, out, self.where)

    def streams(self) -> list[bytes | None]:
        """Each tile's whole JPEG stream, CRC-checked, row-major; None off the page's grid."""
        return block_streams(self.tiles, self.tx, self.ty, self.n, self.n, self.where)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.empty(self.shape, np.uint8)
        self.into(out)
        return out if dtype is None else out.astype(dtype)


class JpegImage(NamedTuple):
    """A page image over its packed JPEG tiles (views of the record): what a reader asks of a page image. A page
    warped at read time built with --levels keeps the tiles of its half level beside them (page_rows.half_level, encoded as the page),
    which a crop that shrinks the page by about 2 or more decodes instead: a quarter of the tiles (libjpeg's
    1/2-scaled decode of the page's own tiles saves only its inverse DCT: each tile's entropy decoding, most of the
    cost, stays)."""
    tiles: JpegTiles
    where: str
    half: JpegTiles | None = None   # the half level's tiles, where stored

    def half_image(self) -> "JpegImage | None":
        """The half level as a page image of its own (its px 2 x 2 page px), None where none is stored."""
        return None if self.half is None else JpegImage(self.half, f"{self.where} (half level)")

    @property
    def width(self) -> int:
        return self.tiles.width

    @property
    def height(self) -> int:
        return self.tiles.height

    @property
    def tile(self) -> int:
        return self.tiles.tile

    def block(self, x: int, y: int, side: int) -> tuple[JpegBlock, tuple[int, int]]:
        """(block, (dx, dy)): the block of block_tiles(side, T) tiles per side whose px (dx, dy) is page px (x, y),
        so that it holds the square [x, x + side) x [y, y + side)."""
        t = self.tile
        tx, ty = x // t, y // t   # floor: a square may begin left of or above the page
        return JpegBlock(self.tiles, tx, ty, block_tiles(side, t), self.where), (x - tx * t, y - ty * t)

    def rect(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """uint8 (3, h, w): the page's px [x, x + w) x [y, y + h), 0 off the page; only the tiles it covers are
        decoded."""
        return np.ascontiguousarray(decode_window(self.tiles, x, y, w, h, self.where).transpose(2, 0, 1))

    def array(self) -> np.ndarray:
        return self.rect(0, 0, self.width, self.height)

    def hwc(self, x: int, y: int, w: int, h: int) -> tuple[np.ndarray, int, int]:
        """(uint8 (h, w, 3), x, y): the page's px [x, x + w) x [y, y + h) channels last, as the tiles decode (0 off
        the page), and where they begin (as page_rows.PageRows.hwc answers)."""
        return decode_window(self.tiles, x, y, w, h, self.where), x, y


def empty_tiles(tile: int) -> JpegTiles:
    """The tiles of an empty page (an image --skip-bad could not decode): none."""
    none = np.zeros(0, np.uint8)
    return JpegTiles(none, none, np.zeros(1, np.uint32), np.zeros(0, np.uint32), 0, 0, tile)


class JpegCodec:
    """Image codec "jpeg" (see RawTiles for what a codec answers): tiles of JPEG_TILE_PX at a quality and chroma
    subsampling (config.IMAGE_CHROMAS). levels (pages warped at read time, built with --levels): the packed tiles of the page's half
    level follow the page's, encoded the same way."""
    name = "jpeg"
    stores_maps = False

    def __init__(self, quality: int, chroma: str, levels: bool = False):
        self.settings = JpegSettings(JPEG_TILE_PX, quality, chroma)
        self.levels = levels

    def values(self, size: tuple[int, int]) -> int:
        return jpeg_values(size) + (jpeg_values(half_size(size)) if self.levels else 0)

    def encode(self, image: np.ndarray, where: str) -> JpegImage:
        """The page image of uint8 RGB (3, H, W); an encoding past its record's bound is a DataError naming it."""
        pixels = image.transpose(1, 2, 0)
        levels = [pixels, half_level(np.ascontiguousarray(pixels))] if self.levels else [pixels]
        tiles = [encode_tiles(p, self.settings) if p.size else empty_tiles(JPEG_TILE_PX) for p in levels]
        for t in tiles:
            cap = jpeg_values((t.width, t.height))
            if t.nbytes > cap:
                raise DataError(f"{where}: its page's JPEG tiles at quality {self.settings.quality} take {t.nbytes} "
                                f"bytes, more than the {cap} a page record holds (noise-like pixels): build with a "
                                f"lower --image-quality, or --image-codec raw")
        return JpegImage(tiles[0], where, tiles[1] if self.levels else None)

    def write(self, image: JpegImage, field: np.ndarray) -> int:
        """Values written at the field's start: the packed tiles, then the half level's where stored."""
        n = 0
        for tiles in (image.tiles, image.half):
            if tiles is not None and tiles.width * tiles.height:   # a level of no px (a page 1 px wide) holds none
                packed = pack(tiles)
                field[n:n + packed.size] = packed
                n += packed.size
        return n

    def view(self, field: np.ndarray, size: tuple[int, int], where: str) -> JpegImage:
        """The page image over a record's field (packed tiles at its start, the half level's after them where
        stored); their index checked (jpeg_tiles.unpack)."""
        return JpegImage(*page_levels(field, size, where, self.levels))


def page_tiles(field: np.ndarray, size: tuple[int, int], where: str) -> JpegTiles:
    """The JPEG tiles of a page of size (W, H) in a record's field (packed at its start), its index checked
    (jpeg_tiles.unpack); none for an empty page."""
    if size[0] * size[1] == 0:
        return empty_tiles(JPEG_TILE_PX)
    tiles = unpack(field, where)
    if (tiles.width, tiles.height) != tuple(size):
        raise CacheError(f"{where}: its compressed page is {tiles.width} x {tiles.height} px, its record says "
                         f"{size[0]} x {size[1]}: {REPAIR}")
    return tiles


def page_levels(field: np.ndarray, size: tuple[int, int], where: str,
                levels: bool) -> tuple[JpegTiles, str, JpegTiles | None]:
    """(tiles, where, half level's tiles or None): a page's JPEG tiles in a record's field, and with levels those of
    its half level packed after them (half_size), each index checked."""
    tiles = page_tiles(field, size, where)
    if not levels:
        return tiles, where, None
    if size[0] * size[1] == 0:
        return tiles, where, empty_tiles(JPEG_TILE_PX)
    return tiles, where, page_tiles(field[tiles.nbytes:], half_size(size), f"{where} (half level)")


def tiles_problem(field: np.ndarray, size, where: str, levels: bool = False) -> str | None:
    """What is wrong with a jpeg page record's tiles (its index, any tile's CRC32, its half level's with levels),
    in words naming `where` and the tile; None when nothing is: what `verify` asks of every page."""
    try:
        tiles, _, half = page_levels(field, tuple(int(v) for v in size), where, levels)
        why = check_tiles(tiles, where) or (half is not None and check_tiles(half, f"{where} (half level)")) or None
    except CacheError as e:
        why = str(e)
    return None if why is None else why.removesuffix(f": {REPAIR}")


def codec_of(cfg: BuildConfig) -> RawTiles | RawRows | JpegCodec:
    """The image codec of a page cache built with cfg (its image_codec resolved): raw pages stored warped (--geometry
    build) as tiles with their maps, raw pages warped at read time as rows without; pages warped at read time with
    their half level where built with --levels."""
    levels = cfg.warps_at_read and cfg.levels
    if cfg.image_codec == "jpeg":
        return JpegCodec(cfg.image_quality, cfg.image_chroma, levels=levels)
    if not cfg.warps_at_read:
        return RAW_TILES
    return RAW_LEVELS_ROWS if levels else RAW_ROWS


def jpeg_settings_words(cfg: BuildConfig) -> str:
    """How a config's jpeg pages are encoded, in words: "quality 90, chroma 4:2:0"."""
    return f"quality {cfg.image_quality}, chroma {':'.join(cfg.image_chroma)}"
