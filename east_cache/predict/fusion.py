"""Several checkpoints and test-time scales in one prediction (east-predict --checkpoint A --checkpoint B, --scales):
the models, how their outputs are combined, and the checks that make a combination meaningful.

Two ways to combine models (--fuse): `maps` averages their score and geometry maps before one decode (MapMean;
their maps must have one size, so models trained on caches of different map scales are refused), `quads` decodes
each model's maps alone and fuses the words as `east-cache ensemble` does (east_cache.evaluate.ensemble). Test-time
scales are always fused as quads: the maps of two input sizes do not overlay. FUSE_DEFAULT is `maps`, which decodes
once: benchmarks/bench_fusion.py measures both ways on two fold models (docs/performance.md), and docs/guide.md says
why the figure it gave keeps this default.
"""
from __future__ import annotations

from pathlib import Path

import torch

from east_cache.errors import UsageError
from east_cache.predict.weights import inference_model, load_checkpoint

FUSE = ("maps", "quads")
FUSE_DEFAULT = "maps"


class MapMean:
    """Models whose score (B, 1, h, w) and geo (B, 5, h, w) maps are averaged: one model to predict with."""

    def __init__(self, models: list):
        self.models = list(models)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outs = [m(x) for m in self.models]
        return torch.stack([s for s, _ in outs]).mean(dim=0), torch.stack([g for _, g in outs]).mean(dim=0)


def load_models(paths: list[Path], device: torch.device, fuse: str) -> tuple[list, list[dict]]:
    """(models in eval mode, their checkpoints) of --checkpoint paths; with fuse "maps" and two or more, a
    UsageError where their map scales differ (their maps cannot be averaged), naming both files."""
    cks = [load_checkpoint(p) for p in paths]   # every file read before any model is built: a bad one fails first
    if fuse == "maps":
        first = cks[0]["config"]["map_scale"]
        for p, ck in zip(paths[1:], cks[1:]):
            if ck["config"]["map_scale"] != first:
                raise UsageError(f"--checkpoint {p} was trained on a cache with maps at x{ck['config']['map_scale']}, "
                                 f"--checkpoint {paths[0]} at x{first}: their maps differ in size and cannot be "
                                 f"averaged; pass --fuse quads to fuse their words instead")
    return [inference_model(ck, p, device) for ck, p in zip(cks, paths)], cks


def runs(models: list, cks: list[dict], fuse: str) -> list[tuple[torch.nn.Module, float]]:
    """(model, map scale) of each prediction pass at one scale: one MapMean of all models with fuse "maps" (or a
    single model), else each model alone."""
    if fuse == "maps" and len(models) > 1:
        return [(MapMean(models), cks[0]["config"]["map_scale"])]
    return [(m, ck["config"]["map_scale"]) for m, ck in zip(models, cks)]
