"""`east-cache split`: K cross-validation folds of a UFO split, as UFO files beside it.

Every image of ROOT/ufo/SPLIT.json lies in exactly one validation fold, ROOT/ufo/val{k}.json; ROOT/ufo/train{k}.json
holds all the others, so `east-train --split train0 --val-split val0` (of one cache of SPLIT) takes a fold as any
split. The
folds are balanced by legible words (the build's default rules, ingest/ufo.py) as far as whole images allow:
groups of images, largest first, each into the fold with the fewest words so far (fewest images among equals,
then an order drawn from --seed); groups without legible words go into the fold with the fewest images. This
greedy rule leaves every fold's words within the largest group's words of every other fold's. --group-by keeps
the images whose names give the same match (a source, a document id) in one fold. The files keep every field
of the source's entries and its other top-level members as they are (ingest/ufofile.py).

A root whose images lie in a folder per split (ROOT/img/SPLIT/, the competition's layout, which ingest/ufo.py
find_split reads) gets ROOT/img/train{k} and ROOT/img/val{k} too, each a relative link to img/SPLIT, so that a
fold's images are found as any split's, by every command and by code that reads img/SPLIT itself.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from east_cache.bounds import SEED, Bound, flag_number
from east_cache.config import BuildConfig
from east_cache.errors import UsageError
from east_cache.inputs import Input, refuse_overwrite
from east_cache.ingest import ufo
from east_cache.ingest.ufofile import entry_text, file_text, read_entries
from east_cache.location import flag_location, is_remote
from east_cache.progress import Progress
from east_cache.atomic import replacing, write_atomic

DEFAULT_FOLDS = 5
DEFAULT_SEED = 0
TRAIN, VAL = "train{}", "val{}"   # the fold files' split names, by fold number
DESCRIPTION = ("Divide ROOT/ufo/SPLIT.json into K folds: every image in exactly one validation fold "
               "ROOT/ufo/val{k}.json, all the others in ROOT/ufo/train{k}.json, legible words balanced across the "
               "folds as far as whole images allow. Prints each fold's image and word counts.")
EPILOG = """examples:
  east-cache split --data data/receipts --split train --folds 5
  east-cache split --data data/receipts --folds 5 --group-by '^([a-z]+)_' --seed 1
      (images named sroie_001.jpg, sroie_002.jpg, ... stay in one fold: the pattern's group 1 is their group)"""


def register(sub) -> None:
    """The `split` subcommand on the east-cache parser's subparsers."""
    p = sub.add_parser("split", help="K cross-validation folds of a split: ufo/train{k}.json and ufo/val{k}.json, "
                                     "balanced by legible words", description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=flag_location, required=True, metavar="ROOT",
                   help="dataset root holding ufo/SPLIT.json and images/ (or img/SPLIT/: then img/train{k} and "
                        "img/val{k} are linked to it); the folds are written into ROOT/ufo/")
    p.add_argument("--split", default="train", help="the split to divide (default: train)")
    p.add_argument("--folds", type=flag_number(Bound(least=2)), default=DEFAULT_FOLDS, metavar="K",
                   help=f"number of folds, 2 or more (default {DEFAULT_FOLDS})")
    p.add_argument("--group-by", metavar="REGEX",
                   help="images whose names give the same match of REGEX (its group 1 where it has groups) stay in "
                        "one fold; an image it does not match is a group of its own (default: every image alone)")
    p.add_argument("--seed", type=flag_number(SEED), default=DEFAULT_SEED,
                   help=f"seed of the order among equals: the same seed gives the same folds (default {DEFAULT_SEED})")
    p.add_argument("--force", action="store_true",
                   help="replace fold files that exist, and links img/train{k}, img/val{k} that lead elsewhere "
                        "(never the split itself, nor a folder)")
    p.add_argument("--quiet", action="store_true", help="no progress and no table")
    p.set_defaults(func=run)


@dataclass
class Group:
    names: list[str] = field(default_factory=list)
    words: int = 0   # legible words of its images


def legible_words(entry: dict, where: str) -> int:
    """Words of a UFO entry that a build (default options) makes positives."""
    words, summary, cfg = entry.get("words") or {}, ufo.IngestSummary(), BuildConfig()
    w, h = entry.get("img_w"), entry.get("img_h")
    frame = (int(w), int(h)) if ufo.positive_int(w) and ufo.positive_int(h) else None
    kept = [ufo.parse_word(words[k], k, where, cfg, summary, frame) for k in words]
    return sum(1 for k in kept if k is not None and k[1] == ufo.CARE)


def group_images(words: dict[str, int], pattern: str | None) -> tuple[list[Group], int]:
    """(groups in first-image order, images the pattern did not match) of images {name: legible words}."""
    try:
        rx = re.compile(pattern) if pattern is not None else None
    except re.error as e:
        raise UsageError(f"--group-by {pattern!r}: not a regular expression ({e}); e.g. --group-by '^([a-z]+)_'") \
            from None
    groups, unmatched = {}, 0
    for name, n in words.items():
        m = rx.search(name) if rx is not None else None
        key = (m.group(1) if rx.groups else m.group(0)) if m is not None else None
        if key is None:
            unmatched += rx is not None
            key = ("image", name)   # a tuple: never equal to a matched text
        g = groups.setdefault(key, Group())
        g.names.append(name)
        g.words += n
    return list(groups.values()), unmatched


def assign(groups: list[Group], folds: int, seed: int) -> list[int]:
    """The fold of each group: largest first (equals in an order drawn from seed) into the fold with the fewest
    legible words (then the fewest images, then a fold order drawn from seed); a group without legible words
    into the fold with the fewest images. Every fold gets a group when there are at least `folds` groups."""
    rng = np.random.default_rng(seed)
    drawn = rng.permutation(len(groups))
    order = sorted(drawn.tolist(), key=lambda g: (-groups[g].words, -len(groups[g].names)))   # stable
    rank = rng.permutation(folds).tolist()
    words, images, fold_of = [0] * folds, [0] * folds, [0] * len(groups)
    for g in order:
        by = ((lambda k: (words[k], images[k], rank[k])) if groups[g].words
              else (lambda k: (images[k], words[k], rank[k])))
        k = min(range(folds), key=by)
        fold_of[g] = k
        words[k] += groups[g].words
        images[k] += len(groups[g].names)
    return fold_of


def fold_paths(ufo_dir: Path, folds: int) -> list[tuple[Path, Path]]:
    return [(ufo_dir / f"{TRAIN.format(k)}.json", ufo_dir / f"{VAL.format(k)}.json") for k in range(folds)]


def check_outputs(source: Path, outputs: list[Path], force: bool, split: str) -> None:
    """Before any work: the split itself is never written; an existing fold file only with --force."""
    for path in outputs:
        try:
            refuse_overwrite("split", path, [Input("the split divided", source)])
        except UsageError:
            raise UsageError(f"--split {split}: the fold file {path} would replace the split it is made from; copy "
                             f"{source.name} to another name in {source.parent} and split that") from None
    there = [p for p in outputs if p.exists()]
    if there and not force:
        more = f" and {len(there) - 1} more fold file(s)" if len(there) > 1 else ""
        raise UsageError(f"{there[0]}{more} exist already; pass --force to replace them")


def image_links(image_dir: Path, paths: list[tuple[Path, Path]], force: bool) -> list[Path]:
    """The folders per split (ROOT/img/{fold split}) to link to image_dir, ROOT/img/SPLIT, so that the fold files
    find their images there; those already linked to it are left out. Before any work: a folder that is no link is
    refused (it holds images of its own), a link elsewhere without --force."""
    todo = []
    for path in (p for pair in paths for p in pair):
        link = image_dir.parent / path.stem
        if os.path.islink(link) and os.path.realpath(link) == os.path.realpath(image_dir):
            continue
        if os.path.lexists(link) and not (os.path.islink(link) and force):
            what = "a link elsewhere; pass --force to replace it" if os.path.islink(link) else \
                "a folder of its own; move its images into the split's folder or rename it, then split again"
            raise UsageError(f"{link}: the images of fold split {path.stem} are looked for there ({image_dir}'s, "
                             f"linked), and it is {what}")
        todo.append(link)
    return todo


def link_folder(link: Path, target: str) -> None:
    """link -> target (relative), in place of a link there, atomically."""
    with replacing(link, hide=True, sync=False) as tmp:
        os.symlink(target, tmp, target_is_directory=True)


def run(a: argparse.Namespace) -> int:
    if is_remote(a.data):
        raise UsageError(f"--data {a.data}: split writes beside a local UFO file; copy the root to a folder first")
    json_path, image_dir = ufo.find_split(a.data, a.split)
    paths = fold_paths(json_path.parent, a.folds)
    check_outputs(json_path, [p for pair in paths for p in pair], a.force, a.split)
    per_split = Path(image_dir) != Path(a.data) / "images"   # ROOT/img/SPLIT: the folds' folders link to it
    links = image_links(Path(image_dir), paths, a.force) if per_split else []
    top, texts, words = {}, {}, {}   # each image's text in the files, made once
    with Progress(None, "img", quiet=a.quiet, desc=f"read {json_path.name}") as bar:
        for name, entry in read_entries(json_path, top):
            texts[name], words[name] = entry_text(name, entry), legible_words(entry, f"{json_path}: image {name!r}")
            bar.update()
    groups, unmatched = group_images(words, a.group_by)
    if len(groups) < a.folds:
        what = "groups of images (--group-by)" if a.group_by else "images"
        raise UsageError(f"--folds {a.folds}: {json_path} has {len(groups)} {what}; every fold needs one: give "
                         f"--folds {len(groups)} or fewer")
    fold_of = assign(groups, a.folds, a.seed)
    fold = {name: fold_of[g] for g, group in enumerate(groups) for name in group.names}
    for link in links:   # before the fold files: a fold file never names images that are not found
        link_folder(link, Path(image_dir).name)
    with Progress(None, "file", quiet=a.quiet, desc="write folds") as bar:   # a bar on a terminal, else by time
        for k, (train, val) in enumerate(paths):
            for path, keep in ((val, True), (train, False)):
                write_atomic(path, file_text([t for n, t in texts.items() if (fold[n] == k) == keep], top))
                bar.update()
    if not a.quiet:
        print(fold_table(fold, words, a.folds))
        if a.group_by:
            print(f"{len(groups)} groups by --group-by {a.group_by!r}; {unmatched} image(s) it does not match are "
                  f"a group each")
        print(f"wrote {paths[0][0].name} .. {paths[-1][0].name} and {paths[0][1].name} .. {paths[-1][1].name} into "
              f"{json_path.parent}: one cache of split {a.split} holds every fold (`build --out CACHE` records them, "
              f"computing nothing); train with --split {TRAIN.format(0)} --val-split {VAL.format(0)}",
              file=sys.stderr)
        if per_split:
            folder = Path(image_dir).parent
            print(f"the images lie in a folder per split: {'linked' if links else 'kept the links'} "
                  f"{folder / TRAIN.format(0)} .. {TRAIN.format(a.folds - 1)} and {VAL.format(0)} .. "
                  f"{VAL.format(a.folds - 1)} to {Path(image_dir).name}/ ({image_dir}), where the fold files' images "
                  f"are looked for", file=sys.stderr)
    return 0


def fold_table(fold: dict[str, int], words: dict[str, int], folds: int) -> str:
    """Per fold: its validation images and legible words, and its training set's."""
    total_i, total_w = len(fold), sum(words.values())
    rows = [f"{'fold':>4}  {'val images':>10}  {'val words':>9}  {'train images':>12}  {'train words':>11}"]
    for k in range(folds):
        n = sum(1 for f in fold.values() if f == k)
        w = sum(words[name] for name, f in fold.items() if f == k)
        rows.append(f"{k:>4}  {n:>10}  {w:>9}  {total_i - n:>12}  {total_w - w:>11}")
    return "\n".join(rows)
