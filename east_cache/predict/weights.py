"""A checkpoint that train.py wrote, read back for inference: the file read with errors that name it and say what to
pass instead (load_checkpoint), and its model in eval mode (inference_model), as east-predict, --eval-only and
--export-onnx use it."""
from __future__ import annotations

from pathlib import Path

import torch

from east_cache.errors import UsageError
from east_cache.model.model import EAST

LATEST, BEST = "latest.pt", "best.pt"          # links to the newest checkpoint and to the best by validation


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by train.py, or a UsageError that names the file and says what to pass."""
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint; {checkpoint_advice(path)}")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, not a torch file, foreign pickle: all unreadable alike
        raise UsageError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {str(e)[:200]}); "
                         f"{checkpoint_advice(path)}") from None
    if not isinstance(ck, dict) or not {"model", "config", "epoch"} <= ck.keys():
        raise UsageError(f"{path}: not a train.py checkpoint (no model, config and epoch entries); a torchvision "
                         f"backbone goes to --backbone-weights")
    return ck


def checkpoint_advice(path: Path) -> str:
    """What to pass instead of path, a checkpoint that is missing or unreadable, in the run's own folder (path's):
    the checkpoints that folder holds, or its latest.pt; why a best.pt may be missing."""
    path = Path(path)
    run = path.parent
    held = sorted((p.name for p in run.glob("*.pt") if p != path), key=lambda n: (n not in (BEST, LATEST), n)) \
        if run.is_dir() else []
    why = (f" ({BEST} is written once validation has scored an epoch: a run given --val-data or --val-cache that "
           f"was not stopped by a signal)" if path.name == BEST else "")
    if held:
        return f"{run} holds {', '.join(held)}: pass one of them, e.g. {run / held[0]}{why}"
    return f"pass a file that train.py wrote into its --out, e.g. {run / LATEST}{why}"


def inference_model(ck: dict, path: Path, device: torch.device) -> EAST:
    """The checkpoint's model in eval mode, its head at the map scale of the cache it was trained on."""
    model = EAST(ck["config"]["map_scale"])
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise UsageError(f"{path}: its weights do not fit this EAST model ({str(e)[:300]}); was it written by "
                         f"another version of train.py?") from None
    return model.to(device, memory_format=torch.channels_last).eval()
