"""Stopping and going on: a run stopped by Ctrl-C (SIGINT) at a step boundary saves where it is, and --resume
continues exactly as if it had never stopped (place in the epoch, random states, lr schedule, loss sums);
--save-every-steps; a resume with nothing left to do says how to extend the run."""
from __future__ import annotations

import itertools
import os
import signal

import pytest
import torch
from helpers import epochs_of, read_log, run_args, train_run

from east_cache.train import engine, train
from east_cache.train.train import INTERRUPTED
from east_cache.errors import UsageError

# 2 images at batch 1: 2 steps an epoch; the lr drops after epoch 1 (half of 3); colour jitter on (the default)
FLAGS = ("--epochs", "3", "--batch-size", "1")


def steps_of(log: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in log if r["event"] == "step"}


@pytest.mark.slow
def test_a_run_stopped_by_ctrl_c_resumes_exactly(tiny_cache, tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    train_run(tiny_cache, whole, *FLAGS)
    real, calls = engine.east_loss, itertools.count(1)

    def ctrl_c_in_step_3(*args):
        if next(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args)
    monkeypatch.setattr(engine, "east_loss", ctrl_c_in_step_3)
    cut = tmp_path / "cut"
    before = signal.getsignal(signal.SIGINT)
    assert train.run(run_args(tiny_cache, cut, *FLAGS)) == INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is before, "the run's handler is removed after the run"
    log = read_log(cut)
    assert log[-1].pop("time").endswith("+00:00")
    assert log[-1] == {"event": "interrupted", "signal": signal.SIGINT, "epoch": 2, "step": 3,
                       "checkpoint": str(cut / "epoch_2_step_3.pt")}
    assert [(r["epoch"], r["complete"]) for r in epochs_of(log)] == [(1, True), (2, False)]
    ck = torch.load(cut / "latest.pt", weights_only=True)
    assert (ck["epoch"], ck["complete"], ck["micro_batches"], ck["step"]) == (2, False, 1, 3)

    monkeypatch.setattr(engine, "east_loss", real)
    log = train_run(tiny_cache, cut, *FLAGS, "--resume", str(cut / "epoch_2_step_3.pt"))
    a, b = (torch.load(d / "latest.pt", weights_only=True) for d in (whole, cut))
    assert a["step"] == b["step"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert torch.equal(a["optimizer"]["state"][0]["exp_avg"], b["optimizer"]["state"][0]["exp_avg"])
    assert a["scheduler"] == b["scheduler"]
    assert steps_of(read_log(whole)) == steps_of(log), "the same losses, step by step"
    whole_epochs, cut_epochs = epochs_of(read_log(whole)), epochs_of(log)
    assert whole_epochs[1]["loss"] == cut_epochs[-2]["loss"], "epoch 2's mean counts the steps before the stop"


@pytest.mark.slow
def test_save_every_steps_keeps_the_newest_mid_epoch_checkpoint(tiny_cache, tmp_path, monkeypatch):
    written = []
    real = train.save_checkpoint
    monkeypatch.setattr(train, "save_checkpoint", lambda state, path: (written.append(path.name), real(state, path)))
    train_run(tiny_cache, tmp_path, "--epochs", "2", "--batch-size", "1", "--save-every", "2", "--save-every-steps", "1")
    # step 1: mid-epoch; step 2 ends epoch 1 (not saved: --save-every 2); step 3 mid-epoch; step 4 ends the run
    assert written == ["epoch_1_step_1.pt", "epoch_2_step_3.pt", "epoch_2.pt"]
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["epoch_2.pt", "latest.pt"]


@pytest.mark.slow
def test_a_resume_with_nothing_left_says_how_to_go_on(tiny_cache, tmp_path):
    train_run(tiny_cache, tmp_path, "--epochs", "1", "--batch-size", "1")
    with pytest.raises(UsageError, match=r"latest\.pt has 1 epoch\(s\) done and --epochs is 1: nothing left to "
                                         r"train\. To train on, pass a larger --epochs, e.g\. --epochs 2"):
        train_run(tiny_cache, tmp_path, "--epochs", "1", "--resume", str(tmp_path / "latest.pt"))
    with pytest.raises(UsageError, match=r"at step 2 and --max-steps is 2: nothing left .* --max-steps 4"):
        train_run(tiny_cache, tmp_path, "--epochs", "5", "--max-steps", "2", "--resume", str(tmp_path / "latest.pt"))
    assert [r["event"] for r in read_log(tmp_path)].count("run") == 1, "no run was started"
