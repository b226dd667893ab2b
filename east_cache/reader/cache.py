"""CacheDataset: the cache's records as a torch Dataset, read through the store's file formats.

Item i at epoch e is variant (e + offset_i) mod K of image i (images in name order), so every
epoch sees each image once and the K cached augmentations rotate. In a page-mode cache (--crop read)
the item is a crop of that variant's page, drawn anew every epoch (east_cache/reader/crop.py). Files are opened lazily in
whichever process reads them (DataLoader workers included); no open map or reader is pickled.

Nothing is trusted unchecked: opening a cache validates the manifest and every file's header and size
(store/integrity.py), so a damaged cache is refused with one error naming the file and the repair, not met
mid-epoch. A file opened before a rebuild replaces it keeps its old contents (its memory map holds the old
inode); one first opened after the manifest was replaced stops the run with a message saying so.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from east_cache.reader.collate import collate
from east_cache.reader.crop import (
    PageWords,
    crop_page,
    crop_page_compact,
    crop_words,
    page_words,
    words_bytes,
)
from east_cache.errors import CacheError
from east_cache.budget import ByteBudget
from east_cache.sample.crop_draw import epoch_crop, grid_step
from east_cache.store.fingerprint import build_fingerprint
from east_cache.store.format import CROP, MANIFEST, PAGE, record_spec
from east_cache.store.integrity import check_files
from east_cache.store.manifest import Manifest, data_path, repair_hint, update_command
from east_cache.store.page_record import CROP_IN_BLOCK, IMAGE_BLOCK, MAPS_BLOCK, WORD_TABLE, Page, block_bytes
from east_cache.store.sidecar import load_sidecar, row_quads, row_words
from east_cache.store.stale import check_stale


class StaleCacheError(CacheError):
    """The source data changed since the cache was built."""


class CacheDataset(Dataset):
    def __init__(self, cache_dir, in_memory: bool = False, check_stale: bool = True, compact: bool = False):
        """compact (page-mode caches): items hold image, maps and a word table (east_cache/reader/crop.py
        crop_page_compact) for dataset.expand_batch to turn into score, geo and roi where the batch is (the
        device): a loader then copies 2 bytes per map pixel instead of 8 and rebuilds no geometry on the CPU."""
        self.cache_dir = Path(cache_dir)
        self._stamp = _manifest_stamp(self.cache_dir)
        self.manifest = Manifest.load(self.cache_dir)
        check_files(self.manifest, self.cache_dir)
        if check_stale:
            _raise_if_stale(self.cache_dir, self.manifest)
        self.config = self.manifest.config
        self.fingerprint = self.manifest.build_fingerprint
        self.names = sorted(self.manifest.images)
        self.files = [f.name for f in self.manifest.files]
        self.spec = self.manifest.spec
        self.dtype = self.spec.dtype
        self.pages = self.spec.kind.name == PAGE.name   # --crop read: records are pages, items crops of them
        # what an item holds, as one structured record: a crop record, whichever kind is stored
        self.item_dtype = record_spec(self.config, CROP).dtype if self.pages else self.dtype
        self.compact = compact and self.pages
        self.fields = (IMAGE_BLOCK, CROP_IN_BLOCK, MAPS_BLOCK, WORD_TABLE) if self.compact else self.item_dtype.names
        # bytes an item delivers (a compact crop: its blocks of image and maps tiles; its word table is a few
        # hundred more)
        self.item_bytes = block_bytes(self.config) if self.compact else self.item_dtype.itemsize
        self._pages: dict[tuple[int, int], Page] = {}   # page mode: each page's views, made on its first crop
        self._words: dict[tuple[int, int], PageWords] = {}   # per page, derived on its first crop in this process
        self._budgets = _budgets()   # what the pages' kept words, patches and best origins may still take here
        self.layout = self.manifest.layout
        self.epoch = 0
        self.offsets = self.layout.variant_offsets(self.names, self.config.seed)
        self._format = self.manifest.format
        self._records: list = [None] * len(self.files)
        self._quads: dict[int, dict] = {}
        self._table_rows: int | None = None
        self._fits: bool | None = None   # the data files fit in half the memory (_fits_in_memory), once asked
        self._pid = os.getpid()
        if in_memory:  # read every file into RAM once; forked workers share the pages copy-on-write
            self._records = [self._format.open(self._path(f), self.spec, in_memory=True) for f in range(len(self.files))]

    def __len__(self) -> int:
        return len(self.names)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def variant(self, i: int) -> int:
        return (self.epoch + int(self.offsets[i])) % self.config.variants

    def locate(self, i: int, variant: int) -> tuple[int, int]:
        """(file index, row) of image i's variant."""
        return self.layout.locate(i, variant)

    def record(self, i: int, variant: int):
        """Image i's variant as stored: a structured record, its fields by name (rec["image"]), rec.tobytes()
        its bytes. Whatever the epoch."""
        f, r = self.locate(i, variant)
        return self.file_records(f)[r]

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if self.pages:
            v = self.variant(i)
            page = self.page(i, v)
            cut = crop_page_compact if self.compact else crop_page
            return cut(page, *self.crop_origin(i, v, page), self.config.input_size, self.config.map_scale,
                       self.page_words(i, v, page))
        rec = self.record(i, self.variant(i))
        return {k: rec[k] for k in self.fields}

    def page(self, i: int, variant: int) -> Page:
        """Image i's page at a variant (page-mode caches): views of its record, its words from the sidecar; kept
        per page in this process where they are views of a memory map or of a file read whole (they cost nothing,
        making them again does), not where a format's reader returns a copy."""
        f, r = self.locate(i, variant)
        if self._pid != os.getpid():   # forked: the kept views are of the parent's maps
            self._pages = {}
        page = self._pages.get((f, r))
        if page is not None:
            return page
        rec = self.file_records(f)[r]
        points, offsets, care = row_quads(self._sidecar(f), r)
        weight = row_words(self._sidecar(f), r)["weight"][care > 0]
        page = Page.from_fields(rec["image"], rec["maps"], rec["size"], points, offsets, care, weight,
                                self.config.map_scale)
        if isinstance(self._records[f], np.ndarray):
            self._pages[(f, r)] = page
            if self._fits_in_memory():
                map_in(self._records[f], [page.image.tiles, page.maps.tiles])
        return page

    def _fits_in_memory(self) -> bool:
        """Whether the cache's data files take at most half of this machine's memory (blocks on disk: page files
        are sparse), so that its pages stay in the page cache once read."""
        if self._fits is None:
            try:
                memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
                data = sum(os.stat(self._path(f)).st_blocks * 512 for f in range(len(self.files)))
                self._fits = data <= memory // 2
            except (OSError, ValueError, AttributeError):   # no such sysconf name, or st_blocks, here
                self._fits = False
        return self._fits

    def crop_origin(self, i: int, variant: int, page: Page | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(origin (x, y) page px, legible words cut) of image i's crop at this epoch (page-mode caches): drawn
        from (seed, epoch, image name, variant) alone, whoever reads it."""
        page = self.page(i, variant) if page is None else page
        c = self.config
        words = self.page_words(i, variant, page)
        return epoch_crop(c.seed, self.epoch, self.names[i], variant, words.boxes, page.size, c.input_size,
                          grid_step(c.map_scale), page.weight, words.draw)

    def page_words(self, i: int, variant: int, page: Page) -> PageWords:
        """Image i's page's word boxes, polygons and window draw (crop.page_words): derived once per page and
        process, since every epoch draws from the same page, while ByteBudget.PAGE_WORDS lasts; a page past that
        derives what its crop needs each time (the same crop, drawn without the kept cut counts)."""
        key = self.locate(i, variant)
        words = self._words.get(key)
        if words is not None:
            return words
        c = self.config
        words_budget, patches, best = self._budgets
        if words_budget.spent:
            return page_words(page, c.input_size, c.map_scale, draw=False)
        words = self._words[key] = page_words(page, c.input_size, c.map_scale, patches=patches, best=best)
        words_budget.spend(words_bytes(words))
        return words

    def __getitems__(self, indices: list[int]) -> list[dict[str, np.ndarray]]:
        """A batch's items (views, nothing copied yet). When their rows are adjacent in one file (the batch
        strategy under BlockSampler), the list also carries them as one slice, which collate copies in one
        read per field; any other collate sees a plain list of items."""
        if self.pages:   # every crop is computed anew: no rows to copy in one read
            return [self[i] for i in indices]
        where = [self.locate(i, self.variant(i)) for i in indices]
        f0, r0 = where[0]
        if all(f == f0 and r == r0 + k for k, (f, r) in enumerate(where)):
            rows = self.file_records(f0)[r0:r0 + len(indices)]
            return Rows([{k: rec[k] for k in self.fields} for rec in rows], rows)
        return [self[i] for i in indices]

    def table_rows(self) -> int:
        """The most legible words any page of the cache holds: the rows a compact crop's word table can have
        (0 where items carry no word table: not compact). Read from the word sidecars once per process."""
        if not self.compact:
            return 0
        if self._table_rows is None:
            most = 0
            for f in range(len(self.files)):
                sidecar = self._sidecar(f)
                legible = np.concatenate([[0], np.cumsum(sidecar["care"] > 0)])
                starts = sidecar["sample_offsets"]
                most = max(most, int((legible[starts[1:]] - legible[starts[:-1]]).max(initial=0)))
            self._table_rows = most
        return self._table_rows

    def quads(self, i: int, variant: int | None = None):
        """(points (P,2) float32, offsets (N+1,) int64, care (N,) uint8) of a sample's words, in crop pixels."""
        variant = self.variant(i) if variant is None else variant
        if self.pages:   # the words of this epoch's crop, in crop pixels
            page = self.page(i, variant)
            origin, cut = self.crop_origin(i, variant, page)
            return crop_words(page, origin, cut, self.config.input_size)
        f, r = self.locate(i, variant)
        return row_quads(self._sidecar(f), r)

    def _sidecar(self, f: int) -> dict:
        if f not in self._quads:
            self._quads[f] = self._opened(f, lambda: load_sidecar(self._path(f), self.manifest.files[f].rows))
        return self._quads[f]

    def file_records(self, f: int):
        """File f's records ([row] a record, [a:b] an array of them): a memory map, a format's reader, or an
        array read whole (in_memory). Opened on first use in this process."""
        if self._pid != os.getpid():  # forked: open our own maps rather than share the parent's
            self._records, self._pid = self._closed(), os.getpid()
        records = self._records[f]
        if records is None:
            records = self._records[f] = self._opened(f, lambda: self._format.open(self._path(f), self.spec))
        return records

    def _opened(self, f: int, open_it):
        """open_it(), or a CacheError that says what happened to file f since the cache was opened and checked."""
        try:
            return open_it()
        except (OSError, ValueError, EOFError) as e:   # CacheError is a ValueError
            if _manifest_stamp(self.cache_dir) != self._stamp:
                raise CacheError(f"{self.cache_dir}: the cache was rebuilt while this run read it ({self.files[f]} "
                                 f"is no longer what its manifest said); start the run again") from None
            raise CacheError(f"{self.cache_dir}: data file {self.files[f]}: {e}. "
                             f"{repair_hint(self.cache_dir, self.manifest)}") from None

    def open_files(self) -> dict[int, str]:
        """The files this process holds open, by index: "ram" (read whole, in_memory) or "lazy" (a memory map or
        a reader). A pickled Dataset carries only its "ram" files."""
        return {f: "ram" if type(m) is np.ndarray else "lazy" for f, m in enumerate(self._records) if m is not None}

    def _path(self, f: int) -> Path:
        return data_path(self.cache_dir, self.files[f])

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_records"], state["_quads"] = self._closed(), {}
        state["_pages"], state["_words"], state["_budgets"] = {}, {}, _budgets()   # made again by whoever reads
        return state

    def _closed(self) -> list:
        """Loaded (in_memory) arrays stay; memory maps and readers are reopened by whoever uses them next."""
        return [m if type(m) is np.ndarray else None for m in self._records]


