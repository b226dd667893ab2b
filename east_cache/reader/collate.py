"""collate: a batch of cached records as one tensor per field, each field copied once."""
from __future__ import annotations

import numpy as np
import torch

from east_cache.reader.buffers import empty_batch
from east_cache.reader.expand import pad_tables
from east_cache.store.page_record import MAPS_BLOCK, MAPS_PATCH, WORD_TABLE, put_rect


def collate(batch, pin: bool = False) -> dict[str, torch.Tensor]:
    """Copy each field once, from the page cache into one batch tensor per field; no float conversion here.
    A batch of rows is copied by torch (Tensor.copy_, on its intra-op threads), a list of items by numpy into
    the tensors' memory (copy_item: a per-item copy costs less dispatch than torch's; both release the GIL while
    they copy).
    pin (CUDA, main process only): the batch is born in pinned memory, so the copy to the device can be
    non_blocking and no second copy into pinned memory (DataLoader's pin_memory) is needed. Items are dicts
    of arrays by field name; a batch of adjacent rows (CacheDataset.__getitems__) also carries them as one
    structured slice, copied in one read per field."""
    rows = getattr(batch, "rows", batch)
    if isinstance(rows, np.ndarray):
        out = {k: empty_batch(rows[k].shape, rows[k].dtype, pin) for k in rows.dtype.names}
        for k, t in out.items():
            copy_rows(t, rows[k])
        return out
    out = {k: empty_batch((len(batch), *np.shape(v)), np.asarray(v).dtype, pin) for k, v in fixed_fields(batch[0])}
    arrays = {k: t.numpy() for k, t in out.items()}
    for j, item in enumerate(batch):
        copy_item(arrays, j, item)
    if WORD_TABLE in batch[0]:   # compact page-mode crops: word tables of their own lengths, padded with zero rows
        out[WORD_TABLE] = pad_tables([item[WORD_TABLE] for item in batch])
    return out


def fixed_fields(item: dict) -> list[tuple[str, object]]:
    """An item's fields of the same shape in every item, those a batch tensor holds: all but a compact crop's
    word table (its length varies) and maps patch (written over the maps by copy_item)."""
    return [(k, v) for k, v in item.items() if k not in (WORD_TABLE, MAPS_PATCH)]


def copy_item(out: dict[str, np.ndarray], j: int, item: dict) -> None:
    """Item j of a batch into out[k][j] for each of its fixed fields, then its maps patch (what a compact page-mode
    crop's cut words change, over the maps tiles copied from the page) where it has one; and its word table, zero rows
    after its own, where out has a table of fixed rows (a loader worker's batch slot). out: arrays (a slot's, or
    a batch tensor's memory): numpy's copies, whose dispatch per field costs less than torch's on one thread."""
    for k, v in fixed_fields(item):
        np.copyto(out[k][j], v)
    if item.get(MAPS_PATCH) is not None:
        put_rect(out[MAPS_BLOCK][j], *item[MAPS_PATCH])
    if WORD_TABLE in out and WORD_TABLE in item:
        table, rows = out[WORD_TABLE][j], len(item[WORD_TABLE])
        if rows > len(table):
            raise ValueError(f"a crop's word table has {rows} rows, its batch slot {len(table)}: the dataset's "
                             f"table_rows() is not the most legible words of its pages")
        table[:rows] = item[WORD_TABLE]
        table[rows:] = 0


def copy_rows(dst: torch.Tensor, src) -> None:
    """dst[...] = src (a field of a slice of records), with torch's copy (on its intra-op threads)."""
    dst.copy_(torch.from_numpy(np.asarray(src)))
