"""A run's log read (records: a damaged line left out, huge integers read as floats) and its recipe as flat `name:
value` pairs, and what the tracking back-ends are handed: read from the header record that starts each run's lines in
log.jsonl (east_cache.train.runtime.run_header), without torch, so that `east-cache runs` and every back-end see the
same names.

The names follow the records: every TrainConfig field as it is (a nested one, such as an augmentation object, as
`field.sub`), the training cache's build options as `cache.NAME`, and `cache.fingerprint`, `val_cache.fingerprint`,
`augment.FIELD` (the Augment the crops were drawn by: the flags over the cache's build values), `augment_recipe.text` (the --augment recipe's text as read: two runs of one file edited in between differ),
`code.package`, `code.east`, `world`. A field that another change adds to TrainConfig or to the cache's BuildConfig
appears here without an edit. `east-cache runs` shows each augmentation option once, with the value the run used
(effective).
"""
from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from east_cache.augment import FLAGS as AUGMENT_FLAGS
from east_cache.config import READER_ONLY
from east_cache.store.selection import repeat_text

# What a back-end records of a step and of an epoch record, under which prefix. Every other number of an epoch
# record (samples_per_s, data_wait, seconds, eval_seconds, bad_steps...) goes under `epoch/`.
STEP_KEYS = ("loss", "cls", "iou", "angle", "lr", "samples_per_s", "data_wait")
VAL_KEYS = ("precision", "recall", "hmean", "detections")   # detection metrics (--eval-every)
NOT_METRICS = ("event", "epoch", "step", "complete", "time")
# Header entries that name where and how this process ran, not what was trained: never an option that runs differ in
NOT_RECIPE = ("out", "resume", "run_name", "report_to")


def flatten(value, prefix: str = "") -> dict:
    """{"a.b": scalar} of nested dicts; lists as JSON text; None, bool, int, float and str as they are."""
    if isinstance(value, dict):
        flat = {}
        for k, v in value.items():
            flat.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    if value is None or isinstance(value, (bool, int, float, str)):
        return {prefix: value}
    if isinstance(value, (list, tuple)):
        return {prefix: json.dumps(value)}
    return {prefix: str(value)}


def big_int(text: str) -> int | float:
    """A JSON integer as json reads it, except one of more digits than a float holds exactly: a float (inf past its
    range), so that no figure of a log (a 400-digit loss, a pid) overflows where it is formatted or compared."""
    return int(text) if len(text.lstrip("-")) <= 18 else float(text)


def records(path: Path) -> list[dict]:
    """A JSONL log's records; a line that is no JSON object (a run killed while writing it) is left out."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            r = json.loads(line, parse_int=big_int)
        except (ValueError, RecursionError):
            continue
        if isinstance(r, dict):
            found.append(r)
    return found


def recipe_of(header: dict) -> dict:
    """Every option of a run (a `run` record of log.jsonl), flat, in a fixed order: the flags, the cache's build
    options and fingerprint, the code version, the process count and the command line."""
    config = {k: v for k, v in (header.get("config") or {}).items() if k not in NOT_RECIPE}
    found = flatten({**config, "repeat": repeat_text(config.get("repeat")) or None} if "repeat" in config else config)
    found.update(flatten(header.get("cache_config") or {}, "cache"))
    found["cache.fingerprint"] = header.get("cache_fingerprint")
    found["val_cache.fingerprint"] = header.get("val_cache_fingerprint")
    found.update(flatten(header.get("augment") or {}, "augment"))   # the crops' geometric draw (Augment's fields)
    found.update(flatten(header.get("transform") or {}, "augment_recipe"))   # --augment's recipe as it was read
    selection = header.get("selection")
    if selection is not None:   # the images it read: the split and repeats asked, the items an epoch per source
        found["split"], found["repeat"] = selection.get("split"), repeat_text(selection.get("repeat")) or None
        found.update({f"items.{k}": v.get("items") for k, v in (selection.get("sources") or {}).items()})
    found.update(flatten(header.get("code_version") or {}, "code"))
    found["world"] = header.get("world")
    return found


def full_recipe(header: dict) -> dict:
    """recipe_of and what only describes this process: the command line, the device, the output folder."""
    config = header.get("config") or {}
    return {**recipe_of(header), **{k: config.get(k) for k in NOT_RECIPE if k in config and k != "report_to"},
            "argv": shlex.join(header.get("argv") or []), "device": header.get("device")}


def step_metrics(record: dict) -> dict:
    """A `step` record's numbers for a back-end: `train/KEY`."""
    return {f"train/{k}": float(record[k]) for k in STEP_KEYS if k in record}


def epoch_metrics(record: dict) -> dict:
    """An `epoch` record's numbers: `val/KEY` for the validation loss and the detection metrics, `epoch/KEY` for
    the rest (the epoch's mean losses, its pace), and `epoch` itself."""
    found = {"epoch": float(record["epoch"])}
    for k, v in record.items():
        if k in NOT_METRICS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        name = f"val/{k[4:]}" if k.startswith("val_") else f"val/{k}" if k in VAL_KEYS else f"epoch/{k}"
        found[name] = float(v)
    return found


def shown(value) -> str:
    """A value as the runs table and a back-end's text show it: numbers with :g, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:g}"
    return str(value)


def effective(recipe: dict) -> dict:
    """A recipe with one entry per augmentation option, under the flag's name, holding the value the run drew by:
    the header's `augment.NAME` (the flag over the cache's build value), where a run's flag (None when not given)
    and the cache's reader default (cache.NAME) stood apart. A log without it keeps the flag, else the cache's."""
    out = dict(recipe)
    for k in AUGMENT_FLAGS:
        used = out.pop(f"augment.{k}", None)
        flag = out.get(k)
        cache = out.pop(f"cache.{k}", None) if k in READER_ONLY else None
        value = used if used is not None else flag if flag is not None else cache
        if value is not None or k in out:
            out[k] = value
    return out


def text_of(value) -> str:
    """An option's value as the table shows it: numbers with :g, a list of numbers (a recorded JSON text) as the
    flag takes it, "0.5,1"."""
    if isinstance(value, str) and value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            items = None
        if isinstance(items, list) and items and all(type(v) in (int, float) for v in items):
            return ",".join(f"{v:g}" for v in items)
    return shown(value)
