"""A batch's blocks of JPEG tiles decoded where the batch goes: the CPU fallback equals the workers' decode, a batch
decoder's tiles land in their blocks (checked with a CPU decoder of nvJPEG's contract, since no GPU is here), and
nvJPEG is used only with CUDA and a torchvision that loads."""
from __future__ import annotations

import sys

import cv2
import numpy as np
import pytest
import torch

from east_cache.errors import CacheError
from east_cache.reader.jpeg_device import (
    Block,
    cpu_blocks,
    decode_blocks,
    device_blocks,
    nvjpeg,
    torchvision_decode_jpeg,
)
from east_cache.store.jpeg_tiles import JpegSettings, block_of, block_streams, decode_block, encode_tiles

TILE = 32


@pytest.fixture(scope="module")
def page():
    """JPEG tiles of a 150 x 110 px textured page: its last column and row of tiles end inside a tile."""
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (110, 150, 3), dtype=np.uint8), (0, 0), 1.2)
    return encode_tiles(img, JpegSettings(tile=TILE))


def crops(page, side: int = 50):
    """Blocks of crops of `side` px: inside the page, across its edges, partly off it (n x n tiles each)."""
    origins = [(0, 0), (37, 21), (-20, -45), (120, 80), (149, 109), (-60, 30)]
    n = side // TILE + 1
    blocks = []
    for x, y in origins:
        tx, ty = block_of(page, x, y, side, side)[:2]
        where = f"page at {(x, y)}"
        blocks.append(Block(block_streams(page, tx, ty, n, n, where), tx, ty, page.width, page.height, where))
    return blocks, n


def cpu_decoder_of_nvjpegs_contract(data: list[torch.Tensor]) -> list[torch.Tensor]:
    """What torchvision.io.decode_jpeg(list, mode=RGB, device=...) returns: (3, H, W) uint8 per stream."""
    return [torch.from_numpy(cv2.imdecode(d.numpy(), cv2.IMREAD_COLOR_RGB)).permute(2, 0, 1) for d in data]


def test_the_cpu_fallback_equals_the_workers_decode(page):
    blocks, n = crops(page)
    got = decode_blocks(blocks, n, n, TILE, "cpu")
    assert got.shape == (len(blocks), n, n, TILE, TILE, 3) and got.dtype == torch.uint8
    for b, block in enumerate(blocks):
        want = np.empty((n, n, TILE, TILE, 3), np.uint8)
        decode_block(page, block.tx, block.ty, n, n, want, block.where)
        np.testing.assert_array_equal(got[b].numpy(), want)


def test_a_batch_decoders_tiles_land_in_their_blocks(page):
    blocks, n = crops(page)
    calls = []

    def decode(data):
        calls.append(len(data))
        return cpu_decoder_of_nvjpegs_contract(data)

    got = decode_blocks(blocks, n, n, TILE, "cpu", decode=decode)
    assert calls == [sum(s is not None for b in blocks for s in b.streams)]   # one call for the whole batch
    np.testing.assert_array_equal(got.numpy(), cpu_blocks(blocks, n, n, TILE).numpy())


def test_a_batch_decoders_failure_is_a_cache_error(page):
    blocks, n = crops(page)

    def refuse(data):
        raise RuntimeError("nvjpegDecodeBatched failed")

    with pytest.raises(CacheError, match=r"page at \(0, 0\).*could not decode.*verify CACHE"):
        device_blocks(blocks, n, n, TILE, "cpu", refuse)


def test_nvjpeg_only_with_cuda():
    assert nvjpeg("cpu") is None
    if not torch.cuda.is_available():
        assert nvjpeg("cuda") is None


def test_without_torchvision_there_is_no_batch_decoder(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)   # import torchvision raises ImportError
    torchvision_decode_jpeg.cache_clear()
    try:
        assert torchvision_decode_jpeg() is None
    finally:
        torchvision_decode_jpeg.cache_clear()


@pytest.mark.skipif(nvjpeg("cuda") is None, reason="needs CUDA and torchvision >= 0.19")
def test_nvjpeg_decodes_within_the_codecs_error(page):
    blocks, n = crops(page)
    got = decode_blocks(blocks, n, n, TILE, "cuda").cpu().numpy().astype(np.float64)
    want = cpu_blocks(blocks, n, n, TILE).numpy().astype(np.float64)
    assert 10 * np.log10(255 ** 2 / max(np.mean((got - want) ** 2), 1e-12)) >= 40
