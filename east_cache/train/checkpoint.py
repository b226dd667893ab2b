"""Checkpoints of a training run: written atomically (epoch_N.pt, with latest.pt a hard link to the newest and best.pt
one to the best by validation; only the newest --keep-last epochs kept) and restored into a run (--resume, exactly
where it stopped, on the cache it was trained on; --init-from, its weights only); --export-onnx, which writes a
checkpoint's model as ONNX checked in onnxruntime. Reading one back for inference is east_cache/predict/weights.py's.

A checkpoint records what it was trained on (`trained_on`): the cache's folder, a digest of its sample set, its
image count, input size and map scale. The sample set is every image's name, its annotation entry's fingerprint
and its file (by the bytes where the build hashed them, --check-content; else by its size, so that a copy of the
data set with new modification times is the same set), and the variants per image."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import re
import shlex
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from east_cache.augment import FLAGS, Augment, flag, fmt
from east_cache.reader import CacheDataset
from east_cache.train.config import RunState, TrainConfig, invoked_as
from east_cache.train.engine import Context
from east_cache.model.model import EAST
from east_cache.train.report import IDS_FILE
from east_cache.predict.device import Runtime
from east_cache.predict.weights import BEST, LATEST, inference_model, load_checkpoint
from east_cache.errors import UsageError, cache_command, stderr_line
from east_cache.inputs import nearest_existing
from east_cache.atomic import fsync_path, replacing

# what a run writes in --out (inputs.refuse_overwrite): no input may lie there (a --resume checkpoint may: the
# run it continues writes there)
EVAL_LOG = "eval.jsonl"   # what --eval-only writes there
RUN_WRITES = (LATEST, BEST, "epoch_*.pt", "*.tmp", "log.jsonl", EVAL_LOG, "profile_trace.json",
              "events.out.tfevents.*", "wandb", IDS_FILE)   # the last three: --report-to's
COMPLETE_NAME = re.compile(r"epoch_(\d+)\.pt")   # what checkpoint_name calls a complete epoch's file
CUT_NAME = re.compile(r"epoch_(\d+)_step_\d+\.pt")   # and a checkpoint saved inside epoch N (Ctrl-C, a limit)
ONNX_OPSET = 17              # --export-onnx; run by every onnxruntime since 1.13
EXPORT_MODULES = ("onnx", "onnxruntime")  # imported by --export-onnx: the exporter writes with onnx, the check runs ort
ONNX_TRACE_SHAPE = (1, 3, 64, 64)   # input the exporter traces; any multiple of 32 gives the same graph
ONNX_CHECK_SHAPE = (2, 3, 96, 128)  # another batch, height and width: the check shows they are dynamic


def save_atomic(obj, path: Path) -> None:
    """Readers see the old file or the new one, never half of one, even after a power cut."""
    with replacing(path, ".tmp") as tmp:   # a full disk, a second Ctrl-C: no temp file left behind
        torch.save(obj, tmp)


def save_checkpoint(state: dict, path: Path) -> None:
    """path (e.g. OUT/epoch_N.pt), then latest.pt beside it as a hard link to it (no second write), both atomic."""
    save_atomic(state, path)
    link_as(path, LATEST)


def link_as(path: Path, name: str) -> None:
    """name beside path (latest.pt, best.pt) becomes a hard link to it (no second write), atomically; a
    removed epoch file lives on in the links to it."""
    with replacing(path.parent / name, ".tmp", "--out", sync=False) as tmp:   # path's bytes are synced already
        try:
            os.link(path, tmp)
        except OSError:  # file systems without hard links
            shutil.copyfile(path, tmp)
    fsync_path(path.parent)


def prune(out: Path, keep_last: int) -> list[Path]:
    """Remove all but the newest keep_last epoch_N.pt files of out (0: keep all), and every checkpoint saved inside
    an epoch (epoch_N_step_S.pt: by Ctrl-C, a limit, --save-every-steps, in this run or one it resumed) that a
    complete epoch N or later supersedes; latest.pt and best.pt stay whole, being links. Returns the removed files."""
    epochs = sorted((int(m[1]), p) for p in out.glob("epoch_*.pt") if (m := COMPLETE_NAME.fullmatch(p.name)))
    newest = epochs[-1][0] if epochs else 0
    cut = [p for p in out.glob("epoch_*_step_*.pt") if (m := CUT_NAME.fullmatch(p.name)) and int(m[1]) <= newest]
    old = [p for _, p in epochs[:-keep_last]] + sorted(cut) if keep_last else []
    for p in old:
        p.unlink(missing_ok=True)
    return old


def validation_score(stats: dict, cfg: TrainConfig) -> tuple[str, float] | None:
    """What best.pt is judged by: the epoch's hmean when detection metrics run (--eval-every), else its
    validation loss (--val-cache); None when the epoch has no such figure (or the run no validation)."""
    metric = "hmean" if cfg.eval_every else "val_loss" if cfg.val_cache else None
    value = stats.get(metric) if metric else None
    return (metric, value) if value is not None and math.isfinite(value) else None


def improves(score: tuple[str, float], best: dict | None) -> bool:
    """Whether score beats the best so far (a higher hmean, a lower loss; any score beats none or another kind)."""
    if best is None or best["metric"] != score[0]:
        return True
    return score[1] > best["value"] if score[0] == "hmean" else score[1] < best["value"]


def disk_use(out: Path, model) -> str:
    """The size of one checkpoint (the weights and Adam's two moments), what out holds now and the space free. A
    file with several names (latest.pt and best.pt are hard links to epoch files) counts once."""
    per = 3 * sum(t.numel() * t.element_size() for t in model.state_dict().values())
    stats = [f.stat() for f in out.rglob("*") if f.is_file()] if out.is_dir() else []
    held = sum(st.st_size for st in {(st.st_dev, st.st_ino): st for st in stats}.values())
    free = shutil.disk_usage(nearest_existing(out)).free
    return f"about {per / 2**20:.0f} MB a checkpoint; {out} holds {held / 2**20:.0f} MB, {free / 2**30:.1f} GB free"


def sample_set(ds: CacheDataset) -> dict:
    """The `trained_on` record of a checkpoint (the module's docstring says what it holds)."""
    def image_file(fingerprint: str) -> str:   # "st:SIZE:MTIME" -> "st:SIZE"; content hashes as they are
        return ":".join(fingerprint.split(":")[:2]) if fingerprint.startswith("st:") else fingerprint
    images = {name: [src.ann, image_file(src.file)] for name, src in sorted(ds.manifest.images.items())}
    text = json.dumps({"images": images, "variants": ds.config.variants}, sort_keys=True)
    return {"cache": str(ds.cache_dir), "samples": hashlib.blake2b(text.encode(), digest_size=16).hexdigest(),
            "images": len(images), "input_size": ds.config.input_size, "map_scale": ds.config.map_scale}


def checkpoint_name(epoch: int, step: int, complete: bool) -> str:
    """epoch_N.pt after epoch N (1-based, as in the log), epoch_N_step_S.pt at step S inside it."""
    return f"epoch_{epoch}.pt" if complete else f"epoch_{epoch}_step_{step}.pt"


def rng_states(rt: Runtime) -> list[dict]:
    """Every rank's generator states (the jitter draws from them); under DDP a collective: all ranks call it."""
    mine = {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(rt.device) if rt.device.type == "cuda" else None}
    if rt.world == 1:
        return [mine]
    every = [None] * rt.world
    dist.all_gather_object(every, mine)
    return every


def checkpoint_state(model, optimizer, scheduler, ctx: Context, ds: CacheDataset, rng: list[dict],
                     complete: bool) -> dict:
    """Everything --resume needs to go on as if never stopped: weights, optimiser, loss scale, lr schedule,
    random states, and the place in the epoch (1-based `epoch`; `micro_batches` of it done unless complete)."""
    s = ctx.state
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": ctx.scaler.state_dict(),
            "scheduler": scheduler.state_dict(), "epoch": s.epoch + 1, "complete": complete,
            "micro_batches": 0 if complete else s.epoch_micro, "step": s.step,
            "epoch_sums": None if complete else s.epoch_sums.tolist(),
            "bad_steps": [int(s.bad_run), int(s.bad_total)], "rng": rng, "world": ctx.rt.world,
            "train_config": ctx.cfg.to_dict(), "fingerprint": ds.fingerprint, "config": ds.config.to_dict(),
            "trained_on": sample_set(ds), "best": s.best, "augment": ds.aug.to_dict(),
            "transform": ds.transform.record if ds.transform is not None else None,
            "selection": ds.chosen.to_dict()}   # the images it trains on (--split, --repeat): --resume keeps them


def check_fits_cache(ck: dict, path: Path, ds: CacheDataset) -> None:
    """A model predicts maps at the scale it was trained for: a cache at another scale (or crop size, as
    check_caches demands of a validation cache) would be scored against targets it never learnt."""
    want = (trained_size(ck), ck["config"]["map_scale"])
    have = (ds.size, ds.config.map_scale)
    if want != have:
        raise UsageError(f"{path} was trained on {want[0]}px crops with maps at x{want[1]} but {ds.cache_dir} holds "
                         f"{have[0]}px at x{have[1]}; evaluate on a cache built with `{cache_command('build')} "
                         f"--input-size {want[0]} --map-scale {want[1]}`")


def trained_size(ck: dict) -> int:
    """The crop side a checkpoint was trained on: its recorded augmentation's, else its cache's."""
    return (ck.get("augment") or ck["config"])["input_size"]


def run_augment(given: dict, ds: CacheDataset, ck: dict | None = None, path: Path | None = None) -> Augment:
    """The run's Augment: the flags given (field names, None: not given) over the cache's build values; with
    --resume (ck, the checkpoint at path) the recorded one, and a flag that asks for another value is refused: an
    exact resume draws the crops the run would have drawn (start a new run from the weights with --init-from)."""
    recorded = ck.get("augment") if ck is not None else None
    if recorded is None:   # a new run, or a checkpoint from before the augmentation was recorded
        return Augment.of_cache(ds.config, **given)
    aug = Augment.from_dict(recorded)
    other = dataclasses.replace(aug, **{k: v for k, v in given.items() if v is not None})
    if other != aug:
        flags = ", ".join(f"--{flag(k)} {fmt(getattr(other, k))} (recorded {fmt(getattr(aug, k))})"
                          for k in FLAGS if getattr(other, k) != getattr(aug, k))
        raise UsageError(f"--resume {path}: {flags}: the run was trained with {aug.describe()}, and a resume goes on "
                         f"with the recorded augmentation so that it draws the crops the run would have drawn; drop "
                         f"those flags, or start a new run from its weights with --init-from {path}")
    return aug


def check_same_samples(ck: dict, path: Path, ds: CacheDataset, say) -> None:
    """--resume goes on with the same images in the same order only on the sample set it was trained on: another
    is refused, naming both caches and --init-from. A checkpoint from before `trained_on` was recorded is
    resumed as before, with a warning that nothing could be checked."""
    was, now = ck.get("trained_on"), sample_set(ds)
    if was is None:
        say(f"{path} does not record the cache it was trained on (an older train.py wrote it): resuming on "
            f"{ds.cache_dir} unchecked")
        return
    # the crop side of a cache stored resized only is the run's choice (its Augment, checked by run_augment)
    if was["samples"] != now["samples"] or (not ds.config.warps_at_read and was["input_size"] != now["input_size"]):
        raise UsageError(f"--resume {path}: it was trained on {was['cache']} ({was['images']} images, "
                         f"{was['input_size']} px), but --cache {ds.cache_dir} holds another sample set "
                         f"({now['images']} images, {now['input_size']} px); resume with --cache {was['cache']}, "
                         f"or start a new run from its weights on this cache with --init-from {path}")


def init_from(path: Path, model, ds: CacheDataset) -> str:
    """--init-from: the checkpoint's weights only (the optimiser, the schedule and the epochs start afresh), for
    going on with other data; its head must be for the cache's map scale. Returns what the run started from."""
    ck = load_checkpoint(path)
    if ck["config"]["map_scale"] != ds.config.map_scale:
        raise UsageError(f"--init-from {path}: its head predicts maps at x{ck['config']['map_scale']}, "
                         f"{ds.cache_dir} holds maps at x{ds.config.map_scale}; pass a checkpoint trained at "
                         f"--map-scale {ds.config.map_scale}, or build the cache at x{ck['config']['map_scale']}")
    model.load_state_dict(ck["model"])
    was = ck.get("trained_on") or {"cache": "an unrecorded cache"}
    return f"weights of {path} (epoch {ck['epoch']}, trained on {was['cache']}); optimiser and schedule anew"


def resume(path: Path, model, optimizer, scheduler, ctx: Context, ds: CacheDataset) -> dict:
    """Restore everything from a checkpoint into the run; ctx.state then says where to go on. Returns it."""
    ck = load_checkpoint(path)
    if ck["config"]["map_scale"] != ds.config.map_scale:
        raise UsageError(f"{path} has a head for map_scale {ck['config']['map_scale']}, {ds.cache_dir} has "
                         f"{ds.config.map_scale}; resume on a cache built with the same --map-scale")
    say = warning_line if ctx.rt.rank == 0 else (lambda *a, **k: None)
    check_same_samples(ck, path, ds, say)
    if ck["fingerprint"] != ds.fingerprint:
        say(f"{path} was trained on a cache with another build fingerprint ({ck['fingerprint']}) than "
            f"{ds.cache_dir} ({ds.fingerprint}): the config or the target code changed")
    model.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck["optimizer"])
    scheduler.load_state_dict(ck["scheduler"])
    if ctx.scaler.is_enabled() and ck["scaler"]:
        ctx.scaler.load_state_dict(ck["scaler"])
    elif ctx.scaler.is_enabled():  # trained without GradScaler: --amp bf16 / off, or the CPU
        say(f"{path} has no GradScaler state (trained without --amp fp16); starting from a fresh loss scale")
    restore_position(ck, path, ctx, say)
    return ck


