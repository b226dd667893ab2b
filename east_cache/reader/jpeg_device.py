"""A batch's blocks of JPEG tiles decoded where the batch goes: on a CUDA device by nvJPEG in one call per batch,
else on the CPU.

The GPU path is torchvision.io.decode_jpeg given a list of streams and device="cuda" (batched nvJPEG, torchvision
0.19 and later), imported on the first CUDA batch only: torchvision's wheels pin a torch build of their own, so the
project does not depend on it, and a machine without it, without CUDA, or with a torchvision that does not load
decodes on the CPU (store/jpeg_tiles.py, libjpeg-turbo). nvJPEG's pixels are within the codec's error of the raw
page, not equal bit for bit to libjpeg-turbo's.

A block is the tiles that hold one crop (jpeg_tiles.block_streams: whole JPEG streams, CRC-checked where they were
read, None off the page's grid); both paths return (B, ny, nx, T, T, 3) uint8 RGB tiles, zeros off the page,
the layout a loader worker's CPU decode writes into its slot: tiles.permute(0, 1, 2, 5, 3, 4) is the (B, n, n, 3,
T, T) that expand.untile cuts crops from.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from east_cache.errors import CacheError
from east_cache.store.jpeg_tiles import REPAIR, clear_outside, decode_stream

MIN_TORCHVISION = (0, 19)   # decode_jpeg takes a list of streams, decoded on CUDA in one batch, from this version


class Block(NamedTuple):
    """The tiles of one crop: where they lie on their page, and the page's size (what lies off it reads 0)."""
    streams: list           # bytes | None per tile, row-major (jpeg_tiles.block_streams)
    tx: int                 # the block's first tile column and row (negative: left of or above the page)
    ty: int
    width: int              # the page's size, px
    height: int
    where: str              # the file and page it was read from, for errors


def nvjpeg(device) -> Callable | None:
    """decode(list of uint8 CPU tensors) -> list of (3, T, T) uint8 tensors on `device`, by nvJPEG: where the device
    is CUDA, CUDA works and a torchvision with batched decode_jpeg imports; else None."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    decode = torchvision_decode_jpeg()
    return None if decode is None else functools.partial(decode, device=device)


@functools.cache
def torchvision_decode_jpeg() -> Callable | None:
    """torchvision.io.decode_jpeg with RGB output, or None where torchvision is missing, older than
    MIN_TORCHVISION, or does not load beside this torch (its compiled ops are built for one torch version)."""
    try:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception:   # noqa: BLE001 - ImportError, or the RuntimeError / OSError of ops built for another torch
        return None
    version = tuple(int(p) for p in torchvision.__version__.split("+")[0].split(".")[:2] if p.isdigit())
    if version < MIN_TORCHVISION:
        return None
    return functools.partial(decode_jpeg, mode=ImageReadMode.RGB)


def decode_blocks(blocks: list[Block], ny: int, nx: int, tile: int, device="cpu",
                  decode: Callable | None = None) -> torch.Tensor:
    """(B, ny, nx, T, T, 3) uint8 on `device`: each block's tiles. decode: a batch decoder with nvjpeg()'s contract
    (default: nvjpeg(device)); without one, the CPU decodes them and the result is copied to the device."""
    decode = nvjpeg(device) if decode is None else decode
    if decode is None:
        return cpu_blocks(blocks, ny, nx, tile).to(device)
    return device_blocks(blocks, ny, nx, tile, device, decode)


def cpu_blocks(blocks: list[Block], ny: int, nx: int, tile: int) -> torch.Tensor:
    """decode_blocks on the CPU, with libjpeg-turbo (store/jpeg_tiles.py)."""
    out = np.empty((len(blocks), ny, nx, tile, tile, 3), np.uint8)
    for b, block in enumerate(blocks):
        for k, stream in enumerate(block.streams):
            if stream is not None:
                decode_stream(stream, out[b, k // nx, k % nx], block.where)
        clear_outside(out[b], block.tx, block.ty, block.width, block.height)
    return torch.from_numpy(out)


def device_blocks(blocks: list[Block], ny: int, nx: int, tile: int, device, decode: Callable) -> torch.Tensor:
    """decode_blocks by a batch decoder: every tile of the batch in one call, placed in its block on the device."""
    found = [(b * ny * nx + k, stream) for b, block in enumerate(blocks)
             for k, stream in enumerate(block.streams) if stream is not None]
    out = torch.zeros((len(blocks) * ny * nx, tile, tile, 3), dtype=torch.uint8, device=device)
    if found:
        data = [torch.from_numpy(np.frombuffer(bytearray(s), np.uint8)) for _, s in found]   # writable: no warning
        try:
            images = decode(data)
        except RuntimeError as e:   # the streams were CRC-checked where they were read: an encoder's or decoder's bug
            pages = sorted({block.where for block in blocks})
            raise CacheError(f"{', '.join(pages)}: nvJPEG could not decode a tile of the batch ({e}): {REPAIR}") from None
        if any(tuple(im.shape) != (3, tile, tile) for im in images):
            raise CacheError(f"{blocks[0].where}: nvJPEG decoded a tile of the batch to another size than "
                             f"{tile} x {tile} px: {REPAIR}")
        rows = torch.tensor([i for i, _ in found], device=device)
        out[rows] = torch.stack(images).to(device).permute(0, 2, 3, 1)
    out = out.view(len(blocks), ny, nx, tile, tile, 3)
    for b, block in enumerate(blocks):
        clear_outside(out[b], block.tx, block.ty, block.width, block.height)
    return out
