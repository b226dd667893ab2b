"""The page record, declared once: how a page (east_cache/sample/page.py makes its content) is laid out in a
record of the page kind (store/format.py PAGE), and what a compact crop item cut from it holds.

A page record has three fields, each written from its start (a packed file holds only that prefix:
store/formats/packed.py):
- image: uint8 RGB in square tiles of TILE_PX page px (Tiled), each (3, T, T), row after row of tiles,
  zero past (W, H), through an image codec (RawTiles: the tiles as they are; store/page_jpeg.py JpegCodec:
  JPEG tiles, whose record has no maps field);
- maps: MAPS_DTYPE per map pixel, the owner (1 + the legible word whose shrunk quad covers it) in the low
  DONT_CARE_BIT bits and the don't-care bit on top (pack_maps), in square tiles of map_tile(s) map px that
  cover the same page px as the image's tiles;
- size: (W, H) in page px.
Tiles, because a crop's pixels are then a block of whole tiles whose rows of tiles lie contiguous in memory,
copied at memcpy speed, where the crop's rows of a plain (3, H, W) page are 3 x S short runs, each at another
place, which a core copies at a lower rate. A block holds a few more pixels than the crop (its side is whole
tiles): the device cuts the crop out of it (east_cache/reader/expand.py), the CPU paths through Tiled.rect.

A compact crop item (CacheDataset(compact=True)) is such a block of image tiles and of maps tiles, where the
crop begins in it, the maps patch of the words it cuts and a word table whose columns TABLE_COLUMNS names; of a
jpeg page, the block of its JPEG tiles (decoded where the batch is written, or on the device) and the crop's maps
drawn from its words. Its keys are declared here for the reader that makes it, collate and the device expansion
that read it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.ufo import CARE, ImageRecord
from east_cache.sample.geometry import gather_quads, min_rect_angles
from east_cache.sample.page import PageContent, make_page
from east_cache.sample.targets import TABLE_COLUMNS

TILE_PX = 32                 # side of the square tiles a page image is stored in, page px
MAPS_DTYPE = np.uint16       # a page's map pixel: owner in the low bits, don't-care in the top bit
DONT_CARE_BIT = 15
OWNER_MASK = (1 << DONT_CARE_BIT) - 1
MAX_LEGIBLE = OWNER_MASK     # legible words a page can hold

# A compact crop item's keys: reader/crop.py crop_page_compact makes it, reader/collate.py batches it,
# reader/expand.py turns a batch of them into image, score, geo and roi where the batch is.
IMAGE_BLOCK = "tiles"   # uint8 (n, n, 3, T, T): the block of the page's image tiles that holds the crop (Tiled.block)
CROP_IN_BLOCK = "at"    # int32 (3,): (dx, dy) page px where the crop begins in its block, and the crop's side S
MAPS_BLOCK = "maps"     # MAPS_DTYPE (n, n, t, t): the same block of the page's maps tiles, packed as stored
MAPS_PATCH = "patch"    # None or (x0, y0, values (h, w)): what the cut words change in MAPS_BLOCK (put_rect)
WORD_TABLE = "table"    # float32 (L, len(TABLE_COLUMNS)): row k describes the word of owner value k + 1
JPEG_BLOCK = "jpeg_tiles"      # jpeg pages: uint8 (n, n, J, J, 3): the block of the page's JPEG tiles, decoded, RGB
JPEG_STREAMS = "jpeg_streams"  # jpeg pages decoded on the device: uint8 (capacity,): that block's JPEG streams
CROP_MAPS = "crop_maps"        # jpeg pages: MAPS_DTYPE (m, m): the crop's maps, drawn from its words
WARPED_IMAGE = "image_hwc"     # pages warped at read time: uint8 (S, S, 3) RGB, channels last, warped where written


def table_columns(*names: str) -> np.ndarray:
    """Indices of the word table's columns (targets.word_table) by name."""
    return np.array([TABLE_COLUMNS.index(n) for n in names])


# the columns that move with a shift of the quads: the first vertex and the box, rotated about that vertex
MOVES_WITH_X, MOVES_WITH_Y = table_columns("ax", "x0", "x1"), table_columns("ay", "y0", "y1")


