"""--export-onnx: a checkpoint's model as ONNX, checked in onnxruntime against PyTorch."""
from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import numpy as np
import torch

from east_cache.model.checkpoint import inference_model, load_checkpoint
from east_cache.model.model import EAST
from east_cache.errors import UsageError

ONNX_OPSET = 17              # --export-onnx; run by every onnxruntime since 1.13
EXPORT_MODULES = ("onnx", "onnxruntime")  # imported by --export-onnx: the exporter writes with onnx, the check runs ort
ONNX_TRACE_SHAPE = (1, 3, 64, 64)   # input the exporter traces; any multiple of 32 gives the same graph
ONNX_CHECK_SHAPE = (2, 3, 96, 128)  # another batch, height and width: the check shows they are dynamic


def export_onnx(checkpoint: Path, onnx_path: Path) -> None:
    """--export-onnx: the checkpoint's model as ONNX (batch, height, width dynamic), run once in onnxruntime
    against PyTorch on another shape than the traced one.

    It uses the TorchScript exporter (dynamo=False), deprecated since torch 2.9: on this plain conv net it gives
    the same outputs as the torch.export one in a tenth of the time (2 s against 20 s on 2 CPU cores), without
    symbolic-shape constraints for "a multiple of 32", and needs no onnxscript.
    """
    missing = [m for m in EXPORT_MODULES if not importable(m)]
    if missing:
        raise UsageError(f"--export-onnx needs {' and '.join(missing)}: pip install -e \".[export]\"")
    ck = load_checkpoint(checkpoint)
    model = inference_model(ck, checkpoint, torch.device("cpu"))
    maps = {0: "batch", 2: "map_height", 3: "map_width"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the exporter's own, see the docstring
        torch.onnx.export(model, (torch.zeros(ONNX_TRACE_SHAPE),), str(onnx_path), dynamo=False,
                          opset_version=ONNX_OPSET, input_names=["image"], output_names=["score", "geo"],
                          dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}, "score": maps, "geo": maps})
    diff = onnx_max_diff(onnx_path, model, torch.randn(ONNX_CHECK_SHAPE))
    print(f"wrote {onnx_path} ({checkpoint}, epoch {ck['epoch']}, maps at x{ck['config']['map_scale']}): "
          f"input 'image' (B, 3, H, W) float32 ImageNet-normalised RGB, H and W multiples of 32; outputs 'score' "
          f"and 'geo'. onnxruntime matches PyTorch within {diff:.1e} at {ONNX_CHECK_SHAPE}", flush=True)


def importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def onnx_max_diff(path: Path, model: EAST, x: torch.Tensor) -> float:
    """Largest absolute difference between onnxruntime's outputs for x and the model's (score, geo)."""
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model(x)
    out = session.run(None, {"image": x.numpy()})
    return max(float(np.abs(o - r.numpy()).max()) for o, r in zip(out, ref))
