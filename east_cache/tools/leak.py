"""Images a validation split shares with the training data: the warning `build` and `east-train --val-data` print.

A training split `train{X}` (train, train0, train_a) is validated on `val{X}` (val, val0, val_a), the names that
`east-cache split` writes and that public k-fold repositories use; east-train names its split (--val-split). An
image is shared when both splits list the same file, or a validation image has a training image's bytes (a copy
under another name) or look (phash.NEAR_DISTANCE: a resized, re-encoded or slightly cropped copy); data at a URL,
not hashed, by the same name. Hashes are kept in the cache folder (phash.CACHE_FILE) by the image files'
fingerprints, so a rebuild hashes only new or changed images.
"""
from __future__ import annotations

import os
import shlex

from east_cache.errors import DataError, UserError
from east_cache.ingest.files import NotAllowed, contained
from east_cache.ingest.objects import is_url, source_root
from east_cache.ingest.ufo import find_split, read_images
from east_cache.store.manifest import Manifest
from east_cache.tools.phash import NEAR_DISTANCE, HashStore, ImageHash, cross_pairs

TRAIN, VAL = "train", "val"
SHOWN = 3        # shared images named in the warning; `check` lists them all


def validation_split(train_split: str) -> str | None:
    """val{X} for train{X}, else None."""
    return VAL + train_split[len(TRAIN):] if train_split.startswith(TRAIN) else None


def split_images(root, split: str) -> dict[str, str]:
    """{image name: path} of root's ufo/{split}.json ({} when root has no such split); names that could leave the
    image folder are left out (the build refuses them)."""
    try:
        json_path, image_dir = find_split(root, split)
    except DataError:
        return {}
    found = {}
    for name, _ in read_images(json_path):
        try:
            found[name] = str(contained(image_dir, name))
        except NotAllowed:
            continue
    return found


def shared_images(train: dict[str, str], val: dict[str, str], store: HashStore | None,
                  quiet: bool = False) -> list[tuple[str, str, str]]:
    """(validation image, training image, how) of every validation image found in train: the same file listed in
    both, else a file of the same bytes or look (store None: of the same name)."""
    both = {n for n in val if n in train and same_file(val[n], train[n])}
    found = [(n, n, "listed in both") for n in sorted(both)]
    rest = [n for n in sorted(val) if n not in both]
    if store is None:
        return found + [(n, n, "same name") for n in rest if n in train]
    if not rest or not train:
        return found
    names = sorted(train)
    hashed = store.hashes([train[n] for n in names] + [val[n] for n in rest], quiet, "hashing images (train/val check)")
    store.save()
    t = [(n, h) for n, h in zip(names, hashed) if isinstance(h, ImageHash)]
    v = [(n, h) for n, h in zip(rest, hashed[len(names):]) if isinstance(h, ImageHash)]
    best: dict[str, tuple[int, str]] = {}
    for i, j, d in cross_pairs([h.pixels for _, h in v], [h.pixels for _, h in t], NEAR_DISTANCE):
        key = (-1 if v[i][1].content == t[j][1].content else d, t[j][0])
        best[v[i][0]] = min(best.get(v[i][0], key), key)
    return found + [(n, other, "same bytes" if d < 0 else f"looks alike, distance {d}")
                    for n, (d, other) in sorted(best.items())]


def same_file(a: str, b: str) -> bool:
    return a == b or (not is_url(a) and not is_url(b) and os.path.realpath(a) == os.path.realpath(b))


def leak_line(train_split: str, val_split: str, shared: list[tuple[str, str, str]], roots) -> str:
    """The one warning line: the first SHOWN shared images, the count, and the `check` command that lists all."""
    shown = [f"{v} ({how})" if v == t else f"{v} = {t} ({how})" for v, t, how in shared[:SHOWN]]
    more = f" and {len(shared) - SHOWN} more" if len(shared) > SHOWN else ""
    data = " ".join(f"--data {shlex.quote(str(r))}" for r in roots)
    splits = f" --split {train_split} --split {val_split}" if train_split.isidentifier() and len(roots) == 1 else ""
    return (f"validation split {val_split} shares {len(shared)} image(s) with training split {train_split}, so its "
            f"scores overstate the model: {', '.join(shown)}{more}; `east-cache check {data}{splits}` lists them")


def build_warning(data_dirs, split: str, train: dict[str, str], cache_dir, quiet: bool = False,
                  other_splits: bool = True) -> str | None:
    """The warning of a build of split from data_dirs whose images are train ({name: path}), or None: the roots'
    val{X} split against it. Where there is something to check (a val{X} split, or other_splits: a root of the cache
    lists its images in splits other than split, so that a run can train on some and validate on others), every
    image of train is hashed into cache_dir (only those new or changed since: a run's leak check then reads them,
    decoding nothing); a root of train.json alone hashes nothing (a run with --val-data elsewhere hashes the cache's
    images itself). Data at URLs are compared by name only."""
    val_split = validation_split(split)
    val = {n: p for d in data_dirs for n, p in split_images(d, val_split).items()} if val_split else {}
    if any(is_url(d) for d in data_dirs) or not (val or other_splits):
        store = None
    else:
        store = HashStore(cache_dir)
        store.hashes(list(train.values()) + list(val.values()), quiet, "hashing images (leak check)")
        store.save()
    shared = shared_images(train, val, store, quiet) if val else []
    return leak_line(split, val_split, shared, data_dirs) if shared else None


def run_warning(train: dict[str, str], train_split: str, roots, val_root, val_split: str, cache_dir,
                quiet: bool = False) -> str | None:
    """east-train --val-data val_root --val-split val_split against its training images train (the cache's, or the
    run's selection of them), built from roots: the hashes the build kept in cache_dir are read, never written (a
    validation image outside the cache is hashed for this run)."""
    val = split_images(val_root, val_split)
    remote = is_url(val_root) or any(is_url(p) for p in train.values())
    shared = shared_images(train, val, None if remote else HashStore(cache_dir, writable=False), quiet)
    named = list(dict.fromkeys(source_root(r) for r in [*roots, val_root]))
    return leak_line(train_split, val_split, shared, named) if shared else None


def warn_build(data_dirs, split: str, cache_dir, say, quiet: bool = False) -> None:
    """The built cache's images hashed into its folder where a run could validate on some of its roots' images
    (build_warning), and `build`'s warning line (say, unless quiet), where they share some with the val split."""
    manifest = Manifest.load(cache_dir)
    train = {n: s.path for n, s in manifest.images.items()}
    other = manifest.sources is None or any(set(s.files) - {split} for s in manifest.sources)
    try:
        line = build_warning(data_dirs, split, train, cache_dir, quiet, other)
    except UserError as e:   # e.g. a val split's UFO file that does not parse: the cache is built all the same
        line = f"the train/val check was skipped: {e}"
    if line and not quiet:
        say(f"warning: {line}")


def warn_run(manifest: Manifest, cache_dir, val_root, val_split: str, say, train: dict[str, str] | None = None,
             label: str | None = None) -> None:
    """east-train's warning line (say), where --val-data's --val-split shares images with the run's training images
    (train {name: path}, labelled `label`; default: every image of the cache, its build split), by name, bytes or
    look."""
    if train is None:
        train = {n: s.path for n, s in manifest.images.items()}
    try:
        line = run_warning(train, label or manifest.source.split, manifest.source.data_dirs, val_root, val_split,
                           cache_dir)
    except UserError as e:   # the validation itself reports a bad val split, with its own message
        line = f"the train/val check was skipped: {e}"
    if line:
        say(f"warning: {line}")
