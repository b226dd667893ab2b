"""Reading a cache at a URL: each epoch's files downloaded ahead of its batches, in the order they first read them.

An epoch's order is known before it starts (its sampler is seeded by (seed, epoch)), and with it the file that
holds each of its items (the variant of that epoch). FetchingLoader wraps a run's loader: when an epoch begins, it
hands that file order to reader/ahead.py's Ahead, which downloads the next files a few at a time and pins
them; as batches are handed out, the files before them are released (unpinned: the local cache's limit may then
evict them, least recently used first). A reader that meets a file not there yet downloads it itself, or waits
for the process of the machine that does: download ahead saves time, never correctness.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from east_cache.reader.ahead import Ahead, file_order


def files_of_items(ds, keys) -> np.ndarray:
    """The file index that holds each (epoch, item) key's image at its variant of that epoch."""
    if not keys:
        return np.zeros(0, np.int64)
    found = []
    for epoch, item in keys:   # a selection's item: its image and copy at that epoch
        images, copies = ds.epoch_items(int(epoch))
        i = int(images[item])
        found.append(ds.locate(i, ds.variant(i, int(epoch), int(copies[item])))[0])
    return np.array(found, dtype=np.int64)


class FetchingLoader:
    """`loader` (a DataLoader or a WorkerLoader over an EpochSampler) of the CacheDataset `ds` read through a local
    cache folder (ds.remote), with each epoch's files downloaded ahead. Anything else is the loader's own."""

    def __init__(self, loader, ds):
        self.loader, self.ds = loader, ds

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator:
        keys = list(self.loader.sampler)
        files = files_of_items(self.ds, keys)
        order = file_order(files)
        position = np.zeros(max(order, default=-1) + 1, np.int64)
        position[order] = np.arange(len(order))
        it = iter(self.loader)
        # the first batch before any download thread starts: worker processes fork at their first batch
        first = next(it, None)
        if first is None:
            return
        size = self.loader.batch_size
        with Ahead(self.ds.remote, [self.ds.files[f] for f in order]) as ahead:
            yield first
            for b, batch in enumerate(it, start=1):
                ahead.advance(int(position[files[b * size:(b + 1) * size]].max(initial=0)))
                yield batch
