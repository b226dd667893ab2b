"""`east-cache bench CACHE --augment RECIPE`: what a recipe costs a loader worker: crops per CPU second of one
worker core without and with it, and each of its transforms' share.

A worker's work per crop is measured as a worker does it: the item made (CacheDataset.__getitems__: the epoch's
warp, the recipe, the targets) and copied into a batch slot's row (collate.copy_item), cv2 on one thread (as in the
workers), in this process's CPU time, so the figure is per core whatever else the machine runs. Each transform of
the recipe (the members of its top-level Compose) is then timed alone on the same warped crops; a share is its
time over the sum of them. Imports torch (through the reader): the CLI imports it only inside the command.
"""
from __future__ import annotations

import time

import numpy as np

from east_cache.augment import Augment
from east_cache.reader.cache import CacheDataset
from east_cache.reader.collate import copy_item, field_layouts
from east_cache.reader.recipe import as_transform
from east_cache.reader.transform import CropTransform, CropWords, crop_seed
from east_cache.reader.workers import cv2_single_threaded
from east_cache.store.page_record import TABLE_COLUMNS, WORD_TABLE

REPEAT_S = 1.0   # CPU seconds a measurement runs at least (whole passes over its crops)


def worker_rate(ds: CacheDataset, keys: list[tuple[int, int]], least_s: float | None = None) -> float:
    """Crops per CPU second of this process making ds's items of `keys` ((epoch, index)) and copying each into a
    batch slot's row, as a loader worker does (whole passes until least_s CPU seconds, default REPEAT_S)."""
    least_s = REPEAT_S if least_s is None else least_s
    first = ds.__getitems__(keys[:1])[0]
    layouts = field_layouts(first)
    slot = {k: np.empty((1, *shape), dtype) for k, (shape, dtype) in layouts.items()}
    if WORD_TABLE in first:
        slot[WORD_TABLE] = np.empty((1, max(1, ds.table_rows()), len(TABLE_COLUMNS)), np.float32)
    done, t0 = 0, time.process_time()
    with cv2_single_threaded():
        while True:
            for item in ds.__getitems__(keys):
                copy_item(slot, 0, item)
            done += len(keys)
            spent = time.process_time() - t0
            if spent >= least_s:
                return done / spent


def transform_parts(transform: CropTransform) -> list[tuple[str, CropTransform]]:
    """(name, transform) of each member of an albumentations pipeline's top-level Compose, each alone (its
    keypoints carried as the whole recipe carries them); a transform of another kind, whole."""
    inner = getattr(transform.transform, "transforms", None)
    if transform.kind != "albumentations" or inner is None:
        return [(transform.recipe, transform)]
    import albumentations as A
    return [(type(t).__name__, CropTransform(A.Compose([t]), type(t).__name__)) for t in inner]


def part_seconds(ds: CacheDataset, keys: list[tuple[int, int]], parts, least_s: float | None = None) -> list[float]:
    """CPU seconds per crop of each part (transform_parts) on ds's warped crops of `keys`, made once beforehand;
    least_s CPU seconds for all of them (default REPEAT_S)."""
    least_s = REPEAT_S if least_s is None else least_s
    seed, crops = ds.config.seed, []
    for epoch, i in keys:
        ds.set_epoch(epoch)
        item, words = ds[i], CropWords(*ds.quads(i))
        crops.append((np.ascontiguousarray(np.asarray(item["image"]).transpose(1, 2, 0)), words,
                      crop_seed(seed, epoch, ds.names[i], ds.variant(i, epoch))))
    out = []
    with cv2_single_threaded():
        for _, part in parts:
            done, t0 = 0, time.process_time()
            while time.process_time() - t0 < least_s / max(1, len(parts)) or not done:
                for image, words, s in crops:
                    part(image.copy(), words, s, "bench")
                done += len(crops)
            out.append((time.process_time() - t0) / done)
    return out


def augment_report(cache, recipe, crops: int = 16, epoch: int = 0, augment: dict | None = None) -> str:
    """The table `bench --augment` prints: crops per CPU second of one worker core without and with the recipe
    (compact items, as train.py reads them), then each transform's time per crop and share. augment: the crops'
    geometric draw as east-train's flags of the same names give it (Augment fields over the cache's build values)."""
    ds = CacheDataset(cache, compact=True)
    ds.augment = Augment.of_cache(ds.config, **(augment or {}))
    transform = as_transform(recipe)
    keys = [(epoch + k // len(ds), k % len(ds)) for k in range(crops)]
    plain = worker_rate(ds, keys)
    ds.transform = transform   # refused here for a cache whose geometry was built
    augmented = worker_rate(ds, keys)
    parts = transform_parts(transform)
    whole = CacheDataset(cache)   # plain items: the warped crops each transform is timed on
    whole.augment = ds.aug
    seconds = part_seconds(whole, keys, parts)
    total = sum(seconds) or 1.0
    lines = [f"one loader worker core, {len(keys)} crops of {ds.aug.input_size} px from {cache} (cv2 on one thread, "
             f"CPU time), drawn by {ds.aug.describe()}:",
             f"  without --augment: {plain:8.1f} crops/s",
             f"  with {transform.recipe}: {augmented:8.1f} crops/s ({augmented / plain:.2f}x)"
             + ("; words moved as keypoints" if transform.moves else "; pixels only, targets unchanged"),
             f"  {'transform':<28} {'ms/crop':>8} {'share':>6}"]
    lines += [f"  {name:<28} {1e3 * s:8.2f} {100 * s / total:5.1f}%" for (name, _), s in zip(parts, seconds)]
    return "\n".join(lines)
