"""Score and geometry of page-mode crops, rebuilt from the owner map and a word table on the training device.

A page-mode crop's geometry is a function of the word a map pixel belongs to and the pixel's
position (east_cache/sample/targets.py), so the loader can hand over the owner map (2 bytes per map
pixel) and a small per-word table (targets.word_table) instead of 10 bytes of float16 geometry,
and the device rebuilds score and geometry in a few elementwise kernels. The float32 operations
are those of targets.fill_geometry, in the same order, so the result equals it bit for bit.

A crop's image comes as the block of page tiles that holds it: raw pages' tiles channels first (n, n, 3, T, T),
jpeg pages' decoded tiles channels last (n, n, J, J, 3), or their JPEG streams, decoded here for the whole batch
(east_cache/reader/jpeg_device.py: nvJPEG on a CUDA device); one untile cuts the crops out of either layout.
A jpeg page's crop maps come drawn, the crop's own (m, m). A crop of a page warped at read time comes warped,
channels last (S, S, 3), with its own drawn maps.
"""
from __future__ import annotations

import torch

from east_cache.reader.jpeg_device import blocks_of, decode_blocks
from east_cache.store.page_record import (
    CROP_IN_BLOCK,
    CROP_MAPS,
    DONT_CARE_BIT,
    IMAGE_BLOCK,
    JPEG_BLOCK,
    JPEG_STREAMS,
    MAPS_BLOCK,
    OWNER_MASK,
    TABLE_COLUMNS,
    WARPED_IMAGE,
    WORD_TABLE,
)


