"""Training (the east package, run as train.py): the EAST model, the float32 loss, the step that skips non-finite
losses, and whole runs on a tiny cache (64 px crops of two small pages), on the CPU, in the main process and
under torchrun."""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, epochs_of, make_tiny_cache, read_log, small_config, train_run
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from east_cache.reader import Batch, BlockSampler, CacheDataset, EpochSampler, batches, collate, make_loader
from east_cache.train import checkpoint, config, engine, runtime, train
from east_cache.model import model as east
from east_cache.predict import device, weights
from east_cache.model.model import load_backbone
from east_cache.reader import images
from east_cache.train.config import TrainConfig
from east_cache.model.loss import east_loss
from east_cache.model.model import EAST, MAX_DISTANCE, VGG16_BN
from east_cache.predict.device import Runtime
from east_cache.errors import UsageError
from east_cache.build.run import build_cache


@pytest.fixture
def cache(tiny_cache) -> Path:
    return tiny_cache


# ---------------------------------------------------------------- model

@pytest.mark.slow
@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_model_outputs_match_the_cache_maps(map_scale):
    model = EAST(map_scale).eval()
    with torch.no_grad():
        score, geo = model(torch.randn(2, 3, 64, 64))
    m = int(64 * map_scale)
    assert score.shape == (2, 1, m, m) and geo.shape == (2, 5, m, m)
    assert 0 <= score.min() and score.max() <= 1
    assert 0 <= geo[:, :4].min() and geo[:, :4].max() <= MAX_DISTANCE
    assert geo[:, 4].abs().max() <= math.pi / 2


