"""A page image as JPEG tiles: a crop decodes only the tiles it covers, straight into the caller's buffer.

The page (H, W, 3) uint8 RGB is cut into square tiles of `tile` px, row after row (the last row and column padded
with zeros to whole tiles), each a baseline JPEG of the same size, quality, chroma subsampling and standard
Huffman tables: their headers (SOI up to the start of scan) are the same bytes, so the page stores that header
once and each tile's scan (SOS ... EOI) alone. A decoder gets the header joined back to the scan.

Every tile's scan, and the header, has its CRC32 in the index, checked before it is decoded: a flipped bit in
a JPEG's entropy-coded data decodes without a complaint into wrong pixels, so the decoder's own signals are
not enough. A damaged or truncated page is a CacheError that names the page and the repair.

Decoding: libjpeg-turbo, through simplejpeg where it is installed (it decodes into a given buffer: no copy)
and through OpenCV otherwise (a copy per tile). Pixels past the page's (W, H) read 0, as in a raw page.

Packed form (`pack` / `unpack`, views of the buffer it is read from): PACK_HEAD, then offsets uint32
(tiles + 1,) of the scans in the data, crc uint32 (tiles,), the shared header, the data.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import NamedTuple

import cv2
import numpy as np

from east_cache.errors import REPAIR, CacheError

try:   # optional: decodes into the caller's buffer
    import simplejpeg
except ImportError:   # pragma: no cover - depends on the environment
    simplejpeg = None

SUBSAMPLING = {"444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444, "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420}
MCU_PX = 16             # the largest JPEG MCU (4:2:0): a tile side is a multiple of it, so no tile has partial MCUs
START_OF_SCAN = b"\xff\xda"
PACK_MAGIC = b"EJT1"    # bump the digit when the packed layout changes
PACK_HEAD = np.dtype([("magic", "S4"), ("width", "<u4"), ("height", "<u4"), ("tile", "<u4"), ("tiles", "<u4"),
                      ("header_bytes", "<u4"), ("data_bytes", "<u4"), ("meta_crc", "<u4")])


@dataclass(frozen=True)
class JpegSettings:
    """How a page's tiles are encoded."""
    tile: int = 128            # px per tile side, page px: a multiple of MCU_PX (and of page.TILE_PX for readers)
    quality: int = 90          # libjpeg quality, 1..100
    subsampling: str = "444"   # chroma: "444" at full resolution, "420" halved both ways

    def __post_init__(self):
        if self.tile <= 0 or self.tile % MCU_PX:
            raise ValueError(f"JPEG tile side {self.tile} px must be a positive multiple of {MCU_PX}")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"JPEG quality {self.quality} must be in 1..100")
        if self.subsampling not in SUBSAMPLING:
            raise ValueError(f"JPEG chroma subsampling {self.subsampling!r} must be one of {sorted(SUBSAMPLING)}")


