"""The disk use a training run prints at its start counts a checkpoint once, whatever its names (latest.pt and
best.pt are hard links to an epoch file)."""
from __future__ import annotations

import os
import re

import torch

from east_cache.train.checkpoint import disk_use

MIB = 2**20


def test_a_checkpoint_with_three_names_counts_once(tmp_path):
    (tmp_path / "epoch_1.pt").write_bytes(b"\0" * (3 * MIB))
    os.link(tmp_path / "epoch_1.pt", tmp_path / "latest.pt")
    os.link(tmp_path / "epoch_1.pt", tmp_path / "best.pt")
    (tmp_path / "log.jsonl").write_bytes(b"\0" * MIB)
    held = re.search(r"holds (\d+) MB", disk_use(tmp_path, torch.nn.Linear(2, 2)))
    assert int(held[1]) == 4