@pytest.mark.slow
def test_backbone_has_torchvision_keys_and_loads_them(tmp_path):
    model = EAST()
    convs = sorted({int(k.split(".")[1]) for k in model.state_dict() if k.startswith("features.") and k.endswith("bias")
                    and f"features.{k.split('.')[1]}.running_mean" not in model.state_dict()})
    assert convs == [0, 3, 7, 10, 14, 17, 20, 24, 27, 30, 34, 37, 40]  # torchvision vgg16_bn's conv indices
    assert "features.41.running_var" in model.state_dict()
    donor = EAST()
    state = {f"features.{k}": v for k, v in donor.features.state_dict().items()}
    state["classifier.0.weight"] = torch.zeros(4096, 25088 // 64)  # a classifier is ignored
    torch.save(state, tmp_path / "vgg16_bn.pth")
    load_backbone(model, tmp_path / "vgg16_bn.pth")
    assert torch.equal(model.features[40].weight, donor.features[40].weight)
    torch.save({"head.weight": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="vgg16_bn"):
        load_backbone(model, tmp_path / "other.pth")


def plain_vgg16_features() -> dict:
    """torchvision vgg16's (no BN) `features` keys: conv layers at 0, 2, 5, 7, ... where vgg16_bn has BN."""
    state, i, c_in = {}, 0, 3
    for v in VGG16_BN:
        if v == "M":
            i += 1
            continue
        state[f"features.{i}.weight"], state[f"features.{i}.bias"] = torch.zeros(v, c_in, 3, 3), torch.zeros(v)
        i, c_in = i + 2, v
    return state


@pytest.fixture(scope="module")
def refusing_model() -> EAST:
    """A model for the weights files that are refused (what a refused file leaves in it is never looked at)."""
    return EAST()


@pytest.mark.parametrize("case", ["missing", "truncated", "whole model", "not a dict", "no features",
                                  "plain vgg16", "wrong shape"])
def test_bad_backbone_weights_name_the_file_and_what_it_needs(case, tmp_path, refusing_model):
    path = tmp_path / "weights.pth"
    good = {f"features.{k}": v for k, v in refusing_model.features.state_dict().items()}
    if case == "truncated":
        torch.save(good, path)
        path.write_bytes(path.read_bytes()[:1000])
    elif case == "whole model":
        torch.save(nn.Linear(2, 2), path)  # weights_only refuses a pickled module
    elif case == "not a dict":
        torch.save(torch.zeros(3), path)
    elif case == "no features":
        torch.save({"classifier.0.weight": torch.zeros(1)}, path)
    elif case == "plain vgg16":
        torch.save(plain_vgg16_features(), path)
    elif case == "wrong shape":
        torch.save({**good, "features.0.weight": torch.zeros(64, 1, 3, 3)}, path)
    with pytest.raises(UsageError, match=r"(?s)weights\.pth: .*; --backbone-weights takes imagenet, random, or a torchvision vgg16_bn state dict"):
        load_backbone(refusing_model, path)


def test_a_missing_backbone_file_stops_before_the_cache_is_read(tmp_path):
    with pytest.raises(UsageError, match=r"nope\.pth: no such file; --backbone-weights takes"):
        train.run(["--cache", str(tmp_path / "no-cache"), "--backbone-weights", str(tmp_path / "nope.pth")])


def imagenet_like_file(folder: Path, hash_prefix: str | None = None) -> tuple[Path, dict]:
    """A torchvision-format vgg16_bn file of the right keys and shapes but a few bytes a tensor (each one a
    broadcast view of a single number), named as torchvision names its files: vgg16_bn-<sha256 prefix>.pth."""
    state = {f"features.{k}": torch.full((), i, dtype=v.dtype).expand(v.shape)
             for i, (k, v) in enumerate(EAST().features.state_dict().items())}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "weights.pth"
    torch.save(state, tmp)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()[:8]
    return tmp.rename(folder / f"vgg16_bn-{hash_prefix or digest}.pth"), state


@pytest.mark.slow
def test_imagenet_weights_are_downloaded_once_checked_and_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    src, state = imagenet_like_file(tmp_path / "server")
    assert src.stat().st_size < 200_000
    monkeypatch.setattr(east, "IMAGENET_URL", src.as_uri())
    said, model = [], EAST()
    assert east.init_backbone(model, "imagenet", said.append).startswith("ImageNet vgg16_bn")
    cached = tmp_path / "torch" / "hub" / "checkpoints" / src.name
    assert cached.read_bytes() == src.read_bytes() and str(cached) in said[0]
    assert torch.equal(model.features[40].weight, state["features.40.weight"])
    src.unlink()  # the hub cache serves it from now on
    east.init_backbone(EAST(), "imagenet", said.append)
    assert len(said) == 1


@pytest.mark.slow
@pytest.mark.parametrize("case", ["offline", "corrupt"])
def test_imagenet_weights_that_cannot_be_had_say_where_to_put_them(case, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    if case == "offline":
        url, expect = (tmp_path / "nowhere" / "vgg16_bn-6c64b313.pth").as_uri(), "cannot download .*Without a network"
    else:
        url, expect = imagenet_like_file(tmp_path / "server", "00000000")[0].as_uri(), "the download .* was corrupt"
    monkeypatch.setattr(east, "IMAGENET_URL", url)
    place = tmp_path / "torch" / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    with pytest.raises(UsageError, match=rf"^--backbone-weights imagenet: {expect}.*put it at {re.escape(str(place))}"
                                         r".*--backbone-weights random"):
        east.init_backbone(EAST(), "imagenet", print)
    assert not place.exists() and not list(place.parent.glob("*.partial"))


# ---------------------------------------------------------------- loss

def targets(b: int = 2, m: int = 16):
    gt_score = torch.zeros(b, 1, m, m, dtype=torch.uint8)
    gt_score[:, :, 4:12, 3:13] = 1
    gt_geo = torch.zeros(b, 5, m, m, dtype=torch.float16)
    gt_geo[:, :4], gt_geo[:, 4] = 6.0, 0.2
    roi = torch.ones(b, 1, m, m, dtype=torch.uint8)
    roi[:, :, :2] = 0
    return gt_score, gt_geo, roi


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("distance", [65504.0, 512.0])
def test_loss_is_finite_at_the_extremes_of_low_precision(dtype, distance):
    gt_score, gt_geo, roi = targets()
    score = torch.zeros(2, 1, 16, 16)
    score[..., ::2] = 1
    geo = torch.full((2, 5, 16, 16), distance)
    geo[:, 4], geo[:, 4, ::2] = math.pi / 2, -math.pi / 2
    score, geo = score.to(dtype).requires_grad_(), geo.to(dtype).requires_grad_()
    if dtype == torch.float16:  # the baseline computes the areas in the prediction dtype: inf, then NaN
        assert torch.isinf((geo[:, 0] + geo[:, 1]) * (geo[:, 2] + geo[:, 3])).all()
    parts = east_loss(score, geo, gt_score, gt_geo, roi)
    parts["loss"].backward()
    assert all(torch.isfinite(v) for v in parts.values())
    assert torch.isfinite(score.grad).all() and torch.isfinite(geo.grad).all()


def test_loss_of_a_perfect_prediction_is_zero():
    gt_score, gt_geo, roi = targets()
    parts = east_loss(gt_score.float(), gt_geo.float(), gt_score, gt_geo, roi)
    for k in ("cls", "iou", "angle"):
        assert parts[k].abs() < 1e-5, k


def test_loss_without_positives_has_zero_geometry_and_a_graph():
    gt_score, gt_geo, roi = targets()
    gt_score.zero_()
    score = torch.rand(2, 1, 16, 16, requires_grad=True)
    geo = torch.rand(2, 5, 16, 16, requires_grad=True)
    parts = east_loss(score, geo, gt_score, gt_geo, roi)
    assert parts["iou"] == 0 and parts["angle"] == 0
    assert parts["iou"].requires_grad and parts["angle"].requires_grad
    parts["loss"].backward()
    assert torch.isfinite(geo.grad).all() and geo.grad.abs().sum() == 0
    # no text predicted on a text-free crop: nothing to learn, and nothing added to the logged mean
    score = torch.zeros(2, 1, 16, 16, requires_grad=True)
    parts = east_loss(score, geo, gt_score, gt_geo, roi)
    assert parts["loss"] == 0 and parts["loss"].requires_grad
    # text predicted there: a loss, whose gradient descent lowers the score inside the roi
    score = torch.full((2, 1, 16, 16), 0.3, requires_grad=True)
    parts = east_loss(score, geo, gt_score, gt_geo, roi)
    assert parts["loss"] > 0
    parts["loss"].backward()
    inside = roi.bool().expand_as(score)
    assert (score.grad[inside] > 0).all() and (score.grad[~inside] == 0).all()


def test_pixels_outside_the_roi_do_not_count():
    gt_score, gt_geo, roi = targets()
    score = torch.rand(2, 1, 16, 16)
    geo = torch.rand(2, 5, 16, 16) * 10
    base = east_loss(score, geo, gt_score, gt_geo, roi)
    score[:, :, :2], geo[:, :, :2] = 0.9, 400.0  # rows 0-1 are don't-care
    again = east_loss(score, geo, gt_score, gt_geo, roi)
    assert all(torch.allclose(base[k], again[k]) for k in base)


def test_autocast_predicts_in_bf16_and_the_loss_is_float32():
    torch.manual_seed(0)
    ctx = engine.new_context(TrainConfig(amp="bf16"), Runtime())
    gt_score, gt_geo, roi = targets(1, 16)
    image = images.prepare_images(torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8), 0.5)
    batch = Batch(image, gt_score.float(), gt_geo, roi.float())
    model = EAST(0.5)
    seen = []
    model.score.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    parts = engine.forward_loss(model, batch, ctx)
    assert seen == [torch.bfloat16]
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in parts.values())


# ---------------------------------------------------------------- input

def test_jitter_keeps_the_range_and_differs_per_sample():
    torch.manual_seed(0)
    img = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    plain = images.prepare_images(img, 0.0)
    mean, std = torch.tensor(images.IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(images.IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.allclose(plain, (img / 255 - mean) / std)
    assert plain.is_contiguous(memory_format=torch.channels_last)
    x = images.color_jitter(img.float() / 255, 0.5)
    assert 0 <= x.min() and x.max() <= 1
    same = images.color_jitter(img[:1].expand(4, -1, -1, -1).float() / 255, 0.5)
    assert not torch.allclose(same[0], same[1]), "every sample draws its own factors"
    grey = torch.full((2, 3, 4, 4), 0.5)
    assert torch.allclose(images.hue_rotate(grey, torch.tensor([0.7, -1.2])), grey, atol=1e-5)


# ---------------------------------------------------------------- optimiser step

@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("scaled", [True, False])
def test_a_non_finite_step_is_skipped(fused, scaled):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, fused=fused)
    ctx = engine.new_context(TrainConfig(amp="fp16" if scaled else "off"), Runtime(), fused=fused)
    scaler = ctx.scaler
    w0 = model.weight.detach().clone()
    for loss_scale, expect_bad in ((math.nan, True), (1.0, False)):
        loss = model(torch.randn(3, 4)).sum() * loss_scale
        scaler.scale(loss).backward()
        assert bool(engine.optimizer_step(model, optimizer, ctx, loss.detach())) == expect_bad
        assert torch.equal(model.weight, w0) == expect_bad
    assert int(optimizer.state[model.weight]["step"]) == 1


@pytest.mark.slow
def test_non_finite_losses_in_a_row_abort(cache, tmp_path, monkeypatch):
    real = east_loss
    monkeypatch.setattr(engine, "east_loss", lambda *a: {k: v * math.nan for k, v in real(*a).items()})
    with pytest.raises(engine.NonFiniteLoss, match="3 optimiser steps in a row"):
        train_run(cache, tmp_path, "--epochs", "5", "--batch-size", "1", "--max-bad-steps", "3")
    steps = [r for r in read_log(tmp_path) if r["event"] == "step"]
    assert [r["bad_steps"] for r in steps] == [1, 2]


# ---------------------------------------------------------------- runs

def test_variants_rotate_under_persistent_workers(tiny_data, tmp_path):
    """Persistent workers keep a stale copy of the dataset: the epoch must travel with the indices (it picks the
    variant and, in page mode, the crop)."""
    ds = CacheDataset(make_tiny_cache(tiny_data, tmp_path / "c", variants=2, geometry="build"))
    sampler = EpochSampler(DistributedSampler(ds, num_replicas=1, rank=0, shuffle=False))
    loader = DataLoader(ds, batch_size=2, sampler=sampler, num_workers=1, collate_fn=collate,
                        persistent_workers=True)
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        seen.append(next(iter(loader))["image"])
        ds.set_epoch(epoch)
        assert torch.equal(seen[-1], collate([ds[0], ds[1]])["image"])
    assert ds.pages and not torch.equal(seen[0], seen[1]) and not torch.equal(seen[0], seen[2]), \
        "a page-mode cache gives a new crop every epoch"


@pytest.mark.slow
def test_a_short_run_logs_and_checkpoints(cache, tmp_path):
    log = train_run(cache, tmp_path, "--epochs", "2", "--batch-size", "1", "--accum-steps", "2", "--clip-grad", "5",
              "--val-cache", str(cache), "--workers", "1")
    ep = epochs_of(log)
    assert [r["epoch"] for r in ep] == [1, 2] and [r["step"] for r in ep] == [1, 2], "epochs count from 1"
    for r in ep:
        assert all(math.isfinite(r[k]) for k in ("loss", "cls", "iou", "angle", "val_loss", "samples_per_s"))
        assert 0 <= r["data_wait"] <= 1
    assert ep[1]["lr"] == pytest.approx(1e-4), "MultiStepLR: x0.1 at half the epochs"
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["best.pt", "epoch_1.pt", "epoch_2.pt", "latest.pt"]
    assert not list(tmp_path.glob("*.tmp"))
    ck = torch.load(tmp_path / "latest.pt", weights_only=True)
    assert {"model", "optimizer", "scaler", "scheduler", "epoch", "step", "train_config", "fingerprint"} <= ck.keys()
    assert ck["epoch"] == 2 and ck["fingerprint"] == CacheDataset(cache).fingerprint


@pytest.mark.slow
def test_resume_continues_from_the_saved_epoch(tiny_data, cache, tmp_path, capsys):
    train_run(cache, tmp_path, "--epochs", "1")
    log = train_run(cache, tmp_path, "--epochs", "2", "--resume", str(tmp_path / "latest.pt"))
    assert [(r["epoch"], r["step"]) for r in epochs_of(log)] == [(1, 1), (2, 2)]
    assert [r["event"] for r in log if r["event"] == "run"] == ["run", "run"], "each run starts with a header"
    assert torch.load(tmp_path / "epoch_2.pt", weights_only=True)["step"] == 2
    other = make_tiny_cache(tiny_data, tmp_path / "other", seed=7)
    capsys.readouterr()
    train_run(other, tmp_path / "r2", "--epochs", "3", "--resume", str(tmp_path / "latest.pt"))
    err = capsys.readouterr().err   # the same images built with other options: one warning line of ours
    said = [x for x in err.splitlines() if "build fingerprint" in x]
    assert len(said) == 1 and said[0].startswith("warning: "), err
    coarse = make_tiny_cache(tiny_data, tmp_path / "coarse", map_scale=0.25)
    with pytest.raises(UsageError, match="map-scale"):
        train_run(coarse, tmp_path / "r3", "--epochs", "3", "--resume", str(tmp_path / "latest.pt"))


@pytest.mark.slow
def test_a_cut_epoch_is_resumed_where_it_stopped(cache, tmp_path):
    """--max-steps 3 with 2 steps per epoch stops after the first step of epoch 2: --resume runs its second."""
    train_run(cache, tmp_path, "--epochs", "3", "--batch-size", "1", "--max-steps", "3")
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["epoch_1.pt", "epoch_2_step_3.pt", "latest.pt"]
    ck = torch.load(tmp_path / "latest.pt", weights_only=True)
    assert (ck["epoch"], ck["complete"], ck["micro_batches"], ck["step"]) == (2, False, 1, 3)
    assert ck["scheduler"]["last_epoch"] == 1, "the lr schedule does not count the cut epoch"
    log = train_run(cache, tmp_path / "r", "--epochs", "2", "--batch-size", "1", "--resume", str(tmp_path / "latest.pt"))
    assert [(r["epoch"], r["steps"], r["step"], r["complete"]) for r in epochs_of(log)] == [(2, 1, 4, True)]
    assert torch.load(tmp_path / "r" / "latest.pt", weights_only=True)["epoch"] == 2


@pytest.mark.slow
def test_resume_without_scaler_state_starts_a_fresh_scale(cache, tmp_path, capsys):
    """A checkpoint of a bf16 / float32 run has an empty GradScaler state; an fp16 run resumes from it."""
    train_run(cache, tmp_path, "--epochs", "1")
    model = EAST(0.5)
    optimizer = torch.optim.Adam(model.parameters())
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [1])
    ctx = engine.new_context(TrainConfig(amp="fp16"), Runtime())  # a GradScaler, as on CUDA
    capsys.readouterr()
    checkpoint.resume(tmp_path / "latest.pt", model, optimizer, scheduler, ctx, CacheDataset(cache))
    assert re.match(r"warning: .*latest\.pt has no GradScaler state.*fresh loss scale\n$", capsys.readouterr().err)
    assert (ctx.state.epoch, ctx.state.step, ctx.state.epoch_micro) == (1, 1, 0) and ctx.scaler.get_scale() == torch.amp.GradScaler("cpu").get_scale()


@pytest.mark.slow
def test_the_loss_falls_when_overfitting_two_images(cache, tmp_path):
    # 40 steps; the lr milestone (half of 80 epochs) is never reached
    log = train_run(cache, tmp_path, "--epochs", "80", "--max-steps", "40", "--jitter", "0", "--save-every", "1000")
    losses = [r["loss"] for r in log if r["event"] == "step"]
    assert len(losses) == 40
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)