class JpegTiles(NamedTuple):
    """A page image's tiles: scan k (row-major) is data[offsets[k]:offsets[k + 1]], its CRC32 crc[k]."""
    header: np.ndarray    # uint8: the bytes every tile's JPEG stream begins with, up to its start of scan
    data: np.ndarray      # uint8: the tiles' scans, one after another
    offsets: np.ndarray   # uint32 (tiles + 1,)
    crc: np.ndarray       # uint32 (tiles,)
    width: int            # page px
    height: int
    tile: int             # px per tile side

    @property
    def grid(self) -> tuple[int, int]:
        """(columns, rows) of tiles."""
        return -(-self.width // self.tile), -(-self.height // self.tile)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed form."""
        return PACK_HEAD.itemsize + self.offsets.nbytes + self.crc.nbytes + self.header.size + self.data.size


def encode_tiles(image: np.ndarray, settings: JpegSettings = JpegSettings()) -> JpegTiles:
    """The JpegTiles of an RGB page image (H, W, 3) uint8."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"a page image is uint8 (H, W, 3), not {image.dtype} {image.shape}")
    h, w = image.shape[:2]
    t = settings.tile
    cols, rows = -(-w // t), -(-h // t)
    padded = np.zeros((rows * t, cols * t, 3), np.uint8)
    padded[:h, :w] = image[..., ::-1]   # OpenCV encodes BGR
    params = [cv2.IMWRITE_JPEG_QUALITY, settings.quality,
              cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SUBSAMPLING[settings.subsampling]]
    streams = []
    for y in range(rows):
        for x in range(cols):
            ok, stream = cv2.imencode(".jpg", padded[y * t:(y + 1) * t, x * t:(x + 1) * t], params)
            if not ok:
                raise RuntimeError(f"OpenCV could not encode a {t} px JPEG tile")
            streams.append(stream.tobytes())
    header = streams[0][:streams[0].index(START_OF_SCAN)]
    scans = []
    for s in streams:
        if not s.startswith(header + START_OF_SCAN):
            raise RuntimeError("OpenCV wrote JPEG tiles of one page with different headers; they cannot share one")
        scans.append(s[len(header):])
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in scans])]).astype(np.uint32)
    crc = np.array([zlib.crc32(s) for s in scans], np.uint32)
    return JpegTiles(np.frombuffer(header, np.uint8), np.frombuffer(b"".join(scans), np.uint8), offsets, crc,
                     w, h, t)


def pack(tiles: JpegTiles) -> np.ndarray:
    """uint8 (tiles.nbytes,): the packed form (module docstring)."""
    cols, rows = tiles.grid
    head = np.array((PACK_MAGIC, tiles.width, tiles.height, tiles.tile, cols * rows, tiles.header.size,
                     tiles.data.size, 0), PACK_HEAD)
    meta = [tiles.offsets.astype("<u4").tobytes(), tiles.crc.astype("<u4").tobytes(), tiles.header.tobytes()]
    head["meta_crc"] = meta_crc(head.tobytes(), meta)
    return np.frombuffer(b"".join([head.tobytes(), *meta, tiles.data.tobytes()]), np.uint8)


def meta_crc(head: bytes, meta: list) -> int:
    """CRC32 of everything but the scans (each has its own): the head with meta_crc 0, the index, the header."""
    crc = zlib.crc32(head[:PACK_HEAD.fields["meta_crc"][1]])
    for part in meta:
        crc = zlib.crc32(part, crc)
    return crc


def packed_extent(buffer: np.ndarray) -> tuple[int, int, int] | None:
    """(width, height, bytes) that a packed buffer's head says the page and its packed tiles take; None where the
    buffer holds no head of packed tiles (too short, another magic). Reads the head alone."""
    buffer = np.asarray(buffer, np.uint8).reshape(-1)
    if buffer.size < PACK_HEAD.itemsize:
        return None
    head = buffer[:PACK_HEAD.itemsize].view(PACK_HEAD)[0]
    if head["magic"] != PACK_MAGIC:
        return None
    n = int(head["tiles"])
    return (int(head["width"]), int(head["height"]),
            PACK_HEAD.itemsize + 4 * (2 * n + 1) + int(head["header_bytes"]) + int(head["data_bytes"]))


def unpack(buffer: np.ndarray, where: str) -> JpegTiles:
    """The JpegTiles a packed buffer (uint8, at least as long as what pack wrote) holds: views of it. Its sizes
    and the CRC32 of all but the scans are checked (a scan's when it is decoded): anything else is a CacheError
    naming `where` (the file and page it comes from)."""
    buffer = np.asarray(buffer, np.uint8).reshape(-1)
    if buffer.size < PACK_HEAD.itemsize:
        raise CacheError(f"{where}: its compressed page is truncated ({buffer.size} bytes): {REPAIR}")
    head = buffer[:PACK_HEAD.itemsize].view(PACK_HEAD)[0]
    n, hb, db = int(head["tiles"]), int(head["header_bytes"]), int(head["data_bytes"])
    index_at = PACK_HEAD.itemsize
    header_at = index_at + 4 * (2 * n + 1)
    end = header_at + hb + db
    if head["magic"] != PACK_MAGIC:
        raise CacheError(f"{where}: its compressed page has a damaged header: {REPAIR}")
    if buffer.size < end:
        raise CacheError(f"{where}: its compressed page is truncated ({buffer.size} of {end} bytes): {REPAIR}")
    offsets = buffer[index_at:index_at + 4 * (n + 1)].view("<u4")
    crc = buffer[index_at + 4 * (n + 1):header_at].view("<u4")
    header = buffer[header_at:header_at + hb]
    if meta_crc(buffer[:index_at].tobytes(), [offsets, crc, header]) != int(head["meta_crc"]):
        raise CacheError(f"{where}: its compressed page's header or tile index is damaged (CRC32 mismatch): {REPAIR}")
    w, h, t = int(head["width"]), int(head["height"]), int(head["tile"])
    if t <= 0 or n != -(-w // t) * -(-h // t) or offsets[0] != 0 or offsets[-1] != db:
        raise CacheError(f"{where}: its compressed page's tile index does not add up: {REPAIR}")
    return JpegTiles(header, buffer[header_at + hb:end], offsets, crc, w, h, t)


def tile_stream(tiles: JpegTiles, k: int, where: str) -> bytes:
    """Tile k's whole JPEG stream (the shared header joined to its scan), its CRC32 checked."""
    scan = tiles.data[int(tiles.offsets[k]):int(tiles.offsets[k + 1])]
    if zlib.crc32(scan) != int(tiles.crc[k]):
        cols = tiles.grid[0]
        raise CacheError(f"{where}: tile (column {k % cols}, row {k // cols}) of its compressed page is damaged "
                         f"(CRC32 mismatch): {REPAIR}")
    return b"".join((tiles.header, scan))


def block_streams(tiles: JpegTiles, tx: int, ty: int, nx: int, ny: int, where: str) -> list[bytes | None]:
    """The JPEG streams of the block of tiles [tx, tx + nx) x [ty, ty + ny), row-major, CRC-checked; None for a
    tile off the page's grid (tx, ty may be negative: a crop may begin left of or above the page)."""
    cols, rows = tiles.grid
    return [tile_stream(tiles, y * cols + x, where) if 0 <= x < cols and 0 <= y < rows else None
            for y in range(ty, ty + ny) for x in range(tx, tx + nx)]


def decode_stream(stream: bytes, out: np.ndarray, where: str, f: int = 1) -> None:
    """Decode one tile's stream into out (T / f, T / f, 3) uint8 RGB (C-contiguous), f in 1, 2, 4, 8: libjpeg scales
    by 1/f in its inverse DCT. In place with simplejpeg, a copy with OpenCV. A stream the decoder refuses, or of
    another size, is a CacheError."""
    try:
        if simplejpeg is not None:
            side = out.shape[0]
            pixels = simplejpeg.decode_jpeg(stream, colorspace="RGB", buffer=out, strict=True,
                                            **({} if f == 1 else {"min_height": side, "min_width": side,
                                                                   "min_factor": f}))
        else:
            pixels = cv2.imdecode(np.frombuffer(stream, np.uint8), REDUCED_FLAGS[f])
            if pixels is None:
                raise ValueError("OpenCV refused it")
            if f > 1:   # OpenCV's reduced reads give BGR
                pixels = cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)
    except (ValueError, cv2.error) as e:
        raise CacheError(f"{where}: a tile of its compressed page does not decode ({e}): {REPAIR}") from None
    if pixels.shape != out.shape:
        at = f" at 1/{f}" if f > 1 else ""
        raise CacheError(f"{where}: a tile of its compressed page decodes to {pixels.shape}{at}, not {out.shape}: "
                         f"{REPAIR}")
    if simplejpeg is None:
        out[...] = pixels


# OpenCV's imdecode flag for a tile decoded at 1/f of its side (decode_stream without simplejpeg)
REDUCED_FLAGS = {1: cv2.IMREAD_COLOR_RGB, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                 8: cv2.IMREAD_REDUCED_COLOR_8}


def clear_outside(out, tx: int, ty: int, width: int, height: int) -> None:
    """Zero the px of a block of tiles out (ny, nx, T, T, 3) that starts at tile (tx, ty) where they lie off the page
    (W, H) = (width, height): whole tiles off its grid, and the padding of its last row and column of tiles. A raw
    page reads 0 there. Any array with numpy's basic indexing (a device tensor too)."""
    t = out.shape[2]
    for axis, start, size in ((0, ty, height), (1, tx, width)):
        n, lead = out.shape[axis], (slice(None),) * axis
        first, end = min(max(-start, 0), n), min(max(-(-size // t) - start, 0), n)   # block tiles on the grid
        out[lead + (slice(0, first),)] = 0
        out[lead + (slice(end, n),)] = 0
        last = size // t - start   # the tile holding the page's edge, when it ends inside a tile
        if size % t and 0 <= last < n:
            if axis == 0:
                out[last, :, size % t:] = 0
            else:
                out[:, last, :, size % t:] = 0


def decode_block(tiles: JpegTiles, tx: int, ty: int, nx: int, ny: int, out: np.ndarray, where: str) -> None:
    """The block of tiles [tx, tx + nx) x [ty, ty + ny) into out (ny, nx, T, T, 3) uint8 (a batch slot's rows: each
    tile C-contiguous), zeros off the page."""
    if out.shape != (ny, nx, tiles.tile, tiles.tile, 3) or out.dtype != np.uint8:
        raise ValueError(f"a block of {ny} x {nx} tiles of {tiles.tile} px needs a uint8 buffer "
                         f"{(ny, nx, tiles.tile, tiles.tile, 3)}, not {out.dtype} {out.shape}")
    for k, stream in enumerate(block_streams(tiles, tx, ty, nx, ny, where)):
        if stream is not None:   # tiles off the grid: clear_outside
            decode_stream(stream, out[k // nx, k % nx], where)
    clear_outside(out, tx, ty, tiles.width, tiles.height)


def block_of(tiles: JpegTiles, x: int, y: int, w: int, h: int) -> tuple[int, int, int, int]:
    """(tx, ty, nx, ny): the block of tiles that holds the window [x, x + w) x [y, y + h) page px."""
    t = tiles.tile
    tx, ty = x // t, y // t   # floor: a window may begin left of or above the page
    return tx, ty, (x + w - 1) // t - tx + 1, (y + h - 1) // t - ty + 1


def decode_window(tiles: JpegTiles, x: int, y: int, w: int, h: int, where: str) -> np.ndarray:
    """(h, w, 3) uint8: the page's px [x, x + w) x [y, y + h), 0 off the page: a view, rows strided, of the decoded
    tiles laid out row after row (one copy after the decode; cv2 and numpy read strided rows as they are)."""
    tx, ty, nx, ny = block_of(tiles, x, y, w, h)
    t = tiles.tile
    block = np.empty((ny, nx, t, t, 3), np.uint8)
    decode_block(tiles, tx, ty, nx, ny, block, where)
    pixels = block.transpose(0, 2, 1, 3, 4).reshape(ny * t, nx * t, 3)
    dx, dy = x - tx * t, y - ty * t
    return pixels[dy:dy + h, dx:dx + w]


def check_tiles(tiles: JpegTiles, where: str) -> str | None:
    """What is wrong with the tiles' bytes (a CRC32 mismatch), None when nothing is: what `verify` asks."""
    try:
        block_streams(tiles, 0, 0, *tiles.grid, where)
    except CacheError as e:
        return str(e)
    return None