def warning_line(msg: str) -> None:
    """One `warning: ...` line on stderr: the project's own, not Python's warnings module (whose line names this
    source file and is shown once per place)."""
    stderr_line(f"warning: {msg}")


def restore_position(ck: dict, path: Path, ctx: Context, say) -> None:
    """Step, epoch, place in the epoch, bad-step counts and random states. Checkpoints from before these were
    saved (no `complete` entry) hold whole epochs only."""
    s, cfg, rt = ctx.state, ctx.cfg, ctx.rt
    s.step = ck["step"]
    complete = ck.get("complete", True)
    s.epoch = ck["epoch"] if complete else ck["epoch"] - 1
    if not complete:
        saved = ck["train_config"]
        same = (saved["batch_size"], saved["accum_steps"], ck["world"]) == (cfg.batch_size, cfg.accum_steps, rt.world)
        if same:
            s.epoch_micro = ck["micro_batches"]
            s.epoch_sums = torch.tensor(ck["epoch_sums"], device=rt.device)
        else:
            say(f"{path} stopped inside epoch {ck['epoch']} with another batch size, accumulation or process "
                f"count; that epoch starts over")
    s.best = ck.get("best")
    if "bad_steps" in ck:
        s.bad_run.fill_(ck["bad_steps"][0])
        s.bad_total.fill_(ck["bad_steps"][1])
    rng = ck.get("rng") or []
    if len(rng) == rt.world:
        torch.set_rng_state(rng[rt.rank]["cpu"])
        if rt.device.type == "cuda" and rng[rt.rank]["cuda"] is not None:
            torch.cuda.set_rng_state(rng[rt.rank]["cuda"], rt.device)
    else:
        say(f"{path} holds no random state for {rt.world} process(es): the jitter will differ from a run that "
            f"was never stopped")