@pytest.mark.slow
def test_profile_writes_a_chrome_trace(cache, tmp_path, capsys):
    train_run(cache, tmp_path, "--epochs", "3", "--profile", "1")
    assert json.loads((tmp_path / "profile_trace.json").read_text())["traceEvents"]
    assert "Self CPU" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.pt"))


def test_a_time_limit_stops_before_a_step_that_would_pass_it():
    """The check run's 120 s (or --time-limit) bounds the training: a run stops where the next step, as long as the
    last one, would end past the limit (it ran 126 s of a 120 s check run, stopping after the step that crossed)."""
    import time
    from types import SimpleNamespace
    now = time.perf_counter()
    ctx = SimpleNamespace(state=config.RunState(deadline=now + 5.0, step_s=8.0), rt=SimpleNamespace(world=1),
                          cfg=TrainConfig(log_every=20))
    assert engine.should_stop(ctx), "a step of 8 s would end 3 s past the limit"
    ctx.state.step_s = 1.0
    assert not engine.should_stop(ctx)
    ctx.state.deadline = now - 1.0
    assert engine.should_stop(ctx)


@pytest.mark.slow
def test_a_limit_met_at_the_runs_last_step_cut_nothing(cache, tmp_path, capsys):
    """A limit (--max-steps, the check run's) that falls on the last step of the last epoch leaves the run finished,
    not stopped by it (the check run logged `time-limit` after its whole epoch)."""
    log = train_run(cache, tmp_path / "r", "--epochs", "1", "--max-steps", "1")   # 1 step an epoch: batch 2 of 2
    assert [r["reason"] for r in log if r.get("event") == "end"] == ["finished"]
    assert "stopped at" not in capsys.readouterr().out


