"""PageCropper: the crops of a page-mode cache (--crop read), made from its records by one reading process.

Item i at epoch e is a crop of page (image i, variant v). A page stored resized only (--geometry read) gets the
epoch's height, rotation, scale, perspective and crop under the reader's Augment (east_cache/augment.py;
sample/epoch_geometry.py) and is warped and its targets made by
east_cache/reader/warped.py; a page stored warped gets the epoch's origin (crop_draw.epoch_crop) and is cut out of
its record (east_cache/reader/crop.py). Either draw comes from (seed, e, image name, v) alone, whoever reads it.
Every epoch draws from the same pages, so a process keeps what it derives from each of them, within its
ByteBudgets: the page's views of its record (they cost nothing; making them again does), its words' boxes,
polygons, word table and crop draw (crop.PageWords), and the maps patches of the word sets its crops cut. Where
the cache fits in half the memory, a page's stored bytes are mapped into the process at its first read (map_in),
not fault by fault as the next epochs' crops touch them. A jpeg page's crop is decoded from the tiles it covers
(or, for the device to decode, handed out as their streams: decode_on_device) and its maps drawn from its words.
"""
from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np

from east_cache.augment import Augment
from east_cache.budget import ByteBudget
from east_cache.reader.crop import PageWords, crop_page, crop_page_compact, crop_words, page_words, words_bytes
from east_cache.reader.jpeg_device import streams_capacity
from east_cache.reader.records import RecordReader
from east_cache.reader.transform import CropTransform, CropWords, crop_seed
from east_cache.reader.warped import warped_crop, warped_words
from east_cache.sample.crop_draw import epoch_crop, grid_step, word_weights
from east_cache.sample.epoch_geometry import EpochGeometry, epoch_geometry, quad_boxes, weights_side
from east_cache.sample.page import warped_frames
from east_cache.store.formats.packed import check_extent
from east_cache.store.page_jpeg import JPEG_TILE_PX, codec_of
from east_cache.store.page_record import Page, block_tiles
from east_cache.store.sidecar import row_words

MADV_POPULATE_READ = 22   # madvise(2), Linux 5.14 and later (Python's mmap module does not name it)


