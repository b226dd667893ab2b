"""east_cache/reader/workers.py: batches made by forked workers into reused shared slots are the batches a DataLoader
over the same sampler gives, in its order, whatever the consumer keeps; failures reach the main process."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import small_config
from torch.utils.data import DataLoader

from east_cache.reader import CacheDataset, EpochSampler, collate, make_sampler
from east_cache.reader import workers as workers_module
from east_cache.reader.workers import WorkerLoader, fork_available
from east_cache.errors import CacheError
from east_cache.build.run import build_cache
from east_cache.store.page_record import WORD_TABLE

pytestmark = pytest.mark.skipif(not fork_available(), reason="the worker loader needs the fork start method")


@pytest.fixture(scope="module", params=["read", "build", "read-jpeg"])
def cache(request, sample_root, tmp_path_factory):
    """Page caches in both image codecs (jpeg: a worker decodes a crop's tiles into its slot and draws its maps
    there), and a --crop build cache."""
    out = tmp_path_factory.mktemp(f"workers-{request.param}") / "c"
    crop, _, codec = request.param.partition("-")
    build_cache(small_config(variants=2, crop=crop, strategy="image", image_codec=codec or "auto"), [sample_root],
                out, jobs=1, quiet=True)
    return out


def loaders(cache, workers: int, drop_last: bool, batch: int = 2, compact: bool = True):
    """(WorkerLoader, DataLoader) over the same kind of sampler, each on its own dataset."""
    def sampler(ds):
        return EpochSampler(make_sampler(ds, batch, True, 3))
    a, b = CacheDataset(cache, compact=compact), CacheDataset(cache, compact=compact)
    ours = WorkerLoader(a, sampler(a), batch, workers, drop_last)
    theirs = DataLoader(b, batch_size=batch, sampler=sampler(b), collate_fn=collate, drop_last=drop_last)
    return ours, theirs


def as_bytes(batch: dict) -> dict:
    """A batch's fields as bytes, word tables without the zero rows after the batch's longest (a worker's slot
    holds as many rows as the cache's densest page, collate as the batch's)."""
    out = {}
    for k, v in batch.items():
        if k == WORD_TABLE:
            used = v.reshape(-1, v.shape[-1]).any(dim=-1).reshape(v.shape[:2]).any(dim=0)
            v = v[:, :int(torch.nonzero(used).max()) + 1 if used.any() else 0]
        out[k] = (v.dtype, tuple(v.shape), v.numpy().tobytes())
    return out


def epoch(loader, e: int) -> list:
    loader.sampler.set_epoch(e)
    return list(loader)


@pytest.mark.parametrize("workers,drop_last", [(1, False), (2, True), (2, False)])
def test_batches_equal_a_dataloaders_over_the_same_sampler(cache, workers, drop_last):
    ours, theirs = loaders(cache, workers, drop_last)
    try:
        for e in (0, 1, 4):
            got, want = epoch(ours, e), epoch(theirs, e)   # every batch of the epoch kept: slots run out
            assert len(got) == len(want) == len(ours) == len(theirs)
            assert [as_bytes(b) for b in got] == [as_bytes(b) for b in want], e
    finally:
        ours.close()


def test_word_tables_are_written_in_the_slot_as_long_as_the_densest_page(cache):
    """A compact crop's word table has a row per legible word of its page: a worker writes it into a slot of
    table_rows() rows (the most any page has), zeros after its own, instead of sending it to this process."""
    ds = CacheDataset(cache, compact=True)
    if not ds.pages:
        assert ds.table_rows() == 0
        return
    lengths = [len(ds[i]["table"]) for i in range(len(ds))]
    assert ds.table_rows() == max(lengths) > min(lengths)
    ours, theirs = loaders(cache, 2, False, batch=2)
    try:
        for got, want in zip(epoch(ours, 0), epoch(theirs, 0)):
            assert got[WORD_TABLE].shape[1] == ds.table_rows() >= want[WORD_TABLE].shape[1]
            assert torch.equal(got[WORD_TABLE][:, :want[WORD_TABLE].shape[1]], want[WORD_TABLE])
            assert not got[WORD_TABLE][:, want[WORD_TABLE].shape[1]:].any()
    finally:
        ours.close()


@pytest.mark.slow
def test_full_items_too_and_batches_later_change_nothing_held(cache):
    """Non-compact items (score and geometry made on the CPU); a batch the consumer holds is never overwritten,
    while the batches it let go are reused."""
    ours, theirs = loaders(cache, 2, False, batch=1, compact=False)
    try:
        for e in range(3):
            held = [as_bytes(b) for b in epoch(theirs, e)]
            ours.sampler.set_epoch(e)
            kept = []
            for k, b in enumerate(ours):
                assert as_bytes(b) == held[k]
                if k % 2 == 0:
                    kept.append((k, b))
            assert all(as_bytes(b) == held[k] for k, b in kept)
        assert len(ours._slots) == 2 * workers_module.SLOTS_PER_WORKER + workers_module.SPARE_SLOTS
    finally:
        ours.close()


@pytest.mark.slow
def test_an_epoch_left_early_does_not_leak_into_the_next(cache):
    ours, theirs = loaders(cache, 2, False, batch=1)
    try:
        ours.sampler.set_epoch(0)
        it = iter(ours)
        next(it)
        it.close()   # the rest of epoch 0 is still with the workers
        assert [as_bytes(b) for b in epoch(ours, 1)] == [as_bytes(b) for b in epoch(theirs, 1)]
    finally:
        ours.close()


class Failing(torch.utils.data.Dataset):
    """Items of one fixed array; key 3 raises a CacheError that names a file."""

    def __len__(self):
        return 6

    def __getitems__(self, keys):
        if 3 in keys:
            raise CacheError("cache/data/x.npy: damaged; rebuild it")
        return [{"image": np.full((4, 4), k, np.uint8)} for k in keys]


def test_a_workers_error_is_raised_in_the_main_process_with_its_message():
    loader = WorkerLoader(Failing(), range(6), 2, 2)
    try:
        with pytest.raises(CacheError, match="x.npy: damaged"):
            list(loader)
        assert [b["image"][:, 0, 0].tolist() for b in WorkerLoader(Failing(), range(3), 2, 1)] == [[0, 1], [2]]
    finally:
        loader.close()


class Numbers(torch.utils.data.Dataset):
    """Item k: an array of k's."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitems__(self, keys):
        return [{"image": np.full((4, 4), k, np.int32)} for k in keys]