def nothing_left(cfg: TrainConfig, state: RunState) -> None:
    """A resumed run whose epochs or steps are all done already stops here, saying how to go on."""
    if state.epoch >= cfg.epochs:
        raise UsageError(f"{cfg.resume} has {state.epoch} epoch(s) done and --epochs is {cfg.epochs}: nothing left "
                         f"to train. To train on, pass a larger --epochs, e.g. --epochs {state.epoch + cfg.epochs}")
    if state.step_limit is not None and state.step >= state.step_limit:
        why = "the check run's limit without a GPU" if cfg.check_run else "--max-steps"
        raise UsageError(f"{cfg.resume} is at step {state.step} and {why} is {state.step_limit}: nothing left to "
                         f"train. To train on, pass a larger --max-steps, e.g. --max-steps {2 * state.step}"
                         + (", or --epochs N" if cfg.check_run else ""))


def resume_command(argv: list[str], checkpoint: Path, world: int, drop: tuple[str, ...] = ()) -> str:
    """The command that was run, with --resume CHECKPOINT in place of any --resume or --init-from it had (they do
    not go together), and without the options in `drop` (each takes a value)."""
    drop, kept, skip = ("--resume", "--init-from", *drop), [], False
    for a in argv:
        if skip or a.startswith(tuple(f"{d}=" for d in drop)):
            skip = False
            continue
        skip = a in drop
        if not skip:
            kept.append(a)
    head = ["torchrun", f"--nproc_per_node={world}", sys.argv[0]] if world > 1 else invoked_as()
    return shlex.join([*head, *kept, "--resume", str(checkpoint)])