class PageCropper:
    """Crops of the pages `records` holds, as items: compact (crop_page_compact: blocks of tiles, maps patch and
    word table, for the device to expand) or not (crop_page: image, score, geo, roi)."""

    def __init__(self, records: RecordReader, compact: bool, aug: Augment | None = None):
        self.records, self.compact = records, compact
        c = records.config
        self.map_scale, self.step, self.seed = c.map_scale, grid_step(c.map_scale), c.seed
        self.set_aug(Augment.of_cache(c) if aug is None else aug)
        self.codec = codec_of(c)
        self.warps = c.warps_at_read   # pages stored resized only: each epoch's warp drawn here (reader/warped.py)
        self.augment = True   # False: unwarped crops, the same every epoch (a validation set's)
        self.transform: CropTransform | None = None   # a user's transform of each augmented crop (reader/transform.py)
        self.transform_seed = self.seed   # the seed its draws come from with (epoch, image name, variant): the run's
        self.streams: int | None = None   # jpeg pages for the device to decode: the bytes of a crop's streams field
        self._reset()
        self._table_rows: int | None = None
        self._fits: bool | None = None   # the data files fit in half the memory (fits_in_memory), once asked

    def set_aug(self, aug: Augment) -> None:
        """Draw by aug from now on, its fields left to the cache at the cache's values (Augment.resolve; a cache
        whose pages are stored warped takes only its build's: check_frozen)."""
        aug = aug.resolve(self.records.config)
        aug.check_frozen(self.records.config, str(self.records.where))
        self.aug, self.size = aug, aug.input_size
        self._weights: dict[tuple[int, int], np.ndarray] = {}

    def _reset(self) -> None:
        """Forget what this process keeps of its pages (a pickled cropper's reader derives its own)."""
        # per file: (the records its pages are views of, {row: page}); pages over other records are not kept
        self._pages: dict[int, tuple[object, dict[int, Page]]] = {}
        self._words: dict[tuple[int, int], PageWords] = {}   # per (file, row), derived on the page's first crop
        self._words_budget = ByteBudget(ByteBudget.PAGE_WORDS)
        self._patches_budget = ByteBudget(ByteBudget.MAPS_PATCHES)
        self._best_budget = ByteBudget(ByteBudget.BEST_ORIGINS)

    def crop(self, i: int, variant: int, epoch: int, copy: int = 0) -> dict[str, np.ndarray]:
        """The item of image i's page at a variant, at an epoch (CacheDataset.__getitem__ says what it holds); copy k
        >= 1: the image's k-th extra item of the epoch (a run's repeat), another crop (crop_draw.crop_rng)."""
        page = self.page(i, variant)
        if self.warps:
            return warped_crop(page, self.geometry(i, variant, epoch, page, copy), self.size, self.map_scale,
                               self.compact, self.crop_transform(i, variant, epoch, copy))
        words = self.page_words(i, variant, page)
        origin, cut = self.crop_origin(i, variant, epoch, page, words, copy)
        if self.compact:
            return crop_page_compact(page, origin, cut, self.size, self.map_scale, words, self.streams)
        return crop_page(page, origin, cut, self.size, self.map_scale, words)

    def crop_transform(self, i: int, variant: int, epoch: int, copy: int = 0):
        """The user's transform (self.transform) of image i's crop at an epoch, seeded by (seed, epoch, image name,
        variant): a function of the crop (S, S, 3), its words (points, offsets, care) and optionally a list for the
        names of the transforms that fired (CropTransform); None where there is none or the crops are not augmented
        (validation)."""
        if self.transform is None or not self.augment:
            return None
        name = self.records.names[i]
        seed = crop_seed(self.transform_seed, epoch, name, variant, copy)
        where = f"image {name} (variant {variant}, epoch {epoch})"
        return lambda image, words, applied=None: self.transform(image, CropWords(*words), seed, where, applied)

    def decode_on_device(self, on: bool) -> None:
        """Compact crops of jpeg pages hand out their blocks' JPEG streams (for reader/expand.py to decode on the
        device) instead of decoding them where they are written; nothing for raw pages."""
        if self.codec.stores_maps or self.warps or not on:   # a warped crop is decoded and warped by the workers
            self.streams = None
            return
        most = max((int(self.records.file_records(f).lengths("image").max(initial=0))
                    for f in range(len(self.records.files))), default=0)
        self.streams = streams_capacity(block_tiles(self.size, JPEG_TILE_PX), most)

    def crop_words(self, i: int, variant: int, epoch: int, copy: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (P, 2) float32 crop px, offsets (N + 1,) int64, care (N,) uint8) of that crop's words: those
        whose box overlaps it, cut legible words as don't-care."""
        page = self.page(i, variant)
        if self.warps:
            return warped_words(page, self.geometry(i, variant, epoch, page, copy), self.size)
        origin, cut = self.crop_origin(i, variant, epoch, page, copy=copy)
        return crop_words(page, origin, cut, self.size)

    def geometry(self, i: int, variant: int, epoch: int, page: Page | None = None, copy: int = 0) -> EpochGeometry:
        """The warp and crop of image i's page at an epoch (--geometry read): drawn from (seed, epoch, image name,
        variant) alone, whoever reads it; without augment, the unwarped crop of epoch 0, every epoch."""
        page = self.page(i, variant) if page is None else page
        return epoch_geometry(self.records.config, epoch if self.augment else 0, self.records.names[i], variant,
                              page.legible_quads(), page.size, self.weights(i, variant, page), self.augment, self.aug,
                              copy if self.augment else 0)

    def weights(self, i: int, variant: int, page: Page) -> np.ndarray:
        """The draw weights of image i's page's legible words for this reader's crop side and mean scale
        (weights_side): the stored ones where they are for that side (config.READER_ONLY: a page stored resized only
        holds weights for the default side), else derived once per page and process (crop_draw.word_weights, in the
        frames of this reader's height jitter and rotation: page.warped_frames)."""
        side, stored = weights_side(self.aug, self.step), self.records.config.stored()
        if (side, self.aug.height_jitter, self.aug.max_rotation) == (stored.input_size, stored.height_jitter,
                                                                     stored.max_rotation):
            return page.weight
        key = self.records.locate(i, variant)
        kept = self._weights.get(key)
        if kept is None:
            quads = page.legible_quads()
            drawn = dataclasses.replace(self.records.config, height_jitter=self.aug.height_jitter,
                                        max_rotation=self.aug.max_rotation)   # the frames this reader warps to
            kept = self._weights[key] = word_weights(quad_boxes(quads), page.size, side, self.step,
                                                     warped_frames(quads, page.size, drawn))
        return kept

    def crop_origin(self, i: int, variant: int, epoch: int, page: Page | None = None,
                    words: PageWords | None = None, copy: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(origin (x, y) page px, legible words cut (L,) bool) of image i's crop at an epoch: drawn from (seed,
        epoch, image name, variant) alone, whoever reads it."""
        page = self.page(i, variant) if page is None else page
        words = self.page_words(i, variant, page) if words is None else words
        return epoch_crop(self.seed, epoch, self.records.names[i], variant, words.boxes, page.size, self.size,
                          self.step, page.weight, words.draw, copy)

    def page(self, i: int, variant: int) -> Page:
        """Image i's page at a variant: views of its record (a packed file's: formats/packed.py), its words from the
        sidecar; kept per page in this process."""
        f, r = self.records.locate(i, variant)
        records = self.records.file_records(f)   # this process's own: opened anew after a fork
        kept = self._pages.get(f)
        if kept is None or kept[0] is not records:
            kept = self._pages[f] = (records, {})
        page = kept[1].get(r)
        if page is not None:
            return page
        fields = records[r]
        points, offsets, care = self.records.stored_quads(i, variant)
        weight = row_words(self.records.sidecar(f), r)["weight"][care > 0]
        where = f"{self.records.path(f)}: image {self.records.names[i]}, variant {variant}"
        check_extent(fields, records.spec, self.map_scale, where)
        page = Page.from_fields(fields["image"], fields.get("maps"), fields["size"], points, offsets, care, weight,
                                self.map_scale, codec=self.codec, where=where)
        kept[1][r] = page
        if self.fits_in_memory():
            map_in(records.data, list(fields.values()))
        return page

    def page_words(self, i: int, variant: int, page: Page) -> PageWords:
        """Image i's page's word boxes, polygons, word table and crop draw (crop.page_words): derived once per page
        and process while ByteBudget.PAGE_WORDS lasts; a page past that derives what its crop needs each time (the
        same crop, drawn without the kept cut counts)."""
        key = self.records.locate(i, variant)
        words = self._words.get(key)
        if words is not None:
            return words
        if self._words_budget.spent:
            return page_words(page, self.size, self.map_scale, draw=False)
        words = self._words[key] = page_words(page, self.size, self.map_scale, patches=self._patches_budget,
                                              best=self._best_budget)
        self._words_budget.spend(words_bytes(words))
        return words

    def table_rows(self) -> int:
        """The most legible words any page of the cache holds: the rows a compact crop's word table can have. Read
        from the word sidecars once per process."""
        if self._table_rows is None:
            most = 0
            for f in self.records.files_read():   # a node's share: the pages it reads
                sidecar = self.records.sidecar(f)
                legible = np.concatenate([[0], np.cumsum(sidecar["care"] > 0)])
                starts = sidecar["sample_offsets"]
                most = max(most, int((legible[starts[1:]] - legible[starts[:-1]]).max(initial=0)))
            self._table_rows = most
        return self._table_rows

    def fits_in_memory(self) -> bool:
        """Whether the cache's data files take at most half of this machine's memory (blocks on disk), so that its
        pages stay in the page cache once read."""
        if self._fits is None:
            try:
                memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
                data = self.records.data_bytes()
                self._fits = data <= memory // 2
            except (OSError, ValueError, AttributeError):   # no such sysconf name, or st_blocks, here
                self._fits = False
        return self._fits

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_pages", "_words", "_words_budget", "_patches_budget", "_best_budget"):
            del state[name]
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._reset()


def map_in(data: np.ndarray, arrays: list[np.ndarray]) -> None:
    """Map the pages of the file that hold `arrays` (views of `data`, its memory-mapped bytes) into this process's
    page table now, one call per array (populate_ranges), instead of fault by fault as crops first touch them,
    epoch after epoch. Reads what is not in the page cache yet. Nothing where data is not a memory map or the
    kernel does not know the call."""
    mm = getattr(data, "_mmap", None)
    if mm is None:
        return
    try:
        base = np.frombuffer(mm, np.uint8, 1).ctypes.data
        for start, length in populate_ranges(base, arrays):
            mm.madvise(MADV_POPULATE_READ, start, length)
    except (OSError, ValueError):   # an older kernel (EINVAL), a closed map
        return


def populate_ranges(base: int, arrays: list[np.ndarray]) -> list[tuple[int, int]]:
    """(start, length) in bytes from the map's first byte at address `base`: one range per non-empty array,
    its start rounded down to a memory page (madvise takes page-aligned starts), ending at the array's end."""
    ranges = []
    for a in arrays:
        if a.nbytes:
            start = a.ctypes.data - base
            aligned = start - start % mmap.PAGESIZE
            ranges.append((aligned, start + a.nbytes - aligned))
    return ranges
