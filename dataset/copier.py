"""Copy page-mode crops' images into their batch buffer from a second thread, while this one cuts the next crop.

Choosing a crop and cutting its maps is many small numpy calls that hold the GIL; copying its image
(3 MiB at the defaults, a strided window of the page) is one long numpy copy that releases it. A
batch of crops therefore reads fastest when the copies run in a thread of their own, overlapping the
next crops' work on a second core: `Crops` is a batch of items whose images already lie, one per row,
in one batch tensor, which collate hands on as it is.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

_COPIER: dict[int, ThreadPoolExecutor] = {}   # by process id: a forked DataLoader worker starts its own thread


def copier() -> ThreadPoolExecutor:
    """This process's copy thread (one: the copies of a batch go in order, the caller's thread does the rest)."""
    pid = os.getpid()
    if pid not in _COPIER:
        _COPIER.clear()   # a parent's executor is not ours to use after fork
        _COPIER[pid] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crop-copy")
    return _COPIER[pid]


class Crops(list):
    """A batch's items, each image a row of `images` (B, ...), a batch tensor filled by the copy thread;
    collate takes `images` as the batch's image field, uncopied."""

    def __init__(self, items: list, images: torch.Tensor):
        super().__init__(items)
        self.images = images


def copy_later(dst: np.ndarray, src: np.ndarray) -> Future:
    """np.copyto(dst, src) on this process's copy thread; wait on the Future before reading dst."""
    return copier().submit(np.copyto, dst, src)
