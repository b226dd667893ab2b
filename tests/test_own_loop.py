"""A DataLoader of one's own over CacheDataset: without set_epoch every epoch reads the same crops, which the
dataset says once (SameCropsWarning), in this process or in the DataLoader's workers, persistent or not."""
from __future__ import annotations

import functools
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


def warnings_to(path, worker_id: int) -> None:
    """In a DataLoader worker: its warnings appended to a file the test reads (a worker's stderr is not the test's)."""
    def write(message, category, *args, **kwargs):
        with open(path, "a") as f:
            f.write(f"{category.__name__}: {message}\n")
    warnings.simplefilter("always")
    warnings.showwarning = write


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [True, False])
def test_without_set_epoch_workers_say_it_once_too(tiny_cache, tmp_path, persistent):
    ds, said = CacheDataset(tiny_cache), tmp_path / "warnings.txt"
    loader = DataLoader(ds, batch_size=1, collate_fn=collate, num_workers=2, persistent_workers=persistent,
                        worker_init_fn=functools.partial(warnings_to, said))
    images(loader)   # the first epoch reads every item once: nothing to say
    assert not said.exists()
    epochs = [images(loader) for _ in range(3)]
    lines = said.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SameCropsWarning: item "), lines
    assert (epochs[0] == epochs[2]).all(), "the repeat it warns of"


@pytest.mark.parametrize("workers, persistent", [(0, False), (1, True), (1, False)])
def test_with_set_epoch_crops_change_and_nothing_is_said(tiny_cache, tmp_path, workers, persistent):
    ds = CacheDataset(tiny_cache)
    said = tmp_path / "warnings.txt"
    loader = DataLoader(ds, batch_size=1, collate_fn=collate, num_workers=workers, persistent_workers=persistent,
                        worker_init_fn=functools.partial(warnings_to, said) if workers else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SameCropsWarning)   # in this process; in workers, a file (warnings_to)
        epochs = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            epochs.append(images(loader))
    assert not (epochs[0] == epochs[1]).all(), "set_epoch draws new crops"
    assert not said.exists(), said.read_text()