def test_cpu_defaults_are_a_short_check_run():
    def resolve(argv, device):
        return config.resolve_config(train.get_args_parser().parse_args(argv), torch.device(device))

    cfg = resolve([], "cpu")
    assert (cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.amp) == (1, config.CPU_BUDGET_STEPS, 1, "off")
    assert cfg.time_limit == config.CPU_BUDGET_SECONDS and cfg.check_run
    cfg = resolve([], "cuda")
    assert (cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.amp, cfg.check_run) == (50, None, 8, "fp16", False)
    # a run length given replaces the check run's limits, and only those: the batch stays the device's
    cfg = resolve(["--max-steps", "100"], "cpu")
    assert (cfg.epochs, cfg.max_steps, cfg.time_limit, cfg.batch_size, cfg.check_run) == (50, 100, None, 1, False)
    cfg = resolve(["--time-limit", "600"], "cpu")
    assert (cfg.epochs, cfg.max_steps, cfg.time_limit, cfg.batch_size) == (50, None, 600, 1), "not one epoch"
    with pytest.raises(UsageError, match="fp16"):
        resolve(["--amp", "fp16"], "cpu")


def test_a_missing_resume_checkpoint_is_named(tmp_path):
    """A --resume file that is not there is refused before the cache is opened (the numbers: test_numbers.py)."""
    with pytest.raises(UsageError, match=r"^--resume .*nope\.pt: no such checkpoint"):
        train.run(["--cache", str(tmp_path / "no-cache"), "--resume", str(tmp_path / "nope.pt")])


