"""CacheDataset: a cache's items as a torch Dataset: records as stored (--crop build) or crops cut from pages
(--crop read), one per image and epoch.

Item i at epoch e is variant (e + offsets[i]) mod K of image i (images in name order; offsets drawn per image
from the seed by the store's layout), so every epoch sees each image once and the K cached augmentations
rotate; a selection (select: a split, repeats per source) makes item i an image of the epoch's list instead. A
crop-mode cache's item is that record (RecordReader, east_cache/reader/records.py); a page-mode cache's is a crop of
that page drawn anew every epoch (PageCropper, east_cache/reader/pages.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import mmap
import multiprocessing
import numbers
import warnings

import numpy as np
from torch.utils.data import Dataset, get_worker_info

from east_cache.augment import Augment
from east_cache.bounds import COUNT_OR_ZERO, SEED, Bound, check_number
from east_cache.errors import UsageError, cache_command
from east_cache.reader.collate import collate
from east_cache.reader.pages import PageCropper
from east_cache.reader.records import RecordReader, StaleCacheError
from east_cache.reader.recipe import as_transform
from east_cache.reader.transform import CropTransform
from east_cache.store.format import CROP, record_spec
from east_cache.store.page_jpeg import JPEG_TILE_PX
from east_cache.store.selection import Selection
from east_cache.store.page_record import (
    CROP_IN_BLOCK,
    CROP_MAPS,
    IMAGE_BLOCK,
    JPEG_BLOCK,
    JPEG_STREAMS,
    MAPS_BLOCK,
    MAPS_DTYPE,
    WARPED_IMAGE,
    WORD_TABLE,
    block_bytes,
    block_tiles,
)
from east_cache.store.remote.local_cache import local_settings

READ_TOLD, READ_WARNED, READ_SEEN = 0, 1, 2   # CacheDataset._reads: set_epoch called, warned, items read from here on


class CacheDataset(RecordReader, Dataset):
    """The items of the cache at cache_dir (built by `east-cache build`), one per image, for an epoch (set_epoch).

    S = input_size px, m = round(S x map_scale) map px; a map pixel (x, y) stands for the crop point (x, y) / s.
    An item is a dict of numpy arrays (where they can be, views of a private copy-on-write map of the cache: a
    write stays in this process, and it reads the written values from then on):
      image  uint8 (3, S, S): the crop, RGB, channels first, 0..255 (not normalised: the model's input
             pipeline does that on the device)
      score  uint8 (1, m, m): 1 inside a legible word's shrunk quad, else 0
      geo    float16 (5, m, m): where score is 1, the distances (>= 0, input px) from the pixel's point to the
             top, bottom, left and right edges of its word's box rotated by the word's angle about its first
             vertex, then that angle (rad, in [-pi/2, pi/2)); 0 where score is 0
      roi    uint8 (1, m, m): 0 inside don't-care words (illegible, tagged, not quads, too small, or legible
             words the crop cuts), else 1 (also past the page, where the image is 0)
    A page-mode cache stored resized only (--geometry read, the default) warps each item's crop from its page with
    the epoch's draw (augment: height, rotation, scale, perspective; S the Augment's input size); its compact items
    (compact=True) hold
      image_hwc  uint8 (S, S, 3): the crop, RGB channels last, warped where the item is written into its batch
                 (np.asarray warps it; expand_batch hands it on channels first, a view)
      crop_maps  uint16 (m, m): bits 0-14 the owner (1 + the row of table of the word whose shrunk quad covers the
                 pixel, 0 none), bit 15 don't-care (ROI 0)
      table      float32 (L, 9): per legible word of the crop, the columns page_record.TABLE_COLUMNS (cos, sin of
                 the angle, first vertex ax, ay, rotated box x0, x1, y0, y1, input px, angle rad)
    for the device to expand into the four fields above (reader/expand.py expand_batch, geo float32).
    With compact=True a page cache stored warped (--geometry build) gives instead the crop's tiles, T =
    page_record.TILE_PX = 32 px, t = T x map_scale, n = page_record.block_tiles(S) tiles per side:
      tiles  uint8 (n, n, 3, T, T): the block of the page's RGB tiles that holds the crop, 0..255
      at     int32 (3,): dx, dy (page px, 0 <= dx, dy < T) where the crop begins in the block, and S
      maps   uint16 (n, n, t, t): the same block of the page's maps: bits 0-14 the owner (1 + the row of table
             of the word whose shrunk quad covers the pixel, 0 none), bit 15 don't-care (ROI 0)
      patch  None, or (x0, y0, values uint16 (h, w)): what the crop's cut words change in maps, map px from the
             block's corner (collate writes it over the copied maps)
      table  float32 (L, 9): per legible word of the page, the columns page_record.TABLE_COLUMNS (cos, sin of the
             angle, first vertex ax, ay, rotated box x0, x1, y0, y1, input px from the crop's corner, angle rad)
    A jpeg page cache's compact items (--image-codec jpeg) hold, instead of tiles, maps and patch, J = 128, n =
    block_tiles(S, J):
      jpeg_tiles    uint8 (n, n, J, J, 3): the block of the page's JPEG tiles, decoded where the item is written
                    into its batch (np.asarray decodes it); with decode_on_device(), jpeg_streams, uint8
                    (capacity,): the block's JPEG streams, which expand_batch decodes on the device
      crop_maps     uint16 (m, m): the crop's maps (bits as in maps), drawn from the page's words where written
    A crop-mode cache (--crop build) ignores compact. The keys of a store's crop record (store/format.py CROP) and
    those above (store/page_record.py) are declared there once.

    augment: True (the default) draws each epoch's geometry of a --geometry read page by the cache's build values;
    an Augment (east_cache/augment.py: height jitter, rotation, crop side, scale, perspective) by that, the fields it
    leaves out at the cache's values (a cache whose pages are stored warped refuses one that differs from its
    build); False: no geometry (a validation read).
    in_memory: read every data file into RAM once (forked loader workers share it copy-on-write); check_stale:
    refuse (StaleCacheError) a cache whose source changed since its build or that other sample code made. A
    CacheDataset pickles without its open files: whoever unpickles it opens its own.

    cache_dir may be a URL (s3://bucket/prefix, needs pip install "east-cache[remote]"; credentials and endpoint
    from the environment): the items are the same, read from files downloaded on first use into local_cache
    (default ~/.cache/east-cache/HASH of the URL), shared by the processes of the machine, holding at most
    local_cache_limit bytes ("20G"; 0: no limit).

    transform: a transform of your own run on each augmented crop, uint8 (S, S, 3) RGB, before its targets are made
    (an albumentations pipeline, whose transforms that move pixels move the words too; a torchvision v2 transform; a
    callable image -> image; or a recipe file: east_cache/reader/transform.py says how). Only for a cache whose
    pages are stored resized only (--geometry read, the default), and only while augment is on.

    split, repeat, seed: the images read and how often an epoch (select); default every image once, item i image i."""

    def __init__(self, cache_dir, in_memory: bool = False, check_stale: bool = True, compact: bool = False,
                 local_cache=None, local_cache_limit: str | int = 0, augment: bool | Augment = True,
                 transform=None, split: str | None = None, repeat: dict | None = None, seed: int | None = None):
        super().__init__(cache_dir, in_memory, check_stale, local_settings(local_cache, local_cache_limit))
        self.pages = self.spec.kind.packed   # --crop read: records are pages, items crops of them
        self.jpeg = self.spec.kind.page_codec == "jpeg"
        self.compact = compact and self.pages
        self.cropper = PageCropper(self, self.compact) if self.pages else None
        self.augment = augment
        self._epoch, self._epoch_shared = shared_int(), True   # a pickled copy's is its own (see set_epoch)
        self._warn_lock = multiprocessing.Lock()   # forked processes share it: one of them warns
        self._warned = False
        self.offsets = self.layout.variant_offsets(self.names, self.config.seed)
        self.transform = transform
        self.selection: Selection | None = None   # None: every image once an epoch, item i image i
        self.select(split, repeat, seed)

    def select(self, split: str | None = None, repeat: dict | None = None, seed: int | None = None) -> None:
        """Read split's images (a split name: per source its ufo/NAME.json, or all of a source without one; a UFO
        file's names; None: all), each of a source R = repeat[source] times an epoch on average, drawn from (seed,
        default the cache's, epoch, source): store/selection.py. len() is then an epoch's items, item i an image
        (image_name) and its copy: copy 0 the whole cache's crop, each further one another. UsageError for a split or
        source the cache lacks."""
        sel = self.chosen = Selection(self.manifest, split, repeat, self.where)   # chosen: as asked, whole or not
        self.selection, self._epoch_items = None if sel.whole else sel, None
        self.selection_seed = self.config.seed if seed is None else check_number("seed", seed, SEED)
        # shared like the epoch: whether set_epoch was ever called, whether the repeat was warned of, and which items
        # were read by a plain index since (a second read of one at an epoch that never moves is the same crop)
        self._reads = shared_cells(READ_SEEN + len(self))

    @property
    def transform(self) -> CropTransform | None:
        """The user's transform of each augmented crop (the class docstring says what it may be), or None."""
        return self.cropper.transform if self.cropper is not None else None

    @transform.setter
    def transform(self, transform) -> None:
        transform = as_transform(transform)
        if transform is not None and not (self.pages and self.config.warps_at_read):
            how = "its crops were warped at build time" if not self.pages else "its pages are stored warped"
            raise UsageError(f"{self.where}: {how} (--crop build or --geometry build), with their maps: a transform "
                             f"({transform.recipe}) runs on the crops of a cache whose pages are stored resized only, "
                             f"where every crop's targets are made from its words; build one with "
                             f"{cache_command('build')} --crop read --geometry read (the defaults)")
        if self.cropper is not None:
            self.cropper.transform = transform

    def set_transform(self, transform, seed: int) -> None:
        """Run `transform` (as the transform property takes it) on each augmented crop, its random draws seeded by
        (seed, epoch, image name, variant)."""
        self.transform = transform
        if self.cropper is not None:
            self.cropper.transform_seed = seed

    def __len__(self) -> int:
        """Items an epoch: the images (of the selection, with their repeats)."""
        return len(self.selection) if self.selection is not None else len(self.names)

    def epoch_items(self, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(image index, copy) arrays of an epoch's items (default epoch: the current), the same in every process."""
        epoch = self.epoch if epoch is None else epoch
        if self.selection is None:
            return np.arange(len(self.names)), np.zeros(len(self.names), np.int64)
        kept = self._epoch_items
        if kept is None or kept[0] != epoch:
            kept = self._epoch_items = (epoch, *self.selection.epoch(self.selection_seed, epoch))
        return kept[1], kept[2]

    def _item(self, epoch: int, i: int) -> tuple[int, int]:
        """(image index, copy) of item i at an epoch."""
        if self.selection is None:
            return i, 0
        images, copies = self.epoch_items(epoch)
        return int(images[i]), int(copies[i])

    def image_of(self, key) -> int:
        """The image index of a key (item i at the current epoch, or (epoch, i)): which page a loader worker keeps."""
        return self._item(*(key if isinstance(key, tuple) else (self.epoch, self._index(key))))[0]

    def image_name(self, i: int) -> str:
        """The name of the image of item i at the current epoch."""
        return self.names[self._item(self.epoch, self._index(i))[0]]

    @property
    def epoch(self) -> int:
        """The epoch items are read for (set_epoch)."""
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Read epoch `epoch` (>= 0) from now on: item i becomes variant (epoch + offsets[i]) mod K of image i and,
        in a page-mode cache, the crop drawn from (seed, epoch, image name, variant), whichever process reads it.

        The epoch lives in memory shared with the processes forked after the dataset was made, so a DataLoader's
        workers (persistent ones included) read the epoch set here, in the training process. Workers started
        another way (spawn, forkserver) get a copy: set_epoch does not reach them once they run, and they warn;
        give such a DataLoader an EpochSampler (reader/loader.py), whose keys carry the epoch with each item."""
        self._epoch[0] = check_number("epoch", epoch, COUNT_OR_ZERO)
        self._reads[READ_TOLD] = 1

    @property
    def augment(self) -> bool:
        """Whether a page-mode cache stored resized only (--geometry read) draws each epoch's geometry (True,
        training: by `aug`) or reads unwarped crops, the same every epoch (False, validation). Nothing for other
        caches: their geometry was drawn at build time. Set it to a bool, or to an Augment (east_cache/augment.py:
        height jitter, rotation, crop size, scale, perspective) to draw by (and turn it on)."""
        return self.cropper is None or self.cropper.augment

    @augment.setter
    def augment(self, on: bool | Augment) -> None:
        if isinstance(on, Augment):
            if self.cropper is not None:
                self.cropper.set_aug(on)
            else:
                on.check_frozen(self.config, self.where)
            self._shape_items()
            on = True
        if self.cropper is not None:
            self.cropper.augment = bool(on)
        if not hasattr(self, "item_dtype"):
            self._shape_items()

    @property
    def aug(self) -> Augment:
        """The Augment crops are drawn by (the cache's build values unless told otherwise: augment = Augment(...))."""
        return self.cropper.aug if self.cropper is not None else Augment.of_cache(self.config)

    @property
    def size(self) -> int:
        """S: the side of an item's crop, px (the Augment's input size)."""
        return self.aug.input_size

    def _shape_items(self) -> None:
        """What an item holds for the crop side read: its fields, its dtype as one crop record, its bytes."""
        reading = dataclasses.replace(self.config, input_size=self.size)
        # what an item holds, as one structured record: a crop record, whichever kind is stored
        self.item_dtype = record_spec(reading, CROP).dtype if self.pages else self.dtype
        self.fields = self.item_dtype.names
        warps = self.pages and self.config.warps_at_read
        if self.compact:
            self.fields = ((WARPED_IMAGE, CROP_MAPS, WORD_TABLE) if warps else
                           (JPEG_BLOCK, CROP_IN_BLOCK, CROP_MAPS, WORD_TABLE) if self.jpeg else
                           (IMAGE_BLOCK, CROP_IN_BLOCK, MAPS_BLOCK, WORD_TABLE))
        # bytes an item delivers (a compact crop: its warped image and drawn maps, its blocks of tiles, or its decoded
        # JPEG tiles and drawn maps; its word table is a few hundred more)
        self.item_bytes = self.item_dtype.itemsize
        if self.compact and warps:
            self.item_bytes = 3 * reading.input_size ** 2 + MAPS_DTYPE().itemsize * reading.map_size ** 2
        elif self.compact:
            n, m = block_tiles(reading.input_size, JPEG_TILE_PX), reading.map_size
            self.item_bytes = (3 * (n * JPEG_TILE_PX) ** 2 + MAPS_DTYPE().itemsize * m * m if self.jpeg
                               else block_bytes(reading))

    def variant(self, i: int, epoch: int | None = None, copy: int = 0) -> int:
        """The variant image i reads at an epoch (default: the current one); a further copy of it in one epoch (a
        repeat) reads the next variants, where there are several."""
        return ((self.epoch if epoch is None else epoch) + int(self.offsets[i]) + copy) % self.config.variants

    def __getitem__(self, key) -> dict[str, np.ndarray]:
        """Item i (0 <= i < len(self), images in name order) at the current epoch, or for a key (epoch, i) at that
        epoch (EpochSampler's keys: the epoch travels with the item to whichever process reads it): the dict of
        arrays the class docstring lists (image, score, geo, roi; or tiles, at, maps, patch, table with
        compact=True)."""
        epoch, item = self._epoch_and_index(key)
        i, copy = self._item(epoch, item)
        v = self.variant(i, epoch, copy)
        if self.pages:
            return self.cropper.crop(i, v, epoch, copy)
        rec = self.record(i, v)
        return {k: rec[k] for k in self.fields}

    def __getitems__(self, keys: list) -> list[dict[str, np.ndarray]]:
        """A batch's items (keys as __getitem__ takes them; views, nothing copied yet). When their rows are
        adjacent in one file (the batch strategy under BlockSampler), the list also carries them as one slice,
        which collate copies in one read per field; any other collate sees a plain list of items."""
        if self.pages:   # every crop is computed anew: no rows to copy in one read
            return [self[k] for k in keys]
        keys = [self._epoch_and_index(k) for k in keys]   # each plain index noted once (_note_read)
        where = [self.locate(i, self.variant(i, e, c)) for e, i, c in ((e, *self._item(e, k)) for e, k in keys)]
        f0, r0 = where[0]
        if all(f == f0 and r == r0 + k for k, (f, r) in enumerate(where)):
            rows = self.file_records(f0)[r0:r0 + len(keys)]
            return SliceItems([{k: rec[k] for k in self.fields} for rec in rows], rows)
        return [self[k] for k in keys]

    def _epoch_and_index(self, key) -> tuple[int, int]:
        """(epoch, i) of a key; a plain index counts from the end when negative, as a Sequence's does."""
        if isinstance(key, tuple):
            return key
        i = self._index(key)
        if not self._epoch_shared:
            self._warn_unshared()
        self._note_read(i)
        return self.epoch, i

    def _index(self, key) -> int:
        """0 <= i < len(self) of a plain index, which counts from the end when negative."""
        if isinstance(key, bool) or not isinstance(key, numbers.Integral):
            raise TypeError(f"CacheDataset index {key!r}: must be an integer (or an (epoch, index) key)")
        if not -len(self) <= key < len(self):
            raise IndexError(f"CacheDataset index {key}: out of range for its {len(self)} items")
        return int(key) % len(self)

    def _note_read(self, i: int) -> None:
        """Once for all processes: item i read again by a plain index while set_epoch was never called is the very
        crop it gave before: a loop of one's own that forgot set_epoch trains on the same crops every epoch."""
        cells = self._reads
        # one frozen crop per image, or an unaugmented (validation) read: no epoch would change it
        if cells[READ_TOLD] or not self.augment or not (self.pages or self.config.variants > 1):
            return
        if cells[READ_SEEN + i] and not cells[READ_WARNED] and self._first_to_warn():
            # one line (no source line under it), from wherever the reads come: a DataLoader worker or this process
            warnings.warn_explicit(f"item {i} was read again at epoch {self.epoch}, the very crop it gave before: call "
                                   f"dataset.set_epoch(epoch) before each epoch for new crops (east_cache.Loader does "
                                   f"it by itself)", SameCropsWarning, "east_cache.CacheDataset", 0)
        cells[READ_SEEN + i] = 1

    def _first_to_warn(self) -> bool:
        """Whether this process is the one that warns: the flag tested and set under the lock it shares."""
        with self._warn_lock or contextlib.nullcontext():
            first = not self._reads[READ_WARNED]
            self._reads[READ_WARNED] = 1
        return bool(first)

    def quads(self, i: int, variant: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (P, 2) float32, offsets (N + 1,) int64, care (N,) uint8) of item i's words (of variant, default
        the current epoch's), in crop px: word k is points[offsets[k]:offsets[k + 1]], care 1 legible, 0 don't-care."""
        i, copy = self._item(self.epoch, self._index(i))
        bound = Bound(least=0, below=self.config.variants, note="the cache's variants")
        variant = self.variant(i, copy=copy) if variant is None else check_number("variant", variant, bound)
        if self.pages:   # the words of this epoch's crop
            return self.cropper.crop_words(i, variant, self.epoch, copy)
        return self.stored_quads(i, variant)

    def _warn_unshared(self) -> None:
        """Once per process: a DataLoader worker holding a pickled copy (not forked) cannot see set_epoch."""
        if get_worker_info() is not None and not self._warned:
            self._warned = True
            warnings.warn("CacheDataset in a DataLoader worker that was not forked (spawn or forkserver): "
                          "set_epoch in the training process does not reach it, so with persistent_workers=True "
                          "every epoch reads the same crops; use east_cache.Loader, or give the DataLoader "
                          "sampler=EpochSampler(...), whose keys carry the epoch", RuntimeWarning, stacklevel=3)

    def __getstate__(self):
        state = super().__getstate__()
        state["_epoch"], state["_epoch_shared"] = np.array([self.epoch], np.int64), False
        state["_warn_lock"] = None   # a lock pickles only to a process it starts; the copy's reads are its own
        return state

    def decode_on_device(self, on: bool = True) -> None:
        """Compact crops of a jpeg page cache carry their JPEG streams (JPEG_STREAMS) for reader/expand.py to decode
        where the batch goes (nvJPEG on a CUDA device), instead of pixels decoded where the batch is written; nothing
        for other caches."""
        if self.compact and self.jpeg:
            self.cropper.decode_on_device(on)
            self.fields = (JPEG_STREAMS if on else JPEG_BLOCK, *self.fields[1:])

    def table_rows(self) -> int:
        """The most legible words any page of the cache holds: the rows a compact crop's word table can have
        (0 where items carry no word table: not compact)."""
        return self.cropper.table_rows() if self.compact else 0


class SameCropsWarning(UserWarning):
    """A CacheDataset read the same items again without set_epoch: each read gives the same crop."""


def shared_cells(n: int) -> np.ndarray:
    """n uint8 cells, zero, in anonymous shared memory: a process forked later reads and writes the same ones."""
    return np.frombuffer(mmap.mmap(-1, max(1, n)), np.uint8, n)


def shared_int(value: int = 0) -> np.ndarray:
    """An int64 (1,) array in anonymous shared memory: a process forked later reads what this one writes."""
    cell = np.frombuffer(mmap.mmap(-1, mmap.PAGESIZE), np.int64, 1)
    cell[0] = value
    return cell


class SliceItems(list):
    """A batch's items that are adjacent rows of one file, with those rows as one structured slice (`rows`)."""

    def __init__(self, items: list, rows: np.ndarray):
        super().__init__(items)
        self.rows = rows


__all__ = ["CacheDataset", "SameCropsWarning", "SliceItems", "StaleCacheError", "collate"]