def test_batches_the_consumer_keeps_are_never_written_over():
    """Many more batches than slots, every other one kept (with a view of one): the kept ones keep their values,
    the others' slots are reused."""
    loader = WorkerLoader(Numbers(40), range(40), 1, 1)
    try:
        kept = [(k, b["image"][0]) for k, b in enumerate(loader) if k % 2 == 0]
        assert [int(v[0, 0]) for _, v in kept] == [k for k, _ in kept] and all(bool((v == k).all()) for k, v in kept)
        assert len(loader._slots) == workers_module.SLOTS_PER_WORKER + workers_module.SPARE_SLOTS
    finally:
        loader.close()


class Gated(Failing):
    """Item 0 at once; every later item once the file `gate` exists: its worker is at work on item 1 until then,
    whatever the machine's load."""

    def __init__(self, gate: Path):
        self.gate = gate

    def __getitems__(self, keys):
        while keys != [0] and not self.gate.exists():
            time.sleep(0.01)
        return [{"image": np.full((4, 4), k, np.uint8)} for k in keys]


def test_a_worker_that_dies_stops_the_epoch_with_an_error_that_says_so(tmp_path):
    loader = WorkerLoader(Gated(tmp_path / "never"), range(6), 1, 1)
    it = iter(loader)
    assert next(it)["image"][0, 0, 0] == 0
    os.kill(loader._procs[0].pid, signal.SIGKILL)   # at work on item 1: the epoch cannot end without it
    with pytest.raises(RuntimeError, match=r"east-loader-0 .* killed by signal 9.*--workers 0"):
        list(it)


