"""The images a training run reads (--split, --repeat; east_cache/store/selection.py): chosen once, printed per source
in the run's first lines, recorded in every checkpoint and in log.jsonl's header, kept by --resume (a flag asking
for another selection is refused, as for the augmentation); and the leak check before the first step: the run's
training images against its validation split, by name, bytes and look (east_cache/tools/leak.py), with a split that
would validate on the very images it trains on refused outright."""
from __future__ import annotations

from pathlib import Path

from east_cache.errors import UsageError
from east_cache.ingest.objects import source_root
from east_cache.reader import CacheDataset
from east_cache.store.selection import is_file, repeat_text
from east_cache.tools.leak import warn_run
from east_cache.train.config import TrainConfig


def check_flags(args) -> None:
    """--split and --repeat choose what a run trains on: nothing for --eval-only or --export-onnx."""
    if (args.split is not None or args.repeat) and (args.eval_only or args.export_onnx):
        raise UsageError("--split and --repeat choose a training run's images; --eval-only and --export-onnx train "
                         "nothing: drop them")


def choose_images(cfg: TrainConfig, ds: CacheDataset, ck: dict | None = None, path: Path | None = None) -> None:
    """Select ds's images for the run, drawn from its seed: --split and --repeat, or with --resume (ck, the
    checkpoint at path) the recorded selection; a flag that asks for another one, or a cache whose splits now give
    other counts, is refused (an exact resume reads the items the run would have read)."""
    split, repeat = cfg.split, cfg.repeat
    split = str(Path(split).resolve()) if split is not None and is_file(split) else split   # as Selection records it
    recorded = ck.get("selection") if ck is not None else None
    if recorded is not None:
        asked = {k: v for k, v in (("split", split), ("repeat", repeat)) if v is not None}
        differs = [f"--{k} {shown(k, v)} (recorded {shown(k, recorded[k])})" for k, v in asked.items()
                   if v != (recorded[k] or (None if k == "split" else {}))]
        if differs:
            raise UsageError(f"--resume {path}: {', '.join(differs)}: a resume goes on with the images the run chose, "
                             f"so that it reads what it would have read; drop those flags, or start a new run from its "
                             f"weights with --init-from {path}")
        split, repeat = recorded["split"], recorded["repeat"]
    ds.select(split, repeat, cfg.seed)
    refuse_validating_on_training(cfg, ds, split)
    if recorded is not None and record(ds)["sources"] != recorded["sources"]:
        raise UsageError(f"--resume {path}: {ds.where}'s splits now give other images per source "
                         f"({counts(record(ds))}) than the run read ({counts(recorded)}): a fold file was written "
                         f"again since; resume on the cache as it was, or start a new run with --init-from {path}")


def refuse_validating_on_training(cfg: TrainConfig, ds: CacheDataset, split: str | None) -> None:
    """--split X with --val-data ROOT --val-split X, ROOT one of the cache's sources (or --split FILE being the
    validation file): the run would validate on the images it trains on."""
    if split is None or cfg.val_data is None:
        return
    val_file = Path(cfg.val_data) / "ufo" / f"{cfg.val_split}.json"
    roots = [s.root for s in ds.manifest.sources or []]
    same = (Path(split).resolve() == val_file.resolve() if is_file(split) else
            split == cfg.val_split and source_root(cfg.val_data) in roots)
    if same:
        raise UsageError(f"--split {split} and --val-data {cfg.val_data} --val-split {cfg.val_split} name the same "
                         f"images: the run would validate on what it trains on; train on a split and validate on its "
                         f"own validation split, e.g. --split train0 --val-split val0")


def record(ds: CacheDataset) -> dict:
    """The selection as a checkpoint and log.jsonl's header record it: the split, the repeats, per source its images,
    those selected and the items an epoch (the whole cache's where the run chose nothing)."""
    return ds.chosen.to_dict()


def selection_lines(ds: CacheDataset) -> list[str]:
    """Per source, what the run takes and why (the run's first lines): where it chose (--split, --repeat) or the cache
    has several sources."""
    sel = ds.chosen
    if sel.split is None and not sel.repeat and len(sel.shares) < 2:
        return []
    return [f"images: {line}" for line in sel.lines()] + [f"warning: {note}" for note in sel.notes]


def warn_leaks(cfg: TrainConfig, ds: CacheDataset, say) -> None:
    """One `warning:` line before the first step where --val-data's --val-split shares images with the run's
    training images, by name, by bytes or by look (the hashes the build kept: nothing decoded for the cache's
    images)."""
    if not cfg.val_data:
        return
    train = None
    if ds.selection is not None:
        chosen = [ds.names[i] for i in ds.selection.images]
        train = {n: ds.manifest.images[n].path for n in chosen}
    label = ds.chosen.split
    warn_run(ds.manifest, ds.cache_dir, cfg.val_data, cfg.val_split, say, train, label)


def shown(key: str, value) -> str:
    return repeat_text(value) or "-" if key == "repeat" else str(value)


def counts(rec: dict) -> str:
    return ", ".join(f"{k} {v['items']}" for k, v in rec["sources"].items())
