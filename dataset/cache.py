"""CacheDataset: the cache's records as a torch Dataset, read through memory maps (npy) or zarr.

Item i at epoch e is variant (e + offset_i) mod K of image i (images in name order), so every
epoch sees each image once and the K cached augmentations rotate. Files are opened lazily in
whichever process reads them (DataLoader workers included); no open map or zarr group is pickled.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from preprocess.errors import CacheError
from preprocess.store.format import FIELDS, locate, open_records, row_quads, variant_offsets
from preprocess.store.manifest import (
    check_stale,
    data_path,
    manifest_config,
    manifest_dtype,
    quads_path,
    read_manifest,
    update_command,
)


class StaleCacheError(CacheError):
    """The source data changed since the cache was built."""


class CacheDataset(Dataset):
    def __init__(self, cache_dir, in_memory: bool = False, check_stale: bool = True):
        self.cache_dir = Path(cache_dir)
        self.manifest = read_manifest(self.cache_dir)
        if check_stale:
            _raise_if_stale(self.cache_dir, self.manifest)
        self.config = manifest_config(self.manifest)
        self.fingerprint = self.manifest["build_fingerprint"]
        self.names = sorted(self.manifest["images"])
        self.files = [f["name"] for f in self.manifest["files"]]
        self.dtype = manifest_dtype(self.manifest)
        self.epoch = 0
        c = self.config
        self.offsets = variant_offsets(c.strategy, self.names, c.variants, c.batch_size, c.seed)
        self._maps: list[np.ndarray | None] = [None] * len(self.files)
        self._quads: dict[int, dict] = {}
        self._pid = os.getpid()
        if in_memory:  # read every file into RAM once; forked workers share the pages copy-on-write
            self._maps = [open_records(self._path(f), in_memory=True) for f in range(len(self.files))]

    def __len__(self) -> int:
        return len(self.names)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def variant(self, i: int) -> int:
        return (self.epoch + int(self.offsets[i])) % self.config.variants

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        f, r = self.locate(i, self.variant(i))
        rec = self._file(f)[r]
        return {k: rec[k] for k in FIELDS}

    def __getitems__(self, indices: list[int]) -> list[dict[str, np.ndarray]]:
        """A batch's items (views, nothing copied yet). When their rows are adjacent in one file (the batch
        strategy under BlockSampler), the list also carries them as one slice, which collate copies in one
        read per field; any other collate sees a plain list of items."""
        where = [self.locate(i, self.variant(i)) for i in indices]
        f0, r0 = where[0]
        if all(f == f0 and r == r0 + k for k, (f, r) in enumerate(where)):
            rows = self._file(f0)[r0:r0 + len(indices)]
            return Rows([{k: rec[k] for k in FIELDS} for rec in rows], rows)
        return [self[i] for i in indices]

    def locate(self, i: int, variant: int) -> tuple[int, int]:
        c = self.config
        return locate(c.strategy, i, variant, len(self.names), c.batch_size, c.chunk_size)

    def quads(self, i: int, variant: int | None = None):
        """(points (P,2) float32, offsets (N+1,) int64, care (N,) uint8) of a sample's words, in crop pixels."""
        f, r = self.locate(i, self.variant(i) if variant is None else variant)
        if f not in self._quads:
            self._quads[f] = dict(np.load(quads_path(self._path(f))))
        return row_quads(self._quads[f], r)

    def _path(self, f: int) -> Path:
        return data_path(self.cache_dir, self.files[f])

    def _file(self, f: int):
        """File f's records: a memory map, a ZarrRecords, or an array read whole (in_memory)."""
        if self._pid != os.getpid():  # forked: open our own maps rather than share the parent's
            self._maps, self._pid = self._unmapped(), os.getpid()
        m = self._maps[f]
        if m is None:
            m = self._maps[f] = open_records(self._path(f))
        return m

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_maps"], state["_quads"] = self._unmapped(), {}
        return state

    def _unmapped(self) -> list:
        """Loaded (in_memory) arrays stay; memory maps and zarr groups are reopened by whoever uses them next."""
        return [m if type(m) is np.ndarray else None for m in self._maps]


class Rows(list):
    """Items of adjacent rows of one file, with those rows as one structured slice (`rows`)."""

    def __init__(self, items: list, rows: np.ndarray):
        super().__init__(items)
        self.rows = rows


def _raise_if_stale(cache_dir: Path, manifest: dict) -> None:
    st = check_stale(manifest)
    if st.stale:
        raise StaleCacheError(f"{cache_dir}: the cache is stale: {st.describe()}. Update it with: "
                              f"{update_command(manifest, cache_dir)} (only changed images are redone), "
                              f"or pass --rebuild to train.py")


POOLED_BUFFERS = 6   # per batch shape and dtype; a prefetching loop holds depth + 2 batches at once
_pool: dict[tuple, list[np.ndarray]] = {}
_pool_lock = threading.Lock()


def _reused(shape: tuple, dtype: np.dtype) -> torch.Tensor:
    """A batch buffer that nothing references any more, or a new one.

    Filling freshly allocated memory costs a page fault per 4 KiB: in the main process (workers=0) that
    made a batch 3-4x slower than the copy itself. A tensor from torch.from_numpy holds a reference to
    its array for as long as the tensor, or any view of its storage, lives; so an array whose only
    references are the pool's and getrefcount's own is free to be overwritten."""
    key = (shape, np.dtype(dtype).str)
    with _pool_lock:   # two loading threads must not both take the same free buffer
        pool = _pool.setdefault(key, [])
        for arr in pool:
            if sys.getrefcount(arr) == 3:   # the pool list, the loop variable, getrefcount's argument
                return torch.from_numpy(arr)
        arr = np.empty(shape, dtype)
        if len(pool) < POOLED_BUFFERS:
            pool.append(arr)
        return torch.from_numpy(arr)


def _empty(shape: tuple, dtype: np.dtype, pin: bool = False) -> torch.Tensor:
    """A batch tensor. Pinned: from torch's caching host allocator, which reuses freed blocks and keeps
    one alive until the non_blocking copies that read it have finished. In the main process, a reused
    buffer; in a DataLoader worker, one born in shared memory, so that it crosses to the main process
    uncopied."""
    if pin:
        return torch.empty(shape, dtype=_torch_dtype(dtype), pin_memory=True)
    if get_worker_info() is None:
        return _reused(shape, dtype)
    dtype = _torch_dtype(dtype)
    numel = int(np.prod(shape))
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(numel, device="cpu")
    return torch.empty(0, dtype=dtype).new(storage).view(shape)


def collate(batch, pin: bool = False) -> dict[str, torch.Tensor]:
    """Copy each field once, from the page cache into one batch tensor per field; no float conversion here.
    pin (CUDA, main process only): the batch is born in pinned memory, so the copy to the device can be
    non_blocking and no second copy into pinned memory (DataLoader's pin_memory) is needed."""
    batch = getattr(batch, "rows", batch)
    if isinstance(batch, np.ndarray):  # contiguous rows of one file
        out = {}
        for k in FIELDS:
            src = batch[k]
            t = _empty(src.shape, src.dtype, pin)
            np.copyto(t.numpy(), src)
            out[k] = t
        return out
    out = {k: _empty((len(batch), *batch[0][k].shape), batch[0][k].dtype, pin) for k in FIELDS}
    for k in FIELDS:
        dst = out[k].numpy()
        for j, item in enumerate(batch):
            dst[j] = item[k]
    return out


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype
