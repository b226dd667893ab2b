"""A DataLoader of one's own over CacheDataset: without set_epoch every epoch reads the same crops, which the
dataset says once (SameCropsWarning), in this process or in the DataLoader's workers, persistent or not."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from torch.utils.data import DataLoader

from east_cache import CacheDataset, SameCropsWarning, collate


def images(loader: DataLoader) -> np.ndarray:
    return np.concatenate([b["image"].numpy() for b in loader])


def test_without_set_epoch_the_same_crops_are_said_once_in_this_process(tiny_cache):
    ds = CacheDataset(tiny_cache)
    loader = DataLoader(ds, batch_size=1, collate_fn=collate)
    said = r"item \d was read again at epoch 0, the very crop .*set_epoch\(epoch\)"
    with pytest.warns(SameCropsWarning, match=said) as seen:
        epochs = [images(loader) for _ in range(3)]
    assert len(seen) == 1, "warned once, not per item or per epoch"
    assert (epochs[0] == epochs[1]).all(), "the repeat it warns of"


def warnings_are_errors(worker_id: int) -> None:
    """In a worker, a warning becomes an error the DataLoader hands back to the test (a worker's warning would go
    to its own stderr, which the test cannot see)."""
    warnings.simplefilter("error", SameCropsWarning)


@pytest.mark.parametrize("persistent", [True, False])
def test_without_set_epoch_workers_say_it_too(tiny_cache, persistent):
    ds = CacheDataset(tiny_cache)
    loader = DataLoader(ds, batch_size=1, collate_fn=collate, num_workers=1, persistent_workers=persistent,
                        worker_init_fn=warnings_are_errors)
    images(loader)   # the first epoch reads every item once: nothing to say
    with pytest.raises(Exception, match="read again at epoch 0"):
        images(loader)


@pytest.mark.parametrize("workers, persistent", [(0, False), (1, True), (1, False)])
def test_with_set_epoch_crops_change_and_nothing_is_said(tiny_cache, workers, persistent):
    ds = CacheDataset(tiny_cache)
    loader = DataLoader(ds, batch_size=1, collate_fn=collate, num_workers=workers, persistent_workers=persistent,
                        worker_init_fn=warnings_are_errors if workers else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SameCropsWarning)
        epochs = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            epochs.append(images(loader))
    assert not (epochs[0] == epochs[1]).all(), "set_epoch draws new crops"
