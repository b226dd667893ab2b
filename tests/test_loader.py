"""The public reader for a training loop of your own: east_cache.Loader (and `dataset.Loader`), its batches equal to
the cache's items, a new epoch per pass, the baseline's conventions; and a CacheDataset in a DataLoader whose
persistent workers still see set_epoch."""
from __future__ import annotations

import hashlib

import pytest
import torch
from helpers import make_tiny_cache
from torch.utils.data import DataLoader

from east_cache.model.loss import east_loss
from east_cache.model.model import EAST
from east_cache.reader import CacheDataset, collate
from east_cache.reader.images import IMAGENET_MEAN, IMAGENET_STD


def digest(t: torch.Tensor) -> str:
    return hashlib.blake2b(t.contiguous().numpy().tobytes(), digest_size=8).hexdigest()


@pytest.fixture(scope="module")
def cache(tiny_data, tmp_path_factory):
    """Two pages, three variants: crops change with the epoch and so do the variants read."""
    return make_tiny_cache(tiny_data, tmp_path_factory.mktemp("loader") / "c", variants=3,
                           geometry="build")


def epoch_items(cache, epoch: int) -> dict[str, torch.Tensor]:
    """The cache's items at an epoch, in name order, collated: what a loader must deliver."""
    ds = CacheDataset(cache)
    ds.set_epoch(epoch)
    return collate([ds[i] for i in range(len(ds))])


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_the_items_of_each_epoch_and_each_pass_is_the_next_epoch(cache, workers):
    from east_cache import Loader
    with Loader(cache, batch_size=2, shuffle=False, normalize=None, workers=workers) as loader:
        assert len(loader) == 1
        for epoch in range(3):
            (batch,) = list(loader)
            want = epoch_items(cache, epoch)
            assert batch.image.dtype == torch.uint8 and torch.equal(batch.image, want["image"])
            for k in ("score", "roi"):
                assert getattr(batch, k).dtype == torch.float32 and torch.equal(getattr(batch, k), want[k].float())
            assert torch.equal(batch.geo.half(), want["geo"])
        loader.set_epoch(1)
        (again,) = list(loader)
        assert torch.equal(again.image, epoch_items(cache, 1)["image"])
        (after,) = list(loader)
        assert torch.equal(after.image, epoch_items(cache, 2)["image"])


def test_each_normalisation_is_the_stated_formula(cache):
    from east_cache import Loader
    raw = next(iter(Loader(cache, batch_size=2, train=False, normalize=None))).image.float() / 255
    base = next(iter(Loader(cache, batch_size=2, train=False, normalize="baseline"))).image
    net = next(iter(Loader(cache, batch_size=2, train=False))).image
    assert torch.allclose(base, (raw - 0.5) / 0.5)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.allclose(net, (raw - mean) / std, atol=1e-6)
    with pytest.raises(ValueError, match="normalize='bgr'"):
        Loader(cache, batch_size=2, normalize="bgr")


@pytest.mark.slow   # a training loop (the README's own loop, test_readme.py, is the other)
def test_the_baselines_loop_trains_from_a_cache_in_a_few_changed_lines(cache):
    """The BoostCamp loop: `for img, gt_score_map, gt_geo_map, roi_mask in train_loader:` into an EAST model and its
    loss; here a few steps on the CPU. Both import names give this one Loader."""
    import dataset
    from east_cache import Loader
    assert dataset.Loader is Loader
    torch.manual_seed(0)
    model = EAST()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = Loader(cache, batch_size=2, normalize="baseline")
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for epoch in range(3):
        for img, gt_score_map, gt_geo_map, roi_mask in train_loader:
            score, geo = model(img)
            loss = east_loss(score, geo, gt_score_map, gt_geo_map, roi_mask)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_set_epoch_reaches_persistent_dataloader_workers(cache):
    """The usual DataLoader advice (persistent_workers=True) with a plain CacheDataset: the workers, forked once,
    read the epoch the training process sets, so every epoch gets its own crops."""
    ds = CacheDataset(cache)
    loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True, collate_fn=collate)
    seen = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        (batch,) = list(loader)
        assert torch.equal(batch["image"], epoch_items(cache, epoch)["image"]), epoch
        seen.append(digest(batch["image"]))
    assert len(set(seen)) == 3


def test_a_pickled_copy_reads_its_own_epoch_and_keys_carry_theirs(cache):
    import pickle
    ds = CacheDataset(cache)
    ds.set_epoch(2)
    copy = pickle.loads(pickle.dumps(ds))
    ds.set_epoch(0)
    assert copy.epoch == 2
    assert torch.equal(collate([copy[(1, 0)]])["image"], collate([ds[(1, 0)]])["image"])
    assert not torch.equal(collate([copy[0]])["image"], collate([ds[0]])["image"])


def test_a_worker_holding_a_pickled_copy_warns_that_set_epoch_cannot_reach_it(cache, monkeypatch):
    """Workers started by spawn or forkserver unpickle their own dataset: set_epoch in the training process does not
    reach them, so they say so once (and what to use instead); keys with an epoch need no warning."""
    import pickle
    import warnings
    from east_cache.reader import cache as cache_module
    copy = pickle.loads(pickle.dumps(CacheDataset(cache)))
    monkeypatch.setattr(cache_module, "get_worker_info", lambda: object())   # as in a DataLoader worker
    with pytest.warns(RuntimeWarning, match="set_epoch in the training process does not reach it.*Loader"):
        copy[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy[1]            # once per process
        CacheDataset(cache)[0]   # forked, or in this process: the epoch is shared
        pickle.loads(pickle.dumps(CacheDataset(cache)))[(0, 1)]


def test_the_validation_loss_reads_the_same_crops_every_time(cache):
    """A Loader moves to the next epoch's crops at each pass; the validation loss pins its loader to epoch 0, so
    that one epoch's figure compares with the next."""
    from east_cache import Loader
    from east_cache.train import engine
    from east_cache.train.config import TrainConfig
    from east_cache.predict.device import Runtime
    seen = []

    def model(image):
        seen.append(image.clone())
        b, _, s, _ = image.shape
        return torch.full((b, 1, s // 2, s // 2), 0.5), torch.ones(b, 5, s // 2, s // 2)

    model.eval = lambda: None
    ctx = engine.new_context(TrainConfig(amp="off"), Runtime())
    loader = Loader(cache, batch_size=2, train=False)
    first = engine.validation_loss(model, loader, ctx)
    second = engine.validation_loss(model, loader, ctx)
    assert torch.equal(seen[0], seen[1]) and first == second
