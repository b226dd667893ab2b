"""Training's command line beyond training: detection metrics on a validation cache (every --eval-every epochs, and for a saved
checkpoint with --eval-only), the ONNX export checked in onnxruntime against PyTorch, and the errors that say
what to pass. One short run on 96 px crops of the sample pages provides the checkpoint, on the CPU (a run of one
step, for the tests that need a checkpoint but not its metrics)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import small_config
from torch import nn

from east_cache.reader import CacheDataset, collate
from east_cache.train import engine, train, validate
from east_cache.predict import weights
from east_cache.reader import images
from east_cache.train.config import TrainConfig
from east_cache.predict.device import Runtime
from east_cache.errors import UsageError
from east_cache.build.run import build_cache

METRICS = ("precision", "recall", "hmean")


def make_cache(data: Path, out: Path, **over) -> Path:
    build_cache(small_config(variants=1, **over), [data], out, jobs=1, quiet=True)
    return out


@pytest.fixture(scope="module")
def cache(sample_root, tmp_path_factory) -> Path:
    return make_cache(sample_root, tmp_path_factory.mktemp("eval") / "cache")


def main(*flags: str) -> str:
    """The command line with the given flags (errors raised); returns what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        train.run(list(flags))
    return printed.getvalue()


@pytest.fixture(scope="module")
def run(cache, tmp_path_factory) -> tuple[Path, str]:
    """Two epochs with the cache as its own validation set, metrics after the second: (out dir, printed)."""
    out = tmp_path_factory.mktemp("run")
    printed = main("--cache", str(cache), "--val-cache", str(cache), "--out", str(out), "--epochs", "2",
                   "--eval-every", "2", "--batch-size", "2", "--workers", "0", "--backbone-weights", "random")
    return out, printed


@pytest.fixture(scope="module")
def checkpoint_file(cache, tmp_path_factory) -> Path:
    """A checkpoint of one step (no validation): for the tests that need a checkpoint, not a trained model."""
    out = tmp_path_factory.mktemp("step")
    main("--cache", str(cache), "--out", str(out), "--max-steps", "1", "--batch-size", "2", "--workers", "0",
         "--backbone-weights", "random")
    return out / "latest.pt"


def epochs_of(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r for r in records if r["event"] == "epoch"]


class Oracle(nn.Module):
    """A perfect model: for each input image, the cached targets of the sample it is."""

    def __init__(self, ds: CacheDataset):
        super().__init__()
        batch = collate([ds[i] for i in range(len(ds))])
        self.x = images.prepare_images(batch["image"], 0.0)
        self.score, self.geo = batch["score"].float(), batch["geo"].float()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = [int((self.x - xi).abs().flatten(1).sum(1).argmin()) for xi in x]
        return self.score[k], self.geo[k]


def test_perfect_maps_score_a_perfect_hmean(cache):
    """The metrics path itself (batching, which sample's words, decoding, DetEval) loses nothing."""
    ds = CacheDataset(cache)
    ctx = engine.new_context(TrainConfig(batch_size=2), Runtime())  # 5 images: the last batch is partial
    m = validate.detection_metrics(Oracle(ds), ds, ctx)
    assert (m["precision"], m["recall"], m["hmean"]) == (1.0, 1.0, 1.0)


@pytest.mark.slow
def test_training_logs_detection_metrics_every_n_epochs(run):
    out, printed = run
    first, second = epochs_of(out)
    assert not set(METRICS) & first.keys(), "--eval-every 2: none after the first epoch"
    for k in METRICS:
        assert math.isfinite(second[k]) and 0 <= second[k] <= 1, (k, second[k])
    assert second["eval_seconds"] > 0
    assert f"hmean {second['hmean']:.4f}" in printed.splitlines()[-2]  # the second epoch's summary


