"""Validation on full pages during training (--val-data ROOT --val-split SPLIT) and --eval-only on a checkpoint:
the same prediction and rect scoring, so the checkpoint's figure is the logged one. Ground-truth maps stand in
for EAST at inference (training itself runs the real model), so the figure is one of a model that detects words."""
from __future__ import annotations

import json

import pytest
from helpers import GroundTruthModel, epochs_of, small_config, train_run

from east_cache.train import train
from east_cache.model.model import EAST
from east_cache.predict.pages import Page
from east_cache.predict.predict import predict, write_predictions
from east_cache.predict.device import Runtime
from east_cache.evaluate.scoring import Words, load_ground_truth, load_predictions, score
from east_cache.train.validate import full_page_metrics, val_pages
from east_cache.errors import UsageError
from east_cache.build.run import build_cache

METRICS = ("precision", "recall", "hmean")


@pytest.fixture
def detecting_east(sample_root, monkeypatch):
    """EAST whose inference returns the ground-truth maps of the sample pages prepared at the cache's image size."""
    cfg = small_config(variants=1)
    pages = val_pages(sample_root, "train", cfg, batch_size=2)
    double = GroundTruthModel([Page(r.name, r.path, r.width, r.height) for r in pages.records],
                              {r.name: Words.from_record(r) for r in pages.records}, cfg.image_size, cfg.map_scale)
    train_forward = EAST.forward
    monkeypatch.setattr(EAST, "forward", lambda self, x: train_forward(self, x) if self.training else double(x))
    return cfg


@pytest.mark.slow
def test_eval_only_reproduces_the_logged_full_page_figure(detecting_east, sample_root, tmp_path, capsys):
    cache = tmp_path / "cache"
    build_cache(detecting_east, [sample_root], cache, jobs=1, quiet=True)
    val = ["--val-data", str(sample_root), "--val-split", "train"]
    (last,) = epochs_of(train_run(cache, tmp_path / "run", "--epochs", "1", "--max-steps", "1", *val))
    assert last["hmean"] >= 0.95 and last["detections"] >= 30, last
    capsys.readouterr()
    assert train.run(["--eval-only", "--checkpoint", str(tmp_path / "run" / "latest.pt"), *val,
                    "--out", str(tmp_path / "eval"), "--device", "cpu"]) == 0
    (record,) = [json.loads(line) for line in (tmp_path / "eval" / "eval.jsonl").read_text().splitlines()]
    assert {k: record[k] for k in METRICS} == {k: last[k] for k in METRICS}
    assert record["images"] == 5 and record["split"] == "train" and record["detections"] == last["detections"]
    assert f"hmean {record['hmean']:.4f}" in capsys.readouterr().out


def test_validation_images_take_the_cache_word_rules(sample_root):
    """A tag the cache ignores is don't-care in validation too: fewer cared-for words than with no ignore tags."""
    with_tags = val_pages(sample_root, "train", small_config(), 1).records
    without = val_pages(sample_root, "train", small_config(ignore_tags=()), 1).records
    care = [sum(int(w.care.sum()) for w in map(Words.from_record, recs)) for recs in (with_tags, without)]
    assert care[0] < care[1]
    assert val_pages(sample_root, "train", small_config(image_size=320), 1).predict.image_size == 320


@pytest.mark.parametrize("flags, expect", [
    (["--eval-every", "1"], "--eval-every needs --val-data ROOT"),
    (["--val-split", "val"], "--val-split names a split of --val-data"),
])
def test_flags_that_need_validation_data(flags, expect):
    with pytest.raises(UsageError, match=expect):
        train.run(flags)


def test_missing_validation_split_is_named(sample_root, tmp_path):
    with pytest.raises(Exception, match=r"ufo/nosuch\.json"):
        val_pages(sample_root, "nosuch", small_config(), 1)


def test_validation_figure_is_predict_then_evaluate(sample_root, tmp_path):
    """What training logs is what predict.py + `preprocess evaluate` give for the same checkpoint and split."""
    cfg = small_config()
    pages = val_pages(sample_root, "train", cfg, batch_size=2)
    page_list = [Page(r.name, r.path, r.width, r.height) for r in pages.records]
    double = GroundTruthModel(page_list, {r.name: Words.from_record(r) for r in pages.records}, cfg.image_size,
                              cfg.map_scale)
    logged = full_page_metrics(double, pages, Runtime())
    results, _ = predict(double, page_list, pages.predict, Runtime().device, progress=False)
    write_predictions(tmp_path / "pred.json", results)
    gt = load_ground_truth(sample_root / "ufo" / "train.json", cfg)
    scored = score(gt, load_predictions(tmp_path / "pred.json", gt))
    assert logged["hmean"] >= 0.95
    assert {k: logged[k] for k in METRICS} == pytest.approx({k: scored[k] for k in METRICS})


@pytest.mark.slow
def test_the_validation_batches_of_a_run_are_not_jittered(tiny_cache, tmp_path, monkeypatch):
    """The validation loader train.py makes itself, in a run with --jitter 0.5 (its training loop stubbed out): its
    batches are the cache's unaugmented crops (no colour jitter, no height jitter or rotation), normalised, the same
    at every read."""
    import numpy as np
    import torch

    from east_cache import CacheDataset
    from east_cache.reader.images import prepare_images

    made = []
    monkeypatch.setattr(train, "run_epochs", lambda net, model, loaders, *a, **k: made.append(loaders))
    train.run(["--cache", str(tiny_cache), "--val-cache", str(tiny_cache), "--out", str(tmp_path / "run"),
               "--jitter", "0.5", "--eval-every", "0", "--workers", "0", "--batch-size", "2",
               "--backbone-weights", "random", "--device", "cpu"])
    (training, validation), = made

    def images(loader) -> torch.Tensor:
        loader.set_epoch(0)   # as the run's validation does
        return torch.cat([b.image for b in loader])

    stored = CacheDataset(tiny_cache)
    stored.augment = False   # a validation read: height 1, angle 0, epoch 0's crop
    stored.set_epoch(0)
    plain = prepare_images(torch.from_numpy(np.stack([stored[i]["image"] for i in range(len(stored))])), 0.0)
    first = images(validation)
    assert torch.equal(first, images(validation)), "validation batches differ between reads"
    assert torch.allclose(first, plain, atol=1e-6), "validation batches are not the cache's crops"
    assert training.jitter == 0.5, "the run's training batches are jittered"
    assert training.dataset.augment and not validation.dataset.augment, "only training draws each epoch's geometry"