def test_a_missing_checkpoint_hint_names_the_runs_own_folder(tmp_path):
    """east-predict --checkpoint runs/fold0/best.pt where that run wrote no best.pt: the hint lists what runs/fold0
    holds (not another run's folder) and says when best.pt is written."""
    run = tmp_path / "runs" / "fold0"
    run.mkdir(parents=True)
    for name in ("epoch_1_step_20.pt", "latest.pt"):
        (run / name).write_bytes(b"")
    with pytest.raises(UsageError) as e:
        weights.load_checkpoint(run / "best.pt")
    assert f"{run} holds latest.pt, epoch_1_step_20.pt: pass one of them" in str(e.value)
    assert "runs/east" not in str(e.value) and "--val-data" in str(e.value)
    with pytest.raises(UsageError, match=f"e.g. {tmp_path / 'elsewhere' / 'latest.pt'}"):
        weights.load_checkpoint(tmp_path / "elsewhere" / "best.pt")
    with pytest.raises(UsageError, match=r"e.g. .*other/latest\.pt"):
        train.run(["--cache", str(tmp_path / "no-cache"), "--resume", str(tmp_path / "other" / "nope.pt")])
    with pytest.raises(UsageError, match=r"e.g. mine/latest\.pt"):
        train.run(["--eval-only", "--out", "mine"])