# ---------------------------------------------------------------- --export-onnx

def export_onnx(checkpoint: Path, onnx_path: Path) -> None:
    """--export-onnx: the checkpoint's model as ONNX (batch, height, width dynamic), run once in onnxruntime
    against PyTorch on another shape than the traced one.

    It uses the TorchScript exporter (dynamo=False), deprecated since torch 2.9: on this plain conv net it gives
    the same outputs as the torch.export one, much faster, without symbolic-shape constraints for "a multiple of
    32", and needs no onnxscript.
    """
    missing = [m for m in EXPORT_MODULES if not importable(m)]
    if missing:
        raise UsageError(f"--export-onnx needs {' and '.join(missing)}: pip install -e \".[export]\"")
    ck = load_checkpoint(checkpoint)
    model = inference_model(ck, checkpoint, torch.device("cpu"))
    maps = {0: "batch", 2: "map_height", 3: "map_width"}
    with warnings.catch_warnings(), replacing(onnx_path, flag="--export-onnx") as tmp:
        warnings.simplefilter("ignore", DeprecationWarning)  # the exporter's own, see the docstring
        torch.onnx.export(model, (torch.zeros(ONNX_TRACE_SHAPE),), str(tmp), dynamo=False,
                          opset_version=ONNX_OPSET, input_names=["image"], output_names=["score", "geo"],
                          dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}, "score": maps, "geo": maps})
        diff = onnx_max_diff(tmp, model, torch.randn(ONNX_CHECK_SHAPE))   # checked before it takes the name
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
