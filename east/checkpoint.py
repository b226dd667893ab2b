"""Checkpoints: written atomically (epoch_N.pt, with latest.pt a hard link to the newest), read back with
errors that name the file, and restored into a run (--resume) or an inference model (--eval-only, export)."""
from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch

from dataset import CacheDataset
from east.engine import Context
from east.model import EAST
from preprocess.errors import UsageError


def save_atomic(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(state: dict, path: Path) -> None:
    """path (e.g. OUT/epoch_N.pt), then latest.pt beside it as a hard link to it (no second write), both atomic."""
    out = path.parent
    save_atomic(state, path)
    tmp = out / "latest.pt.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # file systems without hard links
        shutil.copyfile(path, tmp)
    os.replace(tmp, out / "latest.pt")


def checkpoint_state(model, optimizer, scheduler, ctx: Context, epoch: int, ds: CacheDataset) -> dict:
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": ctx.scaler.state_dict(),
            "scheduler": scheduler.state_dict(), "epoch": epoch, "step": ctx.state.step,
            "train_config": ctx.cfg.to_dict(),
            "fingerprint": ds.fingerprint, "config": ds.config.to_dict()}


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by train.py, or a UsageError that names the file and says what to pass."""
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint; pass a file that train.py wrote, e.g. runs/east/latest.pt")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, not a torch file, foreign pickle: all unreadable alike
        raise UsageError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {str(e)[:200]}); "
                         f"pass a file that train.py wrote, e.g. runs/east/latest.pt") from None
    if not isinstance(ck, dict) or not {"model", "config", "epoch"} <= ck.keys():
        raise UsageError(f"{path}: not a train.py checkpoint (no model, config and epoch entries); a torchvision "
                         f"backbone goes to --backbone-weights")
    return ck


def inference_model(ck: dict, path: Path, device: torch.device) -> EAST:
    """The checkpoint's model in eval mode, its head at the map scale of the cache it was trained on."""
    model = EAST(ck["config"]["map_scale"])
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise UsageError(f"{path}: its weights do not fit this EAST model ({str(e)[:300]}); was it written by "
                         f"another version of train.py?") from None
    return model.to(device, memory_format=torch.channels_last).eval()


def check_fits_cache(ck: dict, path: Path, ds: CacheDataset) -> None:
    """A model predicts maps at the scale it was trained for: a cache at another scale (or crop size, as
    check_caches demands of a validation cache) would be scored against targets it never learnt."""
    want = (ck["config"]["input_size"], ck["config"]["map_scale"])
    have = (ds.config.input_size, ds.config.map_scale)
    if want != have:
        raise UsageError(f"{path} was trained on {want[0]}px crops with maps at x{want[1]} but {ds.cache_dir} holds "
                         f"{have[0]}px at x{have[1]}; evaluate on a cache built with `python -m preprocess build "
                         f"--input-size {want[0]} --map-scale {want[1]}`")


def resume(path: Path, model, optimizer, scheduler, ctx: Context, ds: CacheDataset) -> int:
    """Restore everything from a checkpoint; returns the number of epochs already done."""
    ck = load_checkpoint(path)
    if ck["config"]["map_scale"] != ds.config.map_scale:
        raise UsageError(f"{path} has a head for map_scale {ck['config']['map_scale']}, {ds.cache_dir} has "
                         f"{ds.config.map_scale}; resume on a cache built with the same --map-scale")
    if ck["fingerprint"] != ds.fingerprint and ctx.rt.rank == 0:
        warnings.warn(f"{path} was trained on a cache with another build fingerprint ({ck['fingerprint']}) than "
                      f"{ds.cache_dir} ({ds.fingerprint}): the config or the target code changed", stacklevel=2)
    model.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck["optimizer"])
    scheduler.load_state_dict(ck["scheduler"])
    if ctx.scaler.is_enabled() and ck["scaler"]:
        ctx.scaler.load_state_dict(ck["scaler"])
    elif ctx.scaler.is_enabled() and ctx.rt.rank == 0:  # trained without GradScaler: --amp bf16 / off, or the CPU
        warnings.warn(f"{path} has no GradScaler state (trained without --amp fp16); starting from a fresh loss "
                      f"scale", stacklevel=2)
    ctx.state.step = ck["step"]
    return ck["epoch"]