def test_a_run_that_promised_best_and_validated_nothing_says_what_to_use(tmp_path):
    """A signal stops a validating run inside its first epoch: no best.pt, and the last line says what to predict
    with instead; a run that validated, or validates nothing, says nothing of it."""
    state = config.RunState(last_checkpoint=tmp_path / "epoch_1_step_3.pt")
    assert "no best.pt" in train.no_best(TrainConfig(eval_every=1), state)
    assert str(tmp_path / "epoch_1_step_3.pt") in train.no_best(TrainConfig(eval_every=1), state)
    assert train.no_best(TrainConfig(), state) == ""
    state.best = {"metric": "hmean", "value": 0.5, "epoch": 1}
    assert train.no_best(TrainConfig(eval_every=1), state) == ""


@pytest.mark.slow
def test_a_run_cut_by_its_limit_inside_an_epoch_leaves_best_pt(cache, tmp_path):
    """The CPU check run (or --max-steps) stops inside the first epoch: that cut epoch is validated and becomes
    best.pt, which the README's loop predicts with."""
    train_run(cache, tmp_path, "--max-steps", "1", "--batch-size", "1", "--val-cache", str(cache))
    assert (tmp_path / "best.pt").samefile(tmp_path / "epoch_1_step_1.pt")
    assert weights.load_checkpoint(tmp_path / "best.pt")["best"]["epoch"] == 1


