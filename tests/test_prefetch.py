"""prefetch(): batches read ahead in a thread; assembled(): a worker-less loader's batches made by threads; both in
order, with errors and early exits handled."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from helpers import small_config
from torch.utils.data import DataLoader

from dataset import CacheDataset, collate, prefetch
from dataset.prefetch import assembled
from preprocess.store.build import build_cache


def test_yields_everything_in_order():
    assert list(prefetch(iter(range(100)), depth=3)) == list(range(100))


def test_reads_ahead_while_the_consumer_waits():
    made = []

    def slow_source():
        for i in range(4):
            made.append(i)
            yield i

    it = prefetch(slow_source(), depth=2)
    assert next(it) == 0
    time.sleep(0.2)
    assert len(made) == 4, "the producer did not run ahead of the consumer"
    assert list(it) == [1, 2, 3]


def test_a_producer_error_reaches_the_consumer():
    def broken():
        yield 1
        raise OSError("disk gone")

    it = prefetch(broken())
    assert next(it) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(it)


def test_leaving_early_stops_the_thread():
    before = threading.active_count()
    for i in prefetch(iter(range(10**6)), depth=2):
        if i == 3:
            break
    assert threading.active_count() == before


def test_prefetched_cache_batches_equal_plain_ones(sample_root, tmp_path):
    build_cache(small_config(strategy="batch", batch_size=2), [sample_root], tmp_path / "c", jobs=1, quiet=True)
    ds = CacheDataset(tmp_path / "c")
    loader = DataLoader(ds, batch_size=2, collate_fn=collate)
    plain = [{k: v.clone() for k, v in b.items()} for b in loader]
    fetched = list(prefetch(loader, depth=2))   # all held at once: the buffer pool must not recycle any
    assert len(fetched) == len(plain) == 3
    for a, b in zip(plain, fetched):
        for k in a:
            assert np.array_equal(a[k].numpy(), b[k].numpy()), k


class Slow(torch.utils.data.Dataset):
    """Items that take a while, recording which thread made each; item 13 fails when asked to."""

    def __init__(self, n: int = 40, fail: bool = False):
        self.n, self.fail, self.threads = n, fail, set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.fail and i == 13:
            raise OSError("disk gone at item 13")
        self.threads.add(threading.get_ident())
        time.sleep(0.002)
        return torch.tensor([i])


def test_assembled_batches_are_the_loaders_in_its_order():
    ds = Slow()
    order = np.random.default_rng(0).permutation(len(ds)).tolist()
    loader = DataLoader(ds, batch_size=3, sampler=order)
    got = [b.flatten().tolist() for b in assembled(loader, threads=2)]
    assert got == [order[k:k + 3] for k in range(0, len(order), 3)] and len(ds.threads) == 2, "two threads made the batches, handed out in the sampler's order"


def test_assembled_cache_batches_equal_plain_ones(sample_root, tmp_path):
    """Page-mode crops made by two threads at once: the same batches, bit for bit, as one thread makes them."""
    build_cache(small_config(), [sample_root], tmp_path / "c", jobs=1, quiet=True)
    ds = CacheDataset(tmp_path / "c", compact=True)
    assert ds.pages
    loader = DataLoader(ds, batch_size=2, collate_fn=collate)
    for epoch in range(3):
        ds.set_epoch(epoch)
        plain = [{k: v.clone() for k, v in b.items()} for b in loader]
        fetched = list(assembled(loader, threads=2))   # all held at once: the buffer pool must not recycle any
        assert len(fetched) == len(plain) > 1
        for a, b in zip(plain, fetched):
            for k in a:
                assert torch.equal(a[k], b[k]), (epoch, k)


def test_an_assembling_error_reaches_the_consumer_and_stops_the_threads():
    before = threading.active_count()
    it = assembled(DataLoader(Slow(fail=True), batch_size=2), threads=2)
    assert next(it).flatten().tolist() == [0, 1]
    with pytest.raises(OSError, match="item 13"):
        list(it)
    assert threading.active_count() == before


def test_leaving_assembled_early_stops_the_threads():
    before = threading.active_count()
    for k, _ in enumerate(assembled(DataLoader(Slow(400), batch_size=2), threads=2)):
        if k == 3:
            break
    assert threading.active_count() == before