def _budgets() -> tuple[ByteBudget, ByteBudget, ByteBudget]:
    """A process's budgets for its pages' kept words, maps patches and draws' best origins."""
    return ByteBudget(ByteBudget.PAGE_WORDS), ByteBudget(ByteBudget.MAPS_PATCHES), ByteBudget(ByteBudget.BEST_ORIGINS)


class Rows(list):
    """Items of adjacent rows of one file, with those rows as one structured slice (`rows`)."""

    def __init__(self, items: list, rows: np.ndarray):
        super().__init__(items)
        self.rows = rows


def _manifest_stamp(cache_dir: Path) -> tuple | None:
    """Which manifest file is in place: a rebuild renames a new one over it."""
    try:
        st = os.stat(cache_dir / MANIFEST)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


MADV_POPULATE_READ = 22   # madvise(2), Linux 5.14 and later (Python's mmap module does not name it)


def map_in(records, arrays: list[np.ndarray]) -> None:
    """Map the pages of the file that hold `arrays` (views of the memory-mapped `records`) into this process's
    page table now, one call per array (populate_ranges), instead of fault by fault as crops first touch them,
    epoch after epoch. Reads what is not in the page cache yet. Nothing where the records are not a memory map
    or the kernel does not know the call."""
    mm = getattr(records, "_mmap", None)
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


def _raise_if_stale(cache_dir: Path, manifest: Manifest) -> None:
    if manifest.build_fingerprint != build_fingerprint(manifest.config):
        raise StaleCacheError(f"{cache_dir}: its build fingerprint is not the one its config gives with this code: "
                              f"it was made by other sample-making code or another cache format, or its manifest "
                              f"was edited, so its samples are not what this code makes. Rebuild it with: "
                              f"{update_command(manifest, cache_dir)}, or pass --rebuild to train.py")
    st = check_stale(manifest)
    if st.stale:
        raise StaleCacheError(f"{cache_dir}: the cache is stale: {st.describe()}. Update it with: "
                              f"{update_command(manifest, cache_dir)} (only changed images are redone), "
                              f"or pass --rebuild to train.py")


__all__ = ["CacheDataset", "Rows", "StaleCacheError", "collate"]