def test_cuda_asked_for_without_cuda_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match="--device cuda: no CUDA device here; pass --device cpu"):
        device.setup_device("cuda")
    with pytest.raises(UsageError, match="--device gpu: not a device"):
        device.setup_device("gpu")


def test_profile_traces_cuda_only_on_a_cuda_run(tmp_path, monkeypatch):
    from torch.profiler import ProfilerActivity
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine, but a --device cpu run
    prof = runtime.profiler(1, tmp_path, torch.device("cpu"), print)
    assert ProfilerActivity.CUDA not in prof.activities


@pytest.mark.parametrize("case", ["bad UFO file", "cache locked"])
def test_errors_of_rebuild_print_one_line(case, tiny_data, tmp_path, capsys):
    import shutil

    from east_cache.build.run import build_lock
    data = Path(shutil.copytree(tiny_data, tmp_path / "data"))
    stale = make_tiny_cache(data, tmp_path / "c")
    ufo = data / "ufo" / "train.json"
    if case == "bad UFO file":
        ufo.write_text(ufo.read_text()[:-10])
        lock, expect = contextlib.nullcontext(), r"train\.json: invalid JSON at line"
    else:
        for p in (data / "images").iterdir():
            os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
        lock, expect = build_lock(stale), r"/c: another build \(pid \d+\) is writing this cache"
    with lock:
        status = train.main(["--cache", str(stale), "--out", str(tmp_path / "run"), "--max-steps", "1", "--rebuild"])
    err = capsys.readouterr().err
    assert status == 2 and re.search(f"^error: .*{expect}", err) and "Traceback" not in err, err


@pytest.mark.slow
def test_a_stale_cache_stops_cleanly_or_is_rebuilt(tiny_data, tmp_path):
    import shutil
    data = Path(shutil.copytree(tiny_data, tmp_path / "data"))
    stale = make_tiny_cache(data, tmp_path / "c")
    for p in (data / "images").iterdir():
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    r = subprocess.run([sys.executable, "train.py", "--cache", str(stale), "--out", str(tmp_path / "run"),
                        "--max-steps", "1", "--workers", "0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "stale" in r.stderr and "Traceback" not in r.stderr, r.stderr
    log = train_run(stale, tmp_path / "run", "--max-steps", "1", "--rebuild")
    assert epochs_of(log)[0]["step"] == 1
    CacheDataset(stale)  # up to date again


@pytest.mark.slow
def test_two_processes_with_torchrun(cache, tmp_path):
    report = ["--report-to", "tensorboard"] if importlib.util.find_spec("tensorboard") else []   # rank 0's alone
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           "--cache", str(cache), "--out", str(tmp_path), "--epochs", "2", "--batch-size", "1", "--workers", "0",
           "--log-every", "1", "--backbone-weights", "random", *report]
    # PYTHONFAULTHANDLER: if a rank dies of a signal, its stderr says which thread was where
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert r.returncode == 0, r.stderr[-6000:]
    ep = epochs_of(read_log(tmp_path))
    assert [r["step"] for r in ep] == [1, 2], "two images over two ranks: one step per epoch"
    assert all(r["samples_per_s"] > 0 and math.isfinite(r["loss"]) for r in ep)
    assert (tmp_path / "latest.pt").exists()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == (1 if report else 0), "only rank 0 reports"


class Recorder:
    """A stream that records what is done to it, in events shared with os._exit's stand-in."""

    def __init__(self, name: str, events: list):
        self.name, self.events = name, events

    def write(self, text: str) -> int:
        self.events.append((self.name, text))
        return len(text)

    def flush(self) -> None:
        self.events.append((self.name, "flush"))


@pytest.mark.parametrize("world", ["1", "2"])
def test_a_torchrun_rank_flushes_its_output_then_ends_with_os_exit(world, monkeypatch):
    """entry() in this process: main()'s status either way; a rank of a multi-process job (WORLD_SIZE > 1) flushes
    both streams, then calls os._exit with it (no teardown); a single process exits through sys.exit."""
    events = []

    def exit_now(status):
        events.append(("os._exit", status))
        raise SystemExit(status)   # os._exit's stand-in must end entry() too
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setattr(sys, "stdout", Recorder("stdout", events))
    monkeypatch.setattr(sys, "stderr", Recorder("stderr", events))
    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr(train, "main", lambda: (print("done", end=""), 3)[-1])
    with pytest.raises(SystemExit) as e:
        train.entry()
    assert e.value.code == 3 and events[0] == ("stdout", "done")
    if world == "2":
        assert events[-3:] == [("stdout", "flush"), ("stderr", "flush"), ("os._exit", 3)]
    else:
        assert ("os._exit", 3) not in events


@pytest.mark.slow
def test_a_torchrun_rank_ends_without_the_teardown_once_its_output_is_out():
    """entry() as a rank's process (WORLD_SIZE 2): what it printed is out, the interpreter's teardown (an atexit hook
    stands for it) is skipped, where gloo runs aborted after finishing, and main()'s status is the process's."""
    code = ("import atexit, sys; from east_cache.train import train; atexit.register(lambda: print('teardown')); "
            "train.main = lambda: (print('done', end=''), sys.stderr.write('err'), 3)[-1]; train.entry()")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "WORLD_SIZE": "2", "PYTHONUNBUFFERED": ""})   # buffered, as by default
    assert r.returncode == 3 and r.stdout == "done" and r.stderr == "err", (r.stdout, r.stderr)


