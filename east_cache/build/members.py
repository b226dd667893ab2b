"""The sources of a build and each image's memberships: which --data root an image came from (a source, named by the
root's folder or by --name) and which of that root's splits list it (every ufo/*.json, folds included).

Bookkeeping for a run that chooses its images (store/selection.py), not sample content: no fingerprint that decides
what a build recomputes covers it, so `east-cache split` then `build` again records the new folds and computes
nothing. A UFO file is read for its image names only, an entry at a time (ingest/jsonstream.py through
ufo.read_images); a file that does not parse is a warning naming it, not a failed build, and the split it would
name is refused to a run until the file is fixed and the cache built again. A file whose fingerprint is the one the
previous build recorded, in a root whose images are those it recorded, is not read again.
"""
from __future__ import annotations

import re
from pathlib import Path

from east_cache.errors import BuildError, DataError
from east_cache.ingest.files import NotAllowed, regular_stat
from east_cache.ingest.objects import ObjectPath, listed, listed_names, source_path
from east_cache.ingest.ufo import find_split, read_images
from east_cache.store.fingerprint import ImageSource, file_fingerprint
from east_cache.store.manifest import DataSource, Manifest, Member, Source, source_name

NAME = re.compile(r"[^=,\s](?:[^=,\x00-\x1f]*[^=,\s])?")   # a source name: what --repeat NAME=R,... can say


def split_files(root) -> dict[str, object]:
    """{split: path} of every ufo/SPLIT.json of a data set root (a folder, or a URL's listing)."""
    folder = listed(source_path(root)) / "ufo"
    if isinstance(folder, ObjectPath):
        names = listed_names(folder)
    else:
        names = sorted(p.name for p in Path(folder).glob("*.json")) if Path(folder).is_dir() else []
    found = {}
    for name in names:
        if name.endswith(".json") and not name.startswith("."):
            try:
                regular_stat(folder / name)
            except (OSError, NotAllowed):
                continue
            found[name[:-len(".json")]] = folder / name
    return found


def source_names(data_dirs: list[str], names: list[str] | None, old: Manifest | None = None) -> list[str]:
    """The source name of each root: --name in --data order, else the name the cache at --out (old) recorded for the
    root, else its folder's name; the same name twice, or one that --repeat could not say, is refused with the fix."""
    if names is not None and len(names) != len(data_dirs):
        raise BuildError(f"--name is given once per --data, in order: {len(names)} name(s) for {len(data_dirs)} "
                         f"root(s); name every root, or none")
    kept = {s.root: s.name for s in old.sources} if old is not None and old.sources is not None else {}
    picked = list(names) if names is not None else [kept.get(d) or source_name(d) for d in data_dirs]
    for name, root in zip(picked, data_dirs):
        if not NAME.fullmatch(name):
            raise BuildError(f"source name {name!r} ({root}): a source's name holds no '=' or ',' and starts and ends "
                             f"with neither a space nor a line break (east-train --repeat NAME=R,... says it); name "
                             f"the roots with --name, once per --data in order")
    seen: dict[str, str] = {}
    for name, root in zip(picked, data_dirs):
        if name in seen:
            example = " ".join(f"--data {d} --name {source_name(d)}{k}" for k, d in enumerate((seen[name], root)))
            raise BuildError(f"two --data roots go by the name {name!r} ({seen[name]}, {root}): a run names its "
                             f"sources (--split, --repeat), so give each root a name with --name, once per --data in "
                             f"order, e.g. {example}")
        seen[name] = root
    return picked


def memberships(data_dirs: list[str], names: list[str], split: str, images: dict[str, ImageSource],
                check_content: bool, old: Manifest | None, log=print) -> tuple[list[DataSource], dict[str, Member]]:
    """(the sources, each image's Member): images maps each cache image to its source as the manifest records it
    (its UFO file names the root: ufo/{split}.json of one of data_dirs). A UFO file that cannot be read is a
    `warning:` line (log)."""
    root_of = {str(find_split(d, split)[0]): k for k, d in enumerate(data_dirs)}
    by_root: list[list[str]] = [[] for _ in data_dirs]
    for name, src in images.items():
        by_root[root_of[src.json]].append(name)
    sources, members = [], {}
    for k, root in enumerate(data_dirs):
        files = split_files(root)
        prints = {s: file_fingerprint(p, check_content) for s, p in files.items()}
        mine = set(by_root[k])
        before = _previous(old, root, mine)
        listed_in: dict[str, set[str]] = {}
        unread: dict[str, str] = {}
        for s, path in files.items():
            if before is not None and before[0].files.get(s) == prints[s] and s not in before[0].unread:
                listed_in[s] = {n for n in mine if s in before[1][n].splits}
                continue
            try:
                listed_in[s] = {n for n, _ in read_images(path) if n in mine}
            except DataError as e:
                unread[s] = str(e)
                log(f"warning: {path} could not be read for its image names ({e}); a run's --split {s} is refused "
                                f"until it is fixed and the cache built again")
        sources.append(DataSource(names[k], root, prints, unread))
        for n in by_root[k]:
            members[n] = Member(names[k], sorted(s for s, listed_names_ in listed_in.items() if n in listed_names_))
    return sources, dict(sorted(members.items()))


def _previous(old: Manifest | None, root: str, images: set[str]) -> tuple[DataSource, dict[str, Member]] | None:
    """The previous build's record of root, where it holds the same images (its files' names can then be reused)."""
    if old is None or old.sources is None:
        return None
    was = next((s for s in old.sources if s.root == root), None)
    if was is None or {n for n, m in old.members.items() if m.source == was.name} != images:
        return None
    return was, old.members


def same_splits(old: Manifest, names: list[str], source: Source) -> bool:
    """The quick up-to-date test's part for the memberships: the same source names, and every root's ufo/*.json
    files the ones recorded (stat calls, no parse). A new fold file takes the full comparison, which records it and
    computes nothing."""
    if old.sources is None or [s.name for s in old.sources] != names:
        return False
    try:
        now = {d: {s: file_fingerprint(p, source.check_content) for s, p in split_files(d).items()}
               for d in source.data_dirs}
    except (OSError, ValueError):
        return False
    return now == {s.root: s.files for s in old.sources}


def splits_change(old: list[DataSource] | None, new: list[DataSource]) -> str:
    """What a build recorded anew of the sources' splits, in words ("" when nothing): e.g. "receipts: + train0,
    val0; - val3"."""
    if old is None:
        return "every image's source and splits (not recorded before)"
    was = {s.root: s for s in old}
    parts = []
    for s in new:
        before = was.get(s.root)
        added = sorted(set(s.files) - set(before.files)) if before else sorted(s.files)
        gone = sorted(set(before.files) - set(s.files)) if before else []
        edited = sorted(x for x in set(s.files) & set(before.files) if s.files[x] != before.files[x]) if before else []
        bits = ([f"+ {', '.join(added)}"] if added else []) + ([f"- {', '.join(gone)}"] if gone else []) + \
               ([f"changed {', '.join(edited)}"] if edited else [])
        if before is not None and before.name != s.name:
            bits.append(f"named {s.name} (was {before.name})")
        if bits:
            parts.append(f"{s.name}: {'; '.join(bits)}")
    return "; ".join(parts)
