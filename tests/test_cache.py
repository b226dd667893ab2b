"""The cache: one layout per strategy, the same samples in each, and the Dataset over all of them."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cache_bytes, record_bytes, small_config
from torch.utils.data import DataLoader

from east_cache.reader import POOL, BlockSampler, CacheDataset, OnTheFlyDataset, collate
from east_cache.config import STRATEGIES
from east_cache.build.run import build_cache
from east_cache.store.format import FIELDS
from east_cache.store.layout import Layout
from east_cache.store.manifest import Manifest
from east_cache.build.strategy import choose_strategy

REPO = Path(__file__).resolve().parents[1]


def build(data, out, **over):
    """A cache of build-time crops (records read as they are; page mode: tests/test_page_cache.py)."""
    jobs = over.pop("jobs", 1)
    return build_cache(small_config(**{"crop": "build", **over}), [data], out, jobs=jobs, quiet=True)


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    """One cache per strategy over the same data; batch and chunk sizes that leave partial files."""
    root = tmp_path_factory.mktemp("caches")
    for s in STRATEGIES:
        build(sample_root, root / s, strategy=s, batch_size=2, chunk_size=3)
    return root


def test_every_strategy_holds_the_same_samples(caches):
    reference = record_bytes(CacheDataset(caches / "chunked"))
    assert len(reference) == 5 * 2
    assert len(set(reference.values())) == len(reference), "variants and images must differ"
    for s in STRATEGIES:
        assert record_bytes(CacheDataset(caches / s)) == reference, s


def test_file_counts_follow_the_strategy(caches):
    counts = {s: len(Manifest.load(caches / s).files) for s in STRATEGIES}
    assert counts == {"whole": 1, "image": 5, "batch": 2 * 3, "chunked": 4}
    rows = [len(m) for m in Layout("batch", n_images=5, variants=2, batch_size=2, chunk_size=3).members()]
    assert rows == [2, 2, 1, 2, 2, 1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_dataloader_with_workers_returns_the_records(caches, strategy):
    ds = CacheDataset(caches / strategy)
    ds.set_epoch(1)
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate)
    seen = 0
    for b, batch in enumerate(loader):
        assert batch["image"].dtype == torch.uint8 and batch["geo"].dtype == torch.float16
        for j in range(len(batch["image"])):
            item = ds[b * 2 + j]
            for k in FIELDS:
                assert np.array_equal(batch[k][j].numpy(), item[k]), (strategy, k)
            seen += 1
    assert seen == len(ds) == 5


def test_item_shapes_and_epoch_rotation(caches):
    ds = CacheDataset(caches / "image")
    item = ds[0]
    assert item["image"].shape == (3, 96, 96) and item["image"].dtype == np.uint8
    assert item["score"].shape == item["roi"].shape == (1, 48, 48)
    assert item["geo"].shape == (5, 48, 48) and item["geo"].dtype == np.float16
    variants = []
    for e in range(4):
        ds.set_epoch(e)
        variants.append(ds.variant(0))
        assert ds[0]["image"].tobytes() == ds.record(0, ds.variant(0))["image"].tobytes()
    assert variants[0] != variants[1] and variants[0] == variants[2]


def test_batch_strategy_reads_a_batch_as_one_slice(caches):
    ds = CacheDataset(caches / "batch")
    got = ds.__getitems__([2, 3])
    assert isinstance(got.rows, np.ndarray) and got.rows.shape == (2,)
    batch = collate(got)
    assert np.array_equal(batch["image"][1].numpy(), ds[3]["image"])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_torch_default_collate_works_too(caches, strategy):
    """A user's own DataLoader without our collate gets the same batches, one slice or not."""
    ds = CacheDataset(caches / strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the maps are private and writable: torch takes them without a warning
        batch = next(iter(DataLoader(ds, batch_size=2)))
    assert torch.equal(batch["image"][1], torch.from_numpy(ds[1]["image"]))
    assert batch["geo"].dtype == torch.float16 and batch["roi"].shape == (2, 1, 48, 48)


def test_a_write_into_an_item_never_reaches_the_cache(caches):
    """Items are views of a private map: writable, and a write stays in this process."""
    ds = CacheDataset(caches / "image")
    item = ds[0]["image"]
    before = item.copy()
    item[...] = 255 - item
    assert np.array_equal(CacheDataset(caches / "image")[0]["image"], before)
    assert not np.array_equal(ds[0]["image"], before), "this process sees its own write"


@pytest.mark.parametrize("n, block, world", [(10, 4, 1), (10, 4, 2), (10, 4, 3), (8, 2, 2), (3, 8, 2)])
def test_block_sampler_shuffles_whole_blocks_and_splits_them_evenly(n, block, world):
    ranks = [BlockSampler(n, block, seed=1, rank=r, world=world) for r in range(world)]
    for s in ranks:
        s.set_epoch(4)
    orders = [list(s) for s in ranks]
    assert all(len(o) == len(s) for o, s in zip(orders, ranks))
    assert len({-(-len(o) // block) for o in orders}) == 1, "every rank runs the same number of batches"
    assert set().union(*orders) == set(range(n)), "an epoch sees every image"
    for o in orders:
        assert all(len(o[k:k + block]) == block for k in range(0, len(o) - block, block)), "only the last is short"
        for k in range(0, len(o), block):   # each batch is one block: consecutive indices from a block start
            piece = o[k:k + block]
            assert piece[0] % block == 0 and piece == list(range(piece[0], piece[0] + len(piece)))
    epochs = {tuple(BlockSampler(40, 4, seed=1).__iter__()) for _ in range(2)}
    assert len(epochs) == 1, "seeded: the same order for the same epoch"
    later = BlockSampler(40, 4, seed=1)
    later.set_epoch(1)
    assert list(later) != list(BlockSampler(40, 4, seed=1)), "and a new order the next epoch"


@pytest.mark.parametrize("strategy", ["batch", "image"])
def test_batch_buffers_are_reused_only_once_released(caches, strategy):
    ds = CacheDataset(caches / strategy)
    first = collate(ds.__getitems__([0, 1]))
    kept_view = first["image"][1]                 # a view keeps the storage, not the dict or the tensor
    expected = kept_view.clone()
    ptr = first["image"].data_ptr()
    del first
    second = collate(ds.__getitems__([2, 3]))
    assert second["image"].data_ptr() != ptr, "a buffer still viewed was handed out again"
    assert torch.equal(kept_view, expected)
    assert np.array_equal(second["image"][0].numpy(), ds[2]["image"])
    del kept_view, second
    pooled = POOL.pooled((2, 3, 96, 96), np.uint8)
    third = collate(ds.__getitems__([0, 1]))
    assert POOL.pooled((2, 3, 96, 96), np.uint8) == pooled, "a free buffer was not reused"
    assert np.array_equal(third["image"][1].numpy(), ds[1]["image"])


def test_in_memory_equals_mmap(caches):
    a, b = CacheDataset(caches / "chunked"), CacheDataset(caches / "chunked", in_memory=True)
    assert set(b.open_files().values()) == {"ram"} and len(b.open_files()) == len(b.files)
    for i in range(len(a)):
        for k in FIELDS:
            assert np.array_equal(a[i][k], b[i][k])


def test_quads_are_kept_in_crop_coordinates(caches):
    ds = CacheDataset(caches / "whole")
    total_care = 0
    for i in range(len(ds)):
        for v in range(2):
            points, offsets, care = ds.quads(i, v)
            assert offsets[0] == 0 and offsets[-1] == len(points) and len(care) == len(offsets) - 1
            total_care += int(care.sum())
            if care.any():  # legible words are drawn in this sample's score map
                assert ds.record(i, v)["score"].any()
    assert total_care > 0


def test_on_the_fly_dataset_makes_the_cached_samples(caches, sample_root):
    cached = CacheDataset(caches / "image")
    fly = OnTheFlyDataset([sample_root], config=cached.config)
    for i in (0, 3):
        for k in FIELDS:
            assert np.array_equal(fly[i][k], cached[i][k]), k


@pytest.mark.slow
def test_jobs_1_and_2_write_identical_files(sample_root, tmp_path):
    build(sample_root, tmp_path / "j1", strategy="chunked", chunk_size=3, jobs=1)
    build(sample_root, tmp_path / "j2", strategy="chunked", chunk_size=3, jobs=2)
    assert cache_bytes(tmp_path / "j1") == cache_bytes(tmp_path / "j2")


@pytest.mark.parametrize("n,ram,expected", [
    (100, 64 << 30, "whole"),         # 0.3 GiB of samples, lots of RAM
    (2000, 4 << 30, "batch"),         # moderate RAM
    (100_000, 4 << 30, "chunked"),    # very many samples
])
def test_auto_strategy_rules(n, ram, expected):
    strategy, reason = choose_strategy(n, 3_700_000, ram)
    assert strategy == expected and "GiB" in reason


def test_auto_strategy_prefers_per_image_files_for_big_records():
    assert choose_strategy(500, 60 << 20, 8 << 30)[0] == "image"


@pytest.mark.slow
def test_cli_build_and_info_do_not_import_torch(sample_root, tmp_path):
    """Both in one fresh process: torch is not in sys.modules after the build and info ran (a process of its own:
    slow; tests/test_imports.py checks every import statement of the build side in the fast suite)."""
    out = tmp_path / "cli-cache"
    code = ("import sys, east_cache.cli as c; rc = c.main(sys.argv[1:]) or c.main(['info', sys.argv[5]]); "
            "assert 'torch' not in sys.modules, 'preprocess must not import torch'; sys.exit(rc)")
    args = ["build", "--data", str(sample_root), "--out", str(out), "--input-size", "64", "--image-size", "128",
            "--strategy", "auto", "--jobs", "1"]
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "strategy whole, npy files: auto:" in r.stderr
    assert "samples    5 = 5 images x 1 variants" in r.stdout and "illegible" in r.stdout