def test_a_batch_strategy_cache_is_read_a_file_per_batch(sample_root, tmp_path):
    """train.py's loader over a batch cache at its batch size: whole files in a shuffled order, each batch one
    slice (CacheDataset.__getitems__ gives SliceItems), read ahead by the prefetch thread when there are no workers."""
    build_cache(small_config(strategy="batch", batch_size=2, variants=1, crop="build"), [sample_root], tmp_path, jobs=1, quiet=True)
    ds = CacheDataset(tmp_path)
    loader = make_loader(ds, batch_size=2, train=True, seed=0, workers=0)
    assert isinstance(loader.sampler.base, BlockSampler)
    assert all(hasattr(ds.__getitems__(list(range(s, min(s + 2, len(ds))))), "rows") for s in range(0, len(ds), 2))
    seen = [b["image"] for b in batches(loader)]
    firsts = sorted(int(np.argmax([np.array_equal(b[0].numpy(), ds[i]["image"]) for i in range(len(ds))]))
                    for b in seen)
    assert firsts == [0, 2] and len(seen) == 2, "two whole batch files (the odd fifth image is dropped: drop_last)"


def test_threads_sets_torchs_intra_op_threads_of_train_and_predict_and_is_bounded(tmp_path, capsys):
    """--threads N: torch's intra-op threads, set before any work (here, before a missing input is named); not
    given, torch's own count stays; 0, a fraction or more than the machine's cores are one error line."""
    from east_cache.bounds import THREADS
    from east_cache.predict import predict
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2 if THREADS.most >= 2 else 1)
        kept = torch.get_num_threads()
        assert predict.main(["--checkpoint", str(tmp_path / "none.pt"), "--images", str(tmp_path)]) == 2
        assert train.main(["--cache", str(tmp_path / "none")]) == 2
        assert torch.get_num_threads() == kept, "the default leaves torch's count"
        assert predict.main(["--checkpoint", str(tmp_path / "none.pt"), "--images", str(tmp_path), "--threads",
                             "1"]) == 2
        assert torch.get_num_threads() == 1
        torch.set_num_threads(kept)
        assert train.main(["--cache", str(tmp_path / "none"), "--threads", "1"]) == 2
        assert torch.get_num_threads() == 1
        capsys.readouterr()
        for bad in ("0", "1.5", str(THREADS.most + 1), "nan"):
            for main in (train.main, predict.main):
                with pytest.raises(SystemExit) as e:
                    main(["--checkpoint", "x.pt", "--images", str(tmp_path), "--threads", bad])
                assert e.value.code == 2
                err = capsys.readouterr().err
                assert err.count("\n") == 1 and "--threads" in err and f"[1, {THREADS.most}]" in err, err
    finally:
        torch.set_num_threads(before)
