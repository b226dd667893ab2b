"""Which images of a cache a run reads, and how many times an epoch: a run chooses its images as it chooses its
augmentation, from one cache, with no build in between.

split (east-train --split, Loader(split=...), CacheDataset(split=...)):
- a split name (train0): per source (a --data root of the build, build/members.py), the images that source's
  ufo/{split}.json lists, as the build recorded them; a source without such a file (an external set, a pseudo-label
  root) gives all of its images;
- a UFO file (FILE.json): the images it names, from whichever source holds them (names the cache lacks: a note);
- None: every image.
repeat ({source: R}, R >= 0, east-train --repeat SOURCE=R): each selected image of the source appears R times an
epoch on average, like MosaicML Streaming's `repeat`: floor(R) copies of each, and one more for round(frac(R) x N)
of its N images, drawn from (seed, epoch, source) (R = 0.5: half of them, another half each epoch; R = 3: three
times). The count is the same every epoch, so an epoch's length is too. Sources not named take 1.

An epoch's items (Selection.epoch) are the selected images with their copies, in image order then copy; a run's
sampler shuffles them by (seed, epoch) as it shuffles a whole cache. Copy 0 of an image draws the crop the whole
cache draws for it at that epoch; copy k >= 1 draws another (the copy is part of its crop's key: crop_draw.crop_rng).
"""
from __future__ import annotations

import argparse
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from east_cache.bounds import Bound
from east_cache.errors import CacheError, DataError, UsageError, cache_command
from east_cache.ingest.objects import is_url
from east_cache.ingest.ufo import read_images
from east_cache.store.fingerprint import file_fingerprint
from east_cache.store.manifest import Manifest

REPEAT = Bound(integer=False, least=0, most=1000, note="times an image of the source appears an epoch, on average")
NAMES_SHOWN = 3   # names of a FILE.json that the cache lacks, named in its note


@dataclass(frozen=True)
class Share:
    """One source's part of an epoch."""
    source: str
    images: int      # M: the source's images in the cache
    selected: int    # N: those the split selects
    why: str         # why those: "split train0", "no ufo/train0.json: all", "all", "listed in FILE"
    repeat: float    # R
    items: int       # K = N floor(R) + round(frac(R) N), the same every epoch

    def line(self) -> str:
        return f"{self.source}: {self.selected} of {self.images} images ({self.why}) x {self.repeat:g} -> " \
               f"{self.items} items an epoch"


