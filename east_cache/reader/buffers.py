"""Batch tensors: reused in the main process, born in shared memory in a DataLoader worker, or pinned.

Filling freshly allocated memory costs a page fault per 4 KiB, which in the main process (workers=0) takes
longer than the copy itself. So the main process takes its batch buffers from a pool (POOL) and hands one out
again only once nothing references it any more.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import torch
from torch.utils.data import get_worker_info

POOLED_BUFFERS = 6   # per batch shape and dtype; a prefetching loop holds depth + 2 batches at once
# References to a free pooled array while take() looks at it: the pool list, the loop variable, getrefcount's argument.
FREE_REFS = 3


class BufferPool:
    """Batch arrays by (shape, dtype). A tensor from torch.from_numpy holds a reference to its array for as long
    as the tensor, or any view of its storage, lives; so an array whose only references are the pool's own is
    free to be overwritten."""

    def __init__(self, per_key: int = POOLED_BUFFERS):
        self.per_key = per_key
        self._arrays: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()   # two loading threads must not both take the same free buffer

    @staticmethod
    def key(shape: tuple, dtype) -> tuple:
        return tuple(shape), np.dtype(dtype).str

    def take(self, shape: tuple, dtype) -> torch.Tensor:
        """A buffer that nothing references any more, or a new one (kept while the pool has room)."""
        with self._lock:
            pool = self._arrays.setdefault(self.key(shape, dtype), [])
            for arr in pool:
                if sys.getrefcount(arr) == FREE_REFS:
                    return torch.from_numpy(arr)
            arr = np.empty(shape, dtype)
            if len(pool) < self.per_key:
                pool.append(arr)
            return torch.from_numpy(arr)

    def pooled(self, shape: tuple, dtype) -> int:
        """How many buffers of this shape and dtype the pool holds (in use or free)."""
        with self._lock:
            return len(self._arrays.get(self.key(shape, dtype), []))

    def clear(self) -> None:
        """Forget every buffer (tensors handed out stay valid): frees the memory of shapes no longer read."""
        with self._lock:
            self._arrays.clear()


POOL = BufferPool()   # the main process's batch buffers (collate)


def empty_batch(shape: tuple, dtype: np.dtype, pin: bool = False) -> torch.Tensor:
    """A batch tensor. Pinned: from torch's caching host allocator, which reuses freed blocks and keeps
    one alive until the non_blocking copies that read it have finished. In the main process, a reused
    buffer; in a DataLoader worker, one born in shared memory, so that it crosses to the main process
    uncopied."""
    if pin:
        return torch.empty(shape, dtype=torch_dtype(dtype), pin_memory=True)
    if get_worker_info() is None:
        return POOL.take(shape, dtype)
    dtype = torch_dtype(dtype)
    numel = int(np.prod(shape))
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(numel, device="cpu")
    return torch.empty(0, dtype=dtype).new(storage).view(shape)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype
