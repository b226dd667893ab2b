"""prefetch(): batches read ahead in a thread, in order, with errors and early exits handled."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers import small_config
from torch.utils.data import DataLoader

from east_cache.reader import CacheDataset, collate, prefetch
from east_cache.build.run import build_cache

RUN_AHEAD_LIMIT_S = 60   # how long the consumer waits for the producer to fill the queue while it does nothing


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
    end = time.monotonic() + RUN_AHEAD_LIMIT_S   # a busy machine may schedule the producer late, not never
    while len(made) < 4 and time.monotonic() < end:
        time.sleep(0.01)
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
    before = set(threading.enumerate())   # other threads of the suite may end meanwhile: only new ones count
    for i in prefetch(iter(range(10**6)), depth=2):
        if i == 3:
            break
    assert [t for t in threading.enumerate() if t not in before] == []


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
