"""A page-mode cache (--crop read) end to end, in both image codecs (raw tiles, JPEG tiles): items are crops of
make_page's pages, new each epoch, the same whoever reads them; the files hold only their pages (packed); an
update copies pages it keeps."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from helpers import cache_bytes, edit_ufo, make_tiny_cache, nudge_first_word, small_config
from torch.utils.data import DataLoader

from east_cache.budget import ByteBudget
from east_cache.reader import CacheDataset, collate, make_sampler
from east_cache.reader import pages as pages_module
from east_cache.reader.crop import crop_page, legible_boxes
from east_cache.reader.expand import expand_batch
from east_cache.ingest.ufo import load_splits
from east_cache.sample.crop_draw import epoch_crop, grid_step
from east_cache.build.run import build_cache
from east_cache.store.formats.packed import ALIGN, HEAD_VALUES
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_jpeg import codec_of
from east_cache.store.page_record import Page


def build(data, out, **over):
    return build_cache(small_config(**{"variants": 2, **over}), [data], out, jobs=1, quiet=True)


@pytest.fixture(scope="module", params=["raw", "jpeg"])
def cache(sample_root, tmp_path_factory, request):
    out = tmp_path_factory.mktemp(f"pages-{request.param}") / "c"
    build(sample_root, out, image_codec=request.param)
    return out


def test_the_manifest_records_page_mode_and_the_codec(cache):
    m = Manifest.load(cache)
    assert m.config.crop == "read" and m.spec.kind.packed and m.spec.kind.page_codec == m.config.image_codec
    assert m.codec_reason == "chosen with --image-codec"
    assert ("maps" in m.spec.kind.names) == (m.config.image_codec == "raw"), "jpeg pages store no maps"


def test_items_are_crops_of_the_pages_make_page_makes(cache, sample_root):
    ds = CacheDataset(cache)
    recs, _ = load_splits([sample_root], "train", ds.config)
    c = ds.config
    for epoch in (0, 3):
        ds.set_epoch(epoch)
        for i in (0, 2, 4):
            v = ds.variant(i)
            page = Page.make(recs[i], c, v, codec_of(c))
            origin, cut = epoch_crop(c.seed, epoch, recs[i].name, v, legible_boxes(page), page.size, c.input_size,
                                     grid_step(c.map_scale), page.weight)
            want, got = crop_page(page, origin, cut, c.input_size, c.map_scale), ds[i]
            for k in ("image", "score", "geo", "roi"):
                assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), (epoch, i, k)


@pytest.mark.slow
@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_the_reader_draws_origins_on_every_even_map_pixel_and_only_there(map_scale, tiny_data, tmp_path):
    """The grid rule, from the origins the reader draws: each is an even number of map px (the image and the maps
    cut at the same place, np.around's half-to-even rounding the same before and after the shift), and every
    even number is one it can draw (the finest such grid): 2 map px, 4 page px at x0.5 and 8 at x0.25."""
    ds = CacheDataset(make_tiny_cache(tiny_data, tmp_path / "c", map_scale=map_scale))
    origins = np.array([ds.cropper.crop_origin(i, 0, epoch)[0] for epoch in range(60) for i in range(len(ds))])
    in_map_px = origins * map_scale
    assert np.all(in_map_px % 2 == 0), f"origins off the even map pixels: {np.unique(in_map_px)}"
    assert np.any(in_map_px % 4 == 2), f"a grid coarser than 2 map px: {np.unique(in_map_px)}"


@pytest.mark.slow
def test_kept_maps_patches_give_the_crops_made_afresh(cache):
    """A reader keeps each page's maps patch per set of cut words and cuts every later crop's patch out of it:
    over many epochs, its crops (both item forms) equal those made from the page with nothing kept."""
    ds, compact = CacheDataset(cache), CacheDataset(cache, compact=True)
    c, reused = ds.config, 0
    for epoch in range(12):
        ds.set_epoch(epoch)
        compact.set_epoch(epoch)
        for i in range(len(ds)):
            v = ds.variant(i)
            page = ds.cropper.page(i, v)
            origin, cut = ds.cropper.crop_origin(i, v, epoch)
            kept = ds.cropper.page_words(i, v, page).patches
            reused += cut.any() and np.flatnonzero(cut).tobytes() in kept
            want = crop_page(page, origin, cut, c.input_size, c.map_scale)
            got = ds[i]
            for k in ("image", "score", "geo", "roi"):
                assert got[k].tobytes() == want[k].tobytes(), (epoch, i, k)
            got = expand_batch(collate([compact[i]]))
            for k in ("image", "score", "roi"):
                assert got[k][0].numpy().tobytes() == want[k].tobytes(), (epoch, i, k)
            assert torch.equal(got["geo"][0].half(), torch.from_numpy(want["geo"]))
    assert reused > 5 or c.image_codec == "jpeg", "the test must see kept patches used again (jpeg pages draw maps)"


def test_each_epoch_draws_its_own_crop_and_draws_it_again(cache):
    ds = CacheDataset(cache)
    seen = set()
    for epoch in range(6):
        ds.set_epoch(epoch)
        a, b = ds[1], ds[1]
        assert a["image"].tobytes() == b["image"].tobytes()
        seen.add(a["image"].tobytes())
    assert len(seen) >= 5, "a new crop every epoch"


def test_crops_do_not_depend_on_workers_or_order(cache):
    ds = CacheDataset(cache)
    ds.set_epoch(2)
    forward = [ds[i]["image"].tobytes() for i in range(len(ds))]
    backward = [ds[i]["image"].tobytes() for i in reversed(range(len(ds)))][::-1]
    assert forward == backward

    def batches(workers):
        sampler = make_sampler(ds, 2, shuffle=True, seed=0)
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=2, sampler=sampler, num_workers=workers, collate_fn=collate)
        return [{k: v.numpy().tobytes() for k, v in b.items()} for b in loader]
    assert batches(0) == batches(2)


def test_the_words_of_an_item_are_those_of_its_crop(cache):
    ds = CacheDataset(cache)
    ds.set_epoch(1)
    for i in range(len(ds)):
        item, (points, offsets, care) = ds[i], ds.quads(i)
        s = ds.config.input_size
        for k in np.flatnonzero(care):
            quad = points[offsets[k]:offsets[k + 1]]
            assert np.all(quad >= 0) and np.all(quad <= s), "a legible word of a crop lies whole in it"
        assert item["score"].any() == bool(care.any())


def test_page_files_hold_only_their_pages(cache):
    """A packed file is its pages' used bytes back to back (a bucket stores no holes): its size is what the manifest
    records, and no more than the pages' own bytes plus the npy header, the index and each field's alignment."""
    m = Manifest.load(cache)
    ds = CacheDataset(cache)
    assert not [p.name for p in (cache / "data").iterdir() if p.name.endswith(".tmp")], "no staging file is left"
    for f, entry in enumerate(m.files):
        path = data_path(cache, entry.name)
        records = ds.file_records(f)
        used = sum(a.nbytes for r in range(len(records)) for a in records[r].values())
        fields = entry.rows * len(m.spec.kind.names)
        assert os.path.getsize(path) == entry.bytes
        assert used < entry.bytes <= used + 128 + 8 * (HEAD_VALUES + 2 * fields) + ALIGN * (fields + 1)
        if hasattr(os.stat_result, "st_blocks"):
            assert os.stat(path).st_blocks * 512 <= entry.bytes + 4096, "nothing but the file's bytes on disk"


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_pages_packed_by_the_kernel_and_through_the_process_are_the_same_file(sample_root, tmp_path, codec,
                                                                              monkeypatch):
    """pack copies each field file to file (os.copy_file_range) where it can, else writes it from the staging file's
    map: the same bytes; in worker processes too, whose staging rows are left unsynced."""
    from east_cache.store.formats import packed
    kernel, process = tmp_path / "kernel", tmp_path / "process"
    build(sample_root, kernel, strategy="chunked", chunk_size=3, image_codec=codec)
    build_cache(small_config(**{"variants": 2, "strategy": "chunked", "chunk_size": 3, "image_codec": codec}),
                [sample_root], tmp_path / "workers", jobs=2, quiet=True)
    monkeypatch.setattr(packed, "_copy_in_kernel", lambda *a: False)
    build(sample_root, process, strategy="chunked", chunk_size=3, image_codec=codec)
    assert cache_bytes(kernel) == cache_bytes(process) == cache_bytes(tmp_path / "workers")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_an_update_copies_the_pages_it_keeps(data_copy, tmp_path, codec):
    out, fresh = tmp_path / "c", tmp_path / "fresh"
    build(data_copy, out, strategy="chunked", chunk_size=3, image_codec=codec)
    edit_ufo(data_copy, nudge_first_word)
    r = build(data_copy, out, strategy="chunked", chunk_size=3, image_codec=codec)
    assert r.computed == 2 and r.copied > 0
    build(data_copy, fresh, strategy="chunked", chunk_size=3, image_codec=codec)
    assert cache_bytes(out) == cache_bytes(fresh)


def test_build_and_info_print_coverage_and_warn_about_upscaling(sample_root, tmp_path, capsys):
    from east_cache.cli import main
    out = tmp_path / "c"
    args = ["build", "--data", str(sample_root), "--out", str(out), "--image-size", "384", "--input-size", "96",
            "--jobs", "1"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "coverage: legible words seen whole in a training crop:" in err and "after 50 epochs" in err
    assert "warning: --image-size 384 enlarges 100% of the images by more than 1.25x" in err
    assert main(["info", str(out), "--epochs", "7"]) == 0
    printed = capsys.readouterr().out
    assert "crops      read: pages cached" in printed and "after 7 epochs" in printed
    with pytest.raises(SystemExit) as refused:   # argparse refuses it (tests/test_numbers.py has the line)
        main(["info", str(out), "--epochs", "0"])
    assert refused.value.code == 2


def test_compact_items_expand_to_the_full_items(cache):
    """train.py's loader: compact crops (image, maps, word table), score and geometry rebuilt where the batch is."""
    full, compact = CacheDataset(cache), CacheDataset(cache, compact=True)
    idx = list(range(len(full)))
    for epoch in (0, 5):
        full.set_epoch(epoch)
        compact.set_epoch(epoch)
        want, got = collate(full.__getitems__(idx)), expand_batch(collate(compact.__getitems__(idx)))
        assert set(got) == {"image", "score", "geo", "roi"} and got["geo"].dtype == torch.float32
        for k in ("image", "score", "roi"):
            assert torch.equal(got[k], want[k]), k
        assert torch.equal(got["geo"].half(), want["geo"])


def test_pages_past_the_kept_budget_give_the_same_crops(cache, monkeypatch):
    """A reader keeps each page's crop draw while ByteBudget.PAGE_WORDS lasts; past it, the same crops."""
    def items(ds):
        out = []
        for epoch in (1, 7):
            ds.set_epoch(epoch)
            out += [ds[i] for i in range(len(ds))]
        return out
    kept = CacheDataset(cache, compact=True)
    want = items(kept)
    monkeypatch.setattr(ByteBudget, "PAGE_WORDS", 0)
    fresh = CacheDataset(cache, compact=True)
    for a, b in zip(want, items(fresh), strict=True):
        a, b = collate([a]), collate([b])   # a compact crop's maps patch is applied by collate
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert kept.cropper._words and not fresh.cropper._words


def test_a_reader_asks_to_map_a_page_in_when_it_first_reads_it(cache, monkeypatch):
    """The first read of a page asks the kernel to map all of the page's stored bytes in (pages.map_in: one
    madvise range per field, covering it exactly from its memory page's start), once per page and process, and
    only where the cache fits in half the memory. What the kernel then does (page faults) is the benchmark's to
    count: a shared machine reclaims pages on its own."""
    import mmap
    calls = []
    monkeypatch.setattr(pages_module, "map_in", lambda data, arrays: calls.append((data, arrays)))
    ds = CacheDataset(cache)
    ds.cropper._fits = True
    ds.cropper.page(0, 0)
    ds.cropper.page(0, 0)
    assert len(calls) == 1
    data, arrays = calls[0]
    f, r = ds.locate(0, 0)
    assert data is ds.file_records(f).data
    fields = list(ds.file_records(f)[r].values())
    assert [(a.ctypes.data, a.nbytes) for a in arrays] == [(a.ctypes.data, a.nbytes) for a in fields]
    ds.cropper.page(1, 0)
    assert len(calls) == 2
    ds = CacheDataset(cache)
    ds.cropper._fits = False   # a cache larger than half the memory: pages are faulted in as crops touch them
    ds.cropper.page(0, 0)
    assert len(calls) == 2

    page_size = mmap.PAGESIZE
    buf = np.frombuffer(mmap.mmap(-1, 8 * page_size), np.uint8)   # a map: its first byte is page-aligned
    base = buf.ctypes.data
    arrays = [buf[100:100 + 3 * page_size], buf[5 * page_size:6 * page_size], buf[7:7]]
    assert pages_module.populate_ranges(base, arrays) == [(0, 100 + 3 * page_size), (5 * page_size, page_size)]