@pytest.mark.slow
def test_eval_only_names_the_checkpoints_epoch_and_images(run, cache, tmp_path):
    """Bookkeeping only: this short run's model detects nothing, so its metrics are 0 either way. That --eval-only
    reproduces a logged figure is checked with a model that detects words, on full pages, in
    test_validate.py::test_eval_only_reproduces_the_logged_full_page_figure."""
    out, _ = run
    printed = main("--eval-only", "--checkpoint", str(out / "latest.pt"), "--val-cache", str(cache),
                   "--out", str(tmp_path), "--workers", "0")
    (record,) = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert record["epoch"] == 2 and record["images"] == 5
    assert "latest.pt (epoch 2)" in printed and f"hmean {record['hmean']:.4f}" in printed


@pytest.mark.slow
def test_eval_only_writes_beside_the_checkpoint_unless_told_otherwise(run, cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the training default, runs/east, would go
    elsewhere = tmp_path / "other_run"
    elsewhere.mkdir()
    (elsewhere / "model.pt").write_bytes((run[0] / "latest.pt").read_bytes())
    printed = main("--eval-only", "--checkpoint", str(elsewhere / "model.pt"), "--val-cache", str(cache))
    assert f"appended to {elsewhere / 'eval.jsonl'}" in printed
    assert (elsewhere / "eval.jsonl").is_file() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_onnx_export_matches_pytorch_at_two_sizes(run, tmp_path):
    pytest.importorskip("onnx", reason="--export-onnx needs the export extra: pip install -e '.[export]'")
    ort = pytest.importorskip("onnxruntime", reason="--export-onnx needs the export extra: pip install -e '.[export]'")
    ckpt = run[0] / "latest.pt"
    printed = main("--export-onnx", str(tmp_path / "east.onnx"), "--checkpoint", str(ckpt))
    assert "onnxruntime matches PyTorch" in printed
    session = ort.InferenceSession(str(tmp_path / "east.onnx"), providers=["CPUExecutionProvider"])
    model = weights.inference_model(weights.load_checkpoint(ckpt), ckpt, torch.device("cpu"))
    torch.manual_seed(0)
    for shape in ((1, 3, 64, 96), (2, 3, 128, 32)):
        x = images.prepare_images(torch.randint(0, 256, shape, dtype=torch.uint8), 0.0).contiguous()
        with torch.no_grad():
            want = model(x)
        got = session.run(["score", "geo"], {"image": x.numpy()})
        for g, w in zip(got, want):
            assert g.shape == (shape[0], w.shape[1], shape[2] // 2, shape[3] // 2)
            assert np.abs(g - w.numpy()).max() < 1e-3, shape


@pytest.mark.slow
def test_export_without_the_extra_says_what_to_install(checkpoint_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r'onnxruntime: pip install -e "\.\[export\]"'):
        main("--export-onnx", str(tmp_path / "east.onnx"), "--checkpoint", str(checkpoint_file))
    assert not (tmp_path / "east.onnx").exists()


@pytest.mark.parametrize("case", ["missing", "no checkpoint", "not a checkpoint",
                                  pytest.param("other map scale", marks=pytest.mark.slow)])   # a checkpoint to train
def test_eval_only_errors_name_the_file_and_what_to_do(case, sample_root, cache, tmp_path, request):
    ckpt, val = None, cache
    if case == "missing":
        ckpt, expect = tmp_path / "nope.pt", r"nope\.pt: no such checkpoint; pass a file that train\.py wrote"
    elif case == "no checkpoint":
        ckpt, expect = None, "--eval-only needs --checkpoint"
    elif case == "not a checkpoint":
        torch.save({"features.0.weight": torch.zeros(1)}, tmp_path / "vgg.pth")
        ckpt, expect = tmp_path / "vgg.pth", r"vgg\.pth: not a train\.py checkpoint"
    else:
        ckpt = request.getfixturevalue("checkpoint_file")
        val, expect = make_cache(sample_root, tmp_path / "coarse", map_scale=0.25), r"--map-scale 0\.5"
    flags = ["--eval-only", "--val-cache", str(val), "--out", str(tmp_path), "--workers", "0"]
    with pytest.raises(UsageError, match=expect):
        main(*flags, *(["--checkpoint", str(ckpt)] if ckpt else []))
    assert not (tmp_path / "eval.jsonl").exists()