def tile_grid(size: tuple[int, int], tile: int = TILE_PX) -> tuple[int, int]:
    """(columns, rows) of tiles of side `tile` that cover an array of size (W, H)."""
    return -(-size[0] // tile), -(-size[1] // tile)


def map_tile(map_scale: float) -> int:
    """Side of a page's maps tiles in map px: TILE_PX page px at map scale s (16 at 0.5, 8 at 0.25), so that the
    maps' tiles cover the same page px as the image's and a crop's block of either is the same tiles."""
    return round(TILE_PX * map_scale)


def image_values(size: tuple[int, int]) -> int:
    """uint8 values a page image of size (W, H) takes as tiles (3 per pixel of the tiles that cover it)."""
    tx, ty = tile_grid(size)
    return 3 * TILE_PX * TILE_PX * tx * ty


def map_values(size: tuple[int, int], map_scale: float) -> int:
    """MAPS_DTYPE values the maps of a page of size (W, H) page px take as tiles (one per map pixel of the tiles
    that cover the page: the same tiles as its image's)."""
    tx, ty = tile_grid(size)
    return map_tile(map_scale) ** 2 * tx * ty


def page_bytes(size: tuple[int, int], map_scale: float) -> int:
    """Bytes a page of size (W, H) page px holds: 3 per pixel of its image's tiles and 2 per map pixel of them."""
    return image_values(size) + MAPS_DTYPE().itemsize * map_values(size, map_scale)


def block_tiles(side: int, tile: int = TILE_PX) -> int:
    """Tiles per side of the block that holds any square of `side` px, wherever in a tile the square begins."""
    return (side + tile - 1) // tile + 1


def block_bytes(cfg: BuildConfig) -> int:
    """Bytes of a crop's blocks of image and maps tiles (what a reader copies per compact crop)."""
    n = block_tiles(cfg.input_size)
    return n * n * (3 * TILE_PX ** 2 + MAPS_DTYPE().itemsize * map_tile(cfg.map_scale) ** 2)


def pack_maps(owner: np.ndarray, roi: np.ndarray) -> np.ndarray:
    """MAPS_DTYPE maps of an owner map (values <= MAX_LEGIBLE) and an ROI map (0 / 1)."""
    return owner.astype(MAPS_DTYPE) | ((1 - roi.astype(MAPS_DTYPE)) << DONT_CARE_BIT)


def unpack_maps(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner uint16, roi uint8) of packed maps."""
    return maps & OWNER_MASK, (1 - (maps >> DONT_CARE_BIT)).astype(np.uint8)


def padded_rect(arr: np.ndarray, x: int, y: int, w: int, h: int, fill=0, axis: int = -2) -> np.ndarray:
    """arr's [y, y + h) x [x, x + w) along the axes (axis, axis + 1) (default: the last two), filled with `fill`
    where that lies off arr: a view when it lies on it."""
    ax = axis % arr.ndim
    keep = (slice(None),) * ax
    H, W = arr.shape[ax:ax + 2]
    if x >= 0 and y >= 0 and x + w <= W and y + h <= H:
        return arr[keep + (slice(y, y + h), slice(x, x + w))]
    out = np.full(arr.shape[:ax] + (h, w) + arr.shape[ax + 2:], fill, arr.dtype)
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if x1 > x0 and y1 > y0:
        out[keep + (slice(y0 - y, y1 - y), slice(x0 - x, x1 - x))] = arr[keep + (slice(y0, y1), slice(x0, x1))]
    return out


class Tiled(NamedTuple):
    """A 2-D array (with leading channels, or none) of width x height px, stored as square tiles:
    tiles[ty, tx] is the (*channels, T, T) square whose top left is px (tx, ty) x T; values past (width, height)
    are 0. A page's image is one (channels (3,), T = TILE_PX), its maps another (no channels, T = map_tile)."""
    tiles: np.ndarray   # (rows, columns, *channels, T, T)
    width: int
    height: int

    @property
    def tile(self) -> int:
        return self.tiles.shape[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        """(*channels, H, W): the array it holds."""
        return (*self.tiles.shape[2:-2], self.height, self.width)

    @property
    def size(self) -> int:
        return self.width * self.height

    @classmethod
    def from_array(cls, arr: np.ndarray, tile: int) -> "Tiled":
        """The tiles of an array (*channels, H, W)."""
        *c, h, w = arr.shape
        tx, ty = tile_grid((w, h), tile)
        padded = np.zeros((*c, ty * tile, tx * tile), arr.dtype)
        padded[..., :h, :w] = arr
        nc = len(c)
        tiles = padded.reshape(*c, ty, tile, tx, tile).transpose(nc, nc + 2, *range(nc), nc + 1, nc + 3)
        return cls(np.ascontiguousarray(tiles), w, h)

    def block(self, x: int, y: int, side: int) -> tuple[np.ndarray, tuple[int, int]]:
        """(tiles (n, n, *channels, T, T), (dx, dy)): the block of n = block_tiles(side, T) tiles per side whose
        px (dx, dy) is px (x, y), so that it holds the square [x, x + side) x [y, y + side); a view of the tiles
        where the block lies on them, zero tiles beyond."""
        t = self.tile
        n = block_tiles(side, t)
        tx, ty = x // t, y // t   # floor: a square may begin left of or above the array
        return padded_rect(self.tiles, tx, ty, n, n, 0, axis=0), (x - tx * t, y - ty * t)

    def rect(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """(*channels, h, w): the values [x, x + w) x [y, y + h), 0 off the array (a copy)."""
        t = self.tile
        tx0, ty0 = x // t, y // t
        nx, ny = (x + w - 1) // t - tx0 + 1, (y + h - 1) // t - ty0 + 1
        block = padded_rect(self.tiles, tx0, ty0, nx, ny, 0, axis=0)
        nc = block.ndim - 4
        values = block.transpose(*range(2, 2 + nc), 0, nc + 2, 1, nc + 3).reshape(*block.shape[2:2 + nc],
                                                                                    ny * t, nx * t)
        dx, dy = x - tx0 * t, y - ty0 * t
        return np.ascontiguousarray(values[..., dy:dy + h, dx:dx + w])

    def array(self) -> np.ndarray:
        """(*channels, H, W): all of it (a copy)."""
        return self.rect(0, 0, self.width, self.height)


def _runs(a: int, b: int, t: int) -> list[tuple[int, int, int, int, int]]:
    """[a, b) cut where tiles of side t begin: (first tile, end tile, first px in a tile, end px in a tile,
    offset in [a, b)) per run of whole tiles or part of one tile."""
    if a // t == (b - 1) // t:
        return [(a // t, a // t + 1, a % t, (b - 1) % t + 1, 0)]
    head, tail = -(-a // t), b // t
    runs = [(a // t, head, a % t, t, 0)] if a % t else []
    if tail > head:
        runs.append((head, tail, 0, t, head * t - a))
    if b % t:
        runs.append((tail, tail + 1, 0, b % t, tail * t - a))
    return runs


def put_rect(tiles: np.ndarray, x: int, y: int, values: np.ndarray) -> None:
    """Write values (h, w) at px (x, y) of tiles (rows, columns, T, T) (a Tiled's tiles, or a block of them): at
    most 9 slice assignments, whatever the rectangle's size."""
    t, (h, w) = tiles.shape[-1], values.shape
    by_rows = tiles.transpose(0, 2, 1, 3)   # (rows, T, columns, T): a view
    for ty0, ty1, r0, r1, sy in _runs(y, y + h, t):
        rows = values[sy:sy + (ty1 - ty0) * (r1 - r0)]
        for tx0, tx1, c0, c1, sx in _runs(x, x + w, t):
            part = rows[:, sx:sx + (tx1 - tx0) * (c1 - c0)]
            by_rows[ty0:ty1, r0:r1, tx0:tx1, c0:c1] = part.reshape(ty1 - ty0, r1 - r0, tx1 - tx0, c1 - c0)


class RawTiles:
    """Image codec "raw": a page's image tiles stored as they are, uint8 (rows, columns, 3, T, T) flattened.

    A page record's image field is read and written through an image codec only: values (the field's length for
    a page size), encode (the page image as readers see it), write (into the field's start, returning the values
    written), view (a page image over the field, nothing copied) and stores_maps (whether the record holds the
    maps). The other codec (store/page_jpeg.py: JPEG tiles, decoded per crop) is another class with these whose
    page images answer what readers ask of one: width, height, block, rect and array, as Tiled does."""
    name = "raw"
    stores_maps = True

    def values(self, size: tuple[int, int]) -> int:
        return image_values(size)

    def encode(self, image: np.ndarray, where: str = "") -> Tiled:
        """The page image of uint8 RGB (3, H, W)."""
        return Tiled.from_array(image, TILE_PX)

    def write(self, image: Tiled, field: np.ndarray) -> int:
        field[:image.tiles.size] = image.tiles.ravel()
        return image.tiles.size

    def view(self, field: np.ndarray, size: tuple[int, int], where: str = "") -> Tiled:
        tx, ty = tile_grid(size)
        return Tiled(field[:self.values(size)].reshape(ty, tx, 3, TILE_PX, TILE_PX), *size)


RAW_TILES = RawTiles()


class Page(NamedTuple):
    """A page as a record stores it: its image through its codec, its maps as tiles, its words as its sidecar row
    holds them."""
    image: Tiled           # uint8 RGB (3, H, W), page px, in tiles of TILE_PX (RAW_TILES); or a codec's page image
    maps: Tiled | None     # MAPS_DTYPE (H * s, W * s): owner | (1 - roi) << DONT_CARE_BIT, in tiles of map_tile(s);
                           # None where the codec stores none (a reader draws them from the words)
    points: np.ndarray     # float32 (P, 2): every word's vertices, page px
    offsets: np.ndarray    # int64 (N + 1,): word k is points[offsets[k]:offsets[k + 1]], record order
    care: np.ndarray       # uint8 (N,): 1 = legible quad (drawn in score and geometry), 0 = don't-care
    theta: np.ndarray      # float64 (L,): min_rect_angles of each legible quad, L = care.sum()
    weight: np.ndarray     # float64 (L,): each legible word's chance to be the one a crop is drawn around
    warning: str | None = None    # from the image decoder (frame size mismatch), else None
    exif_applied: bool = False    # the decoder turned the image as its EXIF orientation says

    @classmethod
    def make(cls, rec: ImageRecord, cfg: BuildConfig, variant: int, codec=RAW_TILES) -> "Page":
        """Page `variant` of image `rec` under `cfg` (sample.page.make_page), laid out as its record holds it under
        an image codec (page_jpeg.codec_of(cfg))."""
        legible = int(np.sum(rec.reason == CARE))
        if legible > MAX_LEGIBLE:
            raise DataError(f"{rec.source}: image {rec.name} has {legible} legible words; a page holds at most "
                            f"{MAX_LEGIBLE}: split the image, or build with --crop build")
        content = make_page(rec, cfg, variant, maps=codec.stores_maps)
        return cls.from_content(content, cfg.map_scale, codec, f"{rec.source}: image {rec.name}")

    @classmethod
    def from_content(cls, c: PageContent, map_scale: float, codec=RAW_TILES, where: str = "") -> "Page":
        """A page's content laid out: its image through the codec, its owner and ROI maps packed and tiled where the
        codec stores them. where: the image, for errors."""
        maps = Tiled.from_array(pack_maps(c.owner, c.roi), map_tile(map_scale)) if codec.stores_maps else None
        return cls(codec.encode(c.image, where), maps, c.points, c.offsets, c.care, c.theta, c.weight, c.warning,
                   c.exif_applied)

    @classmethod
    def from_fields(cls, image: np.ndarray, maps: np.ndarray | None, size, points: np.ndarray, offsets: np.ndarray,
                    care: np.ndarray, weight: np.ndarray, map_scale: float, theta: np.ndarray | None = None,
                    codec=RAW_TILES, where: str = "") -> "Page":
        """A page over flat record fields (views, nothing copied; maps None where the codec stores none) and its
        words; theta computed when not given. where: the file and page, for errors."""
        w, h = (int(v) for v in size)
        if theta is None:
            theta = min_rect_angles(gather_quads(points, offsets, care > 0))
        tiled_maps = None
        if maps is not None:
            tx, ty = tile_grid((w, h))
            t = map_tile(map_scale)
            tiled_maps = Tiled(maps[:map_values((w, h), map_scale)].reshape(ty, tx, t, t),
                               round(w * map_scale), round(h * map_scale))
        return cls(codec.view(image, (w, h), where), tiled_maps, points, offsets, care, theta, weight)

    def write_into(self, fields, codec=RAW_TILES) -> dict[str, int]:
        """Store the page at the start of the flat fields of a fixed-size record (max_page_size; fields by name: its
        image, its maps where the codec stores them, its size (W, H)), the rest left untouched (a hole of a sparse
        staging file costs no disk). Returns the values written into each field."""
        used = {"image": codec.write(self.image, fields["image"])}
        if self.maps is not None:
            fields["maps"][:self.maps.tiles.size] = self.maps.tiles.ravel()
            used["maps"] = self.maps.tiles.size
        fields["size"][:] = self.size
        used["size"] = 2
        return used

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) in page px."""
        return self.image.width, self.image.height

    @property
    def owner(self) -> np.ndarray:
        """(H * s, W * s): 1 + legible word index (order of the care == 1 words), 0 = none."""
        return unpack_maps(self.maps.array())[0]

    @property
    def roi(self) -> np.ndarray:
        """uint8 (H * s, W * s): 0 inside don't-care words, 1 elsewhere."""
        return unpack_maps(self.maps.array())[1]

    def legible_quads(self) -> np.ndarray:
        """float64 (L, 4, 2) page px, in owner order."""
        return gather_quads(self.points, self.offsets, self.care > 0)
