"""Read rates of one cache by the east_cache code on PYTHONPATH: benchmarks/compare.py runs this once per tree and
round, each tree's cache read by that tree's own code. Prints one JSON object: {arm: crops per CPU second}.

It imports nothing of benchmarks/ (common.py would put the working tree on sys.path, ahead of the tree asked for),
and only names every revision since the page reader came has (CacheDataset(compact=True), collate.copy_item,
workers.Slot); an arm a revision cannot read (a crop side other than its cache's, or scale and perspective before
east_cache/augment.py) is left out, and compare.py says so.

An arm is (crop side, augmentation): "baseline" is the cache's own height jitter and rotation, "all on" adds scale
U[0.5, 1], perspective 0.1 and rotation 20. As a loader worker reads: compact items copied into a batch slot, cv2 on
one thread. The arms are interleaved crop by crop (the same (epoch, image) read by each in turn, each read timed on
its own CPU clock), so that a shared machine's drift falls on all of them alike.

    PYTHONPATH=TREE python benchmarks/compare_read.py CACHE [--sizes 1024,512] [--cpu-seconds 1.0]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

SLOT_ROWS = 8
ALL_ON = dict(scale=(0.5, 1.0), perspective=0.1, max_rotation=20.0)


def arms(cache: str, sizes: list[int]) -> dict[str, object]:
    """{arm name: CacheDataset}, one per arm this code can read."""
    from east_cache.reader import CacheDataset
    try:
        from east_cache.augment import Augment
    except ImportError:   # before the run's augmentation: the cache's own draw at its own crop side only
        Augment = None
    out = {}
    for size in sizes:
        for name, changes in (("baseline", {}), ("all on", ALL_ON)):
            ds = CacheDataset(cache, compact=True)
            if Augment is None:
                if changes or size != ds.config.input_size:
                    continue
            else:
                ds.augment = Augment.of_cache(ds.config, input_size=size, **changes)
            out[f"{size} px, {name}"] = ds
    return out


def slot_of(ds):
    """A batch slot sized by one item, as a loader worker's (reader/workers.py)."""
    from east_cache.reader.collate import field_layouts
    from east_cache.reader.workers import Slot
    from east_cache.store.page_record import TABLE_COLUMNS, WORD_TABLE
    item = ds[(0, 0)]
    fields = field_layouts(item)
    if WORD_TABLE in item:
        fields[WORD_TABLE] = ((max(1, ds.table_rows()), len(TABLE_COLUMNS)), np.dtype(np.float32))
    return Slot(fields, SLOT_ROWS)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cache")
    p.add_argument("--sizes", default="1024,512", help="crop sides, comma-separated (default 1024,512)")
    p.add_argument("--cpu-seconds", type=float, default=1.0,
                   help="the slowest arm's CPU seconds of reading (default 1.0)")
    a = p.parse_args()
    from east_cache.reader.collate import copy_item
    from east_cache.reader.workers import cv2_single_threaded
    readers = arms(a.cache, [int(s) for s in a.sizes.split(",")])
    slots = {k: slot_of(ds) for k, ds in readers.items()}
    images = len(next(iter(readers.values())))
    with cv2_single_threaded():
        for k, ds in readers.items():   # every page mapped in and its words derived before the clock starts
            for i in range(images):
                copy_item(slots[k].arrays, i % SLOT_ROWS, ds[(0, i)])
        spent, n, epoch, i = dict.fromkeys(readers, 0.0), 0, 1, 0
        while n < SLOT_ROWS or max(spent.values()) < a.cpu_seconds:
            for k, ds in readers.items():
                c0 = time.process_time()
                copy_item(slots[k].arrays, n % SLOT_ROWS, ds[(epoch, i)])
                spent[k] += time.process_time() - c0
            n, i = n + 1, i + 1
            if i == images:
                i, epoch = 0, epoch + 1
    print(json.dumps({k: n / spent[k] for k in readers}))


if __name__ == "__main__":
    main()