class Selection:
    """The images a split selects of a manifest's cache (indices in name order, as a CacheDataset numbers them) and
    the repeats of their sources: UsageError for a split or a source that is not there, CacheError for a cache that
    records no sources (built before they were recorded) or whose split files changed since its build."""

    def __init__(self, manifest: Manifest, split: str | None = None, repeat: dict | None = None,
                 where: str = "the cache"):
        split = str(Path(split).resolve()) if split is not None and is_file(split) else split   # as recorded
        self.split, self.where, self.notes, self.total = split, where, [], len(manifest.images)
        repeat = dict(repeat or {})
        if manifest.sources is None:
            if split is None and not repeat:
                self.repeat, self.shares = {}, []
                self.images = np.arange(len(manifest.images), dtype=np.int64)
                self.source_of = np.zeros(len(self.images), np.int64)
                return
            raise CacheError(f"{where} records no image sources and splits (an earlier build made it): record them "
                             f"with `{cache_command('build')} --out {where}`, which computes nothing")
        names = [s.name for s in manifest.sources]
        unknown = sorted(set(repeat) - set(names))
        if unknown:
            raise UsageError(f"--repeat {', '.join(unknown)}: {where} has no such source; its sources are "
                             f"{', '.join(names)} (east-cache info {where} lists them)")
        for name, r in repeat.items():
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not REPEAT.contains(r):
                raise UsageError(f"--repeat {name}={r}: R must be {REPEAT.accepted()}")
        self.repeat = {n: float(repeat[n]) for n in names if n in repeat}
        order = sorted(manifest.images)
        source_index = {n: k for k, n in enumerate(names)}
        of = np.array([source_index[manifest.members[n].source] for n in order], np.int64)
        chosen, whys = self._chosen(manifest, order, split)
        self.images = np.flatnonzero(chosen).astype(np.int64)
        self.source_of = of[self.images]
        self.shares = [Share(n, int((of == k).sum()), int((self.source_of == k).sum()), whys[k],
                             self.repeat.get(n, 1.0), _items(int((self.source_of == k).sum()), self.repeat.get(n, 1.0)))
                       for k, n in enumerate(names)]
        if not len(self):
            told = f"--split {split}" if split is not None else "--repeat"
            raise UsageError(f"{told} selects no image of {where}: " + "; ".join(s.line() for s in self.shares))

    def _chosen(self, m: Manifest, order: list[str], split: str | None) -> tuple[np.ndarray, list[str]]:
        """(selected (images,) bool in name order, per source why)."""
        if split is None:
            return np.ones(len(order), bool), ["all"] * len(m.sources)
        if is_file(split):
            listed = ufo_names(split)
            chosen = np.array([n in listed for n in order], bool)
            lacking = sorted(set(listed) - set(order))
            if not chosen.any():
                raise UsageError(f"--split {split}: none of its {len(listed)} image(s) is in {self.where} (e.g. "
                                 f"{', '.join(lacking[:NAMES_SHOWN])}); name a UFO file of this cache's images")
            if lacking:
                self.notes.append(f"--split {split}: {len(lacking)} of its {len(listed)} image(s) are not in "
                                  f"{self.where} and are left out (e.g. {', '.join(lacking[:NAMES_SHOWN])})")
            return chosen, [f"listed in {split}"] * len(m.sources)
        if not split or "/" in split or split.startswith("."):
            raise UsageError(f"--split {split!r}: a split name (train0: ufo/train0.json of each source) or a UFO file "
                             f"(FILE.json)")
        for s in m.sources:
            if split in s.unread:
                raise UsageError(f"--split {split}: {s.root}/ufo/{split}.json of source {s.name} could not be read at "
                                 f"the build ({s.unread[split]}); fix it, then `{cache_command('build')} --out "
                                 f"{self.where}` records its images")
        check_recorded(m, split, self.where)
        has = {s.name for s in m.sources if split in s.files}
        if not has:   # a split no source has is a mistake, not "all of every source"
            known = sorted({x for s in m.sources for x in s.splits})
            raise UsageError(f"--split {split}: no source of {self.where} has ufo/{split}.json; the splits its sources "
                             f"have: {', '.join(known)} (`{cache_command('build')} --out {self.where}` records new "
                             f"ones, computing nothing)")
        chosen = np.array([m.members[n].source not in has or split in m.members[n].splits for n in order], bool)
        return chosen, [f"split {split}" if s.name in has else f"no ufo/{split}.json: all" for s in m.sources]

    @property
    def whole(self) -> bool:
        """Every image once an epoch, in image order: what a cache read without a selection gives."""
        return len(self.images) == self.total and all(r == 1 for r in self.repeat.values())

    def __len__(self) -> int:
        """Items an epoch."""
        return sum(s.items for s in self.shares) if self.shares else len(self.images)

    def epoch(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(image (L,) int64, copy (L,) int64) of each of an epoch's L = len(self) items: by image, then copy."""
        if not self.shares:
            return self.images, np.zeros(len(self.images), np.int64)
        counts = np.zeros(len(self.images), np.int64)
        for k, share in enumerate(self.shares):
            mine = np.flatnonzero(self.source_of == k)
            whole = math.floor(share.repeat)
            counts[mine] = whole
            extra = share.items - whole * len(mine)
            if extra:
                rng = np.random.default_rng([seed, epoch, source_key(share.source)])
                counts[mine[rng.choice(len(mine), extra, replace=False)]] += 1
        images = np.repeat(self.images, counts)
        copies = np.arange(len(images), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return images, copies

    def lines(self) -> list[str]:
        """The selection as a run's first lines print it: one line per source."""
        return [s.line() for s in self.shares]

    def to_dict(self) -> dict:
        """What a checkpoint and a run's log header record: the split, the repeats given, and per source its images,
        those selected and the items an epoch."""
        return {"split": self.split, "repeat": dict(self.repeat),
                "sources": {s.source: {"images": s.images, "selected": s.selected, "items": s.items}
                            for s in self.shares}}


def _items(n: int, r: float) -> int:
    return math.floor(r) * n + math.floor((r - math.floor(r)) * n + 0.5)


def source_key(name: str) -> int:
    """A source's name as a number for its draws' seed (the same in every process: not Python's hash)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def is_file(split: str) -> bool:
    """Whether --split names a UFO file rather than a split."""
    return split.endswith(".json")


def ufo_names(path: str) -> set[str]:
    """The image names of a UFO file, read an entry at a time."""
    if not Path(path).is_file():
        raise UsageError(f"--split {path}: no such UFO file")
    try:
        return {name for name, _ in read_images(Path(path))}
    except DataError as e:
        raise UsageError(f"--split {path}: {e}") from None


def check_recorded(m: Manifest, split: str, where: str) -> None:
    """Each local source's ufo/{split}.json is the file the build recorded (or still absent where it was): a fold file
    written again since (`split --force`) would select its old images. CacheError with the update, which computes
    nothing."""
    for s in m.sources:
        path = Path(s.root) / "ufo" / f"{split}.json"
        if is_url(s.root) or not Path(s.root).is_dir():   # a cache read away from its data: as recorded
            continue
        try:
            now = file_fingerprint(path, m.source.check_content) if path.is_file() else None
        except (OSError, ValueError):
            now = None
        if now != s.files.get(split):
            what = "appeared" if split not in s.files else "is gone" if now is None else "changed"
            raise CacheError(f"{path} {what} since {where} was built, which recorded its images: record them again "
                             f"with `{cache_command('build')} --out {where}` (it computes nothing)")


def parse_repeat(text: str) -> dict[str, float]:
    """SOURCE=R[,SOURCE=R...] -> {source: R}: argparse's type of --repeat (its one-line error otherwise)."""
    found: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        try:
            r = float(value)
        except ValueError:
            r = math.nan
        if not eq or not name or not REPEAT.contains(r):
            raise argparse.ArgumentTypeError(f"{text!r}: give SOURCE=R pairs, each R {REPEAT.accepted()}, e.g. "
                                             f"cord=0.5,pseudo=2")
        if name in found:
            raise argparse.ArgumentTypeError(f"{text!r}: source {name} is given twice")
        found[name] = r
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r}: give SOURCE=R pairs, e.g. cord=0.5,pseudo=2")
    return found


def add_flags(parser, what: str = "the run") -> None:
    """--split and --repeat on an argparse parser (east-train's, `info`'s), default None: every image once."""
    g = parser.add_argument_group("images: which of the cache's, how many times an epoch")
    g.add_argument("--split", metavar="NAME|FILE.json",
                   help=f"{what} takes the images of split NAME (train0): per source, those its ufo/NAME.json lists, "
                        f"or all of a source's images where it has no such file (an external set, pseudo-labels); "
                        f"or the images a UFO file names (default: all)")
    g.add_argument("--repeat", type=parse_repeat, action="append", metavar="SOURCE=R[,SOURCE=R]",
                   help="each image of SOURCE appears R times an epoch on average (R = 0.5: half of them, a new half "
                        "each epoch; R = 3: three times), drawn from the seed and the epoch; sources are the --data "
                        "roots of the build, by folder name or --name (default: 1 each)")


def given_repeat(values: list[dict] | None) -> dict[str, float] | None:
    """The --repeat flags given (each a dict), merged; a source given twice is refused."""
    if not values:
        return None
    merged: dict[str, float] = {}
    for v in values:
        twice = set(v) & set(merged)
        if twice:
            raise UsageError(f"--repeat: source {', '.join(sorted(twice))} is given twice")
        merged.update(v)
    return merged


def repeat_text(repeat: dict[str, float] | None) -> str:
    """{source: R} as --repeat takes it."""
    return ",".join(f"{k}={v:g}" for k, v in (repeat or {}).items())