def expand_targets(owner: torch.Tensor, table: torch.Tensor, map_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """owner (B, 1, h, w) integer: 1 + the row of table[b] that owns the pixel, 0 for none; table (B, L, 9)
    float32 (columns TABLE_COLUMNS) -> score uint8 (B, 1, h, w), geo float32 (B, 5, h, w) (zero where score is 0)."""
    b, _, h, w = owner.shape
    idx = owner.reshape(b, h * w).long()
    n = len(TABLE_COLUMNS)
    rows = torch.cat([table.new_zeros(b, 1, n), table.float()], 1)   # row 0: no word
    column = dict(zip(TABLE_COLUMNS, rows.gather(1, idx[..., None].expand(-1, -1, n)).unbind(-1)))
    cos, sin, ax, ay = column["cos"], column["sin"], column["ax"], column["ay"]
    x0, x1, y0, y1, angle = column["x0"], column["x1"], column["y0"], column["y1"], column["theta"]
    ys, xs = torch.meshgrid(torch.arange(h, device=owner.device, dtype=torch.float32),
                            torch.arange(w, device=owner.device, dtype=torch.float32), indexing="ij")
    dx = xs.reshape(1, -1) / map_scale - ax
    dy = ys.reshape(1, -1) / map_scale - ay
    rx = cos * dx - sin * dy + ax
    ry = sin * dx + cos * dy + ay
    positive = idx > 0
    zero = torch.zeros((), device=owner.device)
    channels = [torch.where(positive, d.clamp_min(0), zero) for d in (ry - y0, y1 - ry, rx - x0, x1 - rx)]
    geo = torch.stack([*channels, torch.where(positive, angle, zero)], 1).reshape(b, 5, h, w)
    return positive.reshape(b, 1, h, w).to(torch.uint8), geo


def batch_len(batch: dict) -> int:
    """Items in a batch, whichever its fields."""
    return len(next(iter(batch.values())))


def untile(tiles: torch.Tensor, at: list) -> torch.Tensor:
    """(B, C, S, S) crops from their blocks of page tiles (B, n, n, C, T, T), or a view of that shape (JPEG tiles
    channels last, permuted), and, per item, (dx, dy, S): where each crop begins in its block (a list, so that no
    device value is waited for)."""
    b, n, _, c, t, _ = tiles.shape
    pixels = tiles.permute(0, 3, 1, 4, 2, 5).reshape(b, c, n * t, n * t)
    return torch.stack([pixels[k, :, dy:dy + side, dx:dx + side] for k, (dx, dy, side) in enumerate(at)])


def untile_maps(maps: torch.Tensor, tiles: torch.Tensor, at: list) -> torch.Tensor:
    """(B, 1, m, m) maps of crops from their blocks of page maps tiles (B, n, n, t, t), the same page px as the
    image's blocks of tiles (B, n, n, 3, T, T), at the crops' (dx, dy, S) in page px (scaled by t / T here)."""
    r = tiles.shape[-1] // maps.shape[-1]   # page px per map px: 2 at map scale 0.5, 4 at 0.25
    return untile(maps[:, :, :, None], [(dx // r, dy // r, side // r) for dx, dy, side in at])


def _on(t: torch.Tensor, device) -> torch.Tensor:
    """t on the device (None: where it is), copied without waiting where it is pinned."""
    return t if device is None else t.to(device, non_blocking=True)


def batch_tiles(batch: dict, device=None) -> torch.Tensor:
    """A compact page-mode batch's blocks of image tiles (B, n, n, 3, T, T) on the device (default: where they are):
    raw tiles as they are, decoded JPEG tiles seen channels first (a view), JPEG streams decoded here first."""
    if JPEG_STREAMS in batch:
        blocks, n, tile = blocks_of(batch[JPEG_STREAMS].numpy())
        return decode_blocks(blocks, n, n, tile, "cpu" if device is None else device).permute(0, 1, 2, 5, 3, 4)
    if JPEG_BLOCK in batch:
        return _on(batch[JPEG_BLOCK], device).permute(0, 1, 2, 5, 3, 4)
    return _on(batch[IMAGE_BLOCK], device)


def batch_images(batch: dict, device=None) -> torch.Tensor:
    """The batch's images (B, 3, S, S) on the device (default: where they are): a batch's "image", or the crops cut
    out of its blocks of tiles (compact page-mode batches)."""
    if "image" in batch:
        return _on(batch["image"], device)
    if WARPED_IMAGE in batch:   # warped crops, channels last: seen channels first (a view)
        return _on(batch[WARPED_IMAGE], device).permute(0, 3, 1, 2)
    return untile(batch_tiles(batch, device), batch[CROP_IN_BLOCK].tolist())


def batch_maps(batch: dict, device=None) -> torch.Tensor:
    """A compact page-mode batch's maps (B, 1, m, m) on the device (default: where they are): the crops' own (jpeg
    pages), or cut out of their blocks of maps tiles; int16 holding the stored uint16 bits (torch's uint16 has few
    kernels on devices; int16 has all of them, and `& 0xFFFF` of its int32 gives the unsigned value back)."""
    maps = batch[CROP_MAPS] if CROP_MAPS in batch else batch[MAPS_BLOCK]
    if maps.dtype == torch.uint16:
        maps = maps.view(torch.int16)
    if CROP_MAPS in batch:
        return _on(maps, device)[:, None]
    return untile_maps(_on(maps, device), batch[IMAGE_BLOCK], batch[CROP_IN_BLOCK].tolist())


def expand_batch(batch: dict, device=None) -> dict:
    """A batch on the device (default: where it is) with the fields the loss takes. A batch of compact page-mode
    crops (tiles, at, maps, table: east_cache/reader/crop.py crop_page_compact) becomes image, score uint8, geo float32
    and roi uint8, rebuilt where the batch goes; any other batch is moved as it is. The map scale is the maps'
    side over the crop's."""
    if MAPS_BLOCK not in batch and CROP_MAPS not in batch:
        return {k: _on(v, device) for k, v in batch.items()}
    image, maps, table = batch_images(batch, device), batch_maps(batch, device), _on(batch[WORD_TABLE], device)
    map_scale = maps.shape[-1] / image.shape[-1]
    maps = maps.int() & 0xFFFF   # the stored uint16 value (batch_maps hands over its bits as int16)
    score, geo = expand_targets(maps & OWNER_MASK, table, map_scale)
    roi = (1 - (maps >> DONT_CARE_BIT)).to(torch.uint8)
    return {"image": image, "score": score, "geo": geo, "roi": roi}


def pad_tables(tables: list, out: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L_max, C) float32 from per-item (L_i, C) word tables (C = len(TABLE_COLUMNS)), zero rows after each
    item's own."""
    n = max((len(t) for t in tables), default=0)
    out = torch.zeros(len(tables), n, len(TABLE_COLUMNS)) if out is None else out.zero_()
    for i, t in enumerate(tables):
        out[i, :len(t)] = torch.as_tensor(t)
    return out