def test_workers_leave_ctrl_c_and_sigterm_to_the_training_process(tmp_path):
    """A signal to the whole process group reaches the workers too: they go on, so that the training process can
    stop at a step boundary and save, then end them."""
    loader = WorkerLoader(Gated(tmp_path / "gate"), range(4), 1, 1)
    try:
        it = iter(loader)
        assert int(next(it)["image"][0, 0, 0]) == 0
        for sig in (signal.SIGINT, signal.SIGTERM):   # while the worker is at work on item 1
            os.kill(loader._procs[0].pid, sig)
        (tmp_path / "gate").touch()
        assert [int(b["image"][0, 0, 0]) for b in it] == [1, 2, 3]
        assert loader._procs[0].is_alive()
    finally:
        loader.close()


def test_close_ends_the_workers_and_a_later_epoch_starts_new_ones():
    loader = WorkerLoader(Failing(), range(3), 1, 2)
    assert [int(b["image"][0, 0, 0]) for b in loader] == [0, 1, 2]
    procs = list(loader._procs)
    loader.close()
    assert not any(p.is_alive() for p in procs)
    assert [int(b["image"][0, 0, 0]) for b in loader] == [0, 1, 2]
    loader.close()


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_train_reads_through_worker_processes(codec, sample_root, tmp_path):
    """train.py --workers 2 builds the worker loader and trains from it (a page cache: the batches of every kind of
    cache are checked against a DataLoader's above)."""
    from helpers import read_log

    from east_cache.train.train import run
    cache = tmp_path / "c"
    build_cache(small_config(variants=2, crop="read", strategy="image", image_codec=codec), [sample_root], cache,
                jobs=1, quiet=True)
    run(["--cache", str(cache), "--out", str(tmp_path / "run"), "--workers", "2", "--batch-size", "2", "--log-every", "1",
         "--backbone-weights", "random", "--max-steps", "2", "--device", "cpu"])
    steps = [r for r in read_log(tmp_path / "run") if r["event"] == "step"]
    assert len(steps) == 2 and all(np.isfinite(r["loss"]) for r in steps)


def test_workers_default_to_processes_for_page_mode_on_a_gpu_only(cache, monkeypatch):
    """--workers not given: a page-mode cache read for a GPU gets a worker per core of the process but the one the
    training process keeps (at most AUTO_WORKERS_MAX, at least 1); a CPU run, or a --crop build cache, reads in the
    training process; a given count is kept."""
    from east_cache.reader import loader
    ds = CacheDataset(cache)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert loader.loader_workers(ds, gpu, workers=3) == 3
    assert loader.loader_workers(ds, cpu) == 0
    want = min(loader.AUTO_WORKERS_MAX, 15) if ds.pages else 0
    assert loader.loader_workers(ds, gpu) == want
    assert loader.loader_workers(ds, gpu, world=2) == (7 if ds.pages else 0)
    assert loader.loader_workers(ds, gpu, world=8) == (1 if ds.pages else 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert loader.loader_workers(ds, gpu, world=2) == (1 if ds.pages else 0)


@pytest.mark.skipif(not fork_available(), reason="needs the fork start method")
def test_workers_are_forked_with_cv2_on_one_thread_and_the_parent_keeps_its_own():
    """A warped crop's cv2.warpAffine runs on the worker's one thread (the workers are the parallelism); the count is
    set in the parent around the fork, since a forked child that changes it can wait forever on the parent's pool."""
    import cv2
    cv2.setNumThreads(2)
    image = np.zeros((300, 300, 3), np.uint8)
    cv2.warpAffine(image, np.eye(2, 3), (200, 200))   # the parent's pool in use before the fork
    read, write = os.pipe()
    with workers_module.cv2_single_threaded():
        pid = os.fork()
        if pid == 0:   # the worker's side: one thread, and a warp that ends
            cv2.warpAffine(image, np.eye(2, 3), (200, 200))
            os.write(write, bytes([cv2.getNumThreads()]))
            os._exit(0)
    os.close(write)
    seen = os.read(read, 1)
    os.waitpid(pid, 0)
    assert seen == bytes([1]) and cv2.getNumThreads() == 2
