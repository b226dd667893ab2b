"""`python -m preprocess verify CACHE`: recompute every checksum; mark bad files for the next build.

A jpeg page cache's tiles are each checked against their CRC32 first, so that a damaged tile is named with its
image, variant and place, not only as its file's checksum mismatch.

A damaged file may make its decoder raise anything (numpy's header parser raises SyntaxError and
TokenError as well as ValueError); verify reports it as that file's damage and goes on, never crashes.
What it found is returned, and printed by the CLI, before the marker is written: on a read-only cache
the user still learns which files are bad.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from east_cache.atomic import write_atomic
from east_cache.store.integrity import file_problem
from east_cache.store.manifest import FileEntry, Manifest, data_path, update_command
from east_cache.store.page_jpeg import tiles_problem
from east_cache.build.plan import CORRUPT_MARKER
from east_cache.store.sidecar import quads_checksum, quads_path


def run(cache) -> int:
    """The command on a local cache: 0 when every file matches, 1 when some do not (named on stdout and marked),
    2 when they cannot be marked."""
    bad = find_bad(cache)
    for name, why in bad:
        print(f"{name}: {why}")
    if not bad:
        print(f"{cache}: all files match their checksums")
        return 0
    try:
        mark_corrupt(cache, bad)
    except OSError as e:   # a read-only cache: what was found is printed above; the next build cannot know it
        print(f"error: {cache}: {len(bad)} bad file(s), but they cannot be marked for the next build "
              f"({e.strerror}); make the cache writable and run verify again, or delete the bad files "
              f"listed above, then build", file=sys.stderr)
        return 2
    print(f"{len(bad)} bad file(s); `{update_command(Manifest.load(cache), cache)}` rebuilds exactly those",
          file=sys.stderr)
    return 1


def find_bad(cache_dir) -> list[tuple[str, str]]:
    """[(file name, what is wrong)] over every file the manifest names."""
    cache_dir = Path(cache_dir)
    m = Manifest.load(cache_dir)
    return [(f.name, why) for f in m.files if (why := check_file(m, cache_dir, f))]


def mark_corrupt(cache_dir, bad: list[tuple[str, str]]) -> None:
    """CACHE/.corrupt.json: the files the next `build` must redo rather than reuse."""
    write_atomic(Path(cache_dir) / CORRUPT_MARKER, json.dumps(sorted(name for name, _ in bad)))


def verify(cache_dir) -> list[tuple[str, str]]:
    """find_bad, and the marker written when something is bad."""
    bad = find_bad(cache_dir)
    if bad:
        mark_corrupt(cache_dir, bad)
    return bad


def check_file(m: Manifest, cache_dir: Path, entry: FileEntry) -> str | None:
    why = file_problem(m, cache_dir, entry)   # names, headers and sizes first: cheap, and they say more
    if why:
        return why
    path = data_path(cache_dir, entry.name)
    try:
        why = _tiles(m, path, m.files.index(entry)) if m.spec.kind.page_codec == "jpeg" else None
        if why:
            return why
        why = m.format.verify(path, m.spec, entry.checksum, entry.shards)
        if why:
            return why
        if quads_checksum(quads_path(path)) != entry.quads_checksum:
            return "word quads checksum mismatch"
    except Exception as e:   # noqa: BLE001  whatever a damaged file makes its decoder raise is that file's damage
        return f"unreadable ({type(e).__name__}: {e})"
    return None


def _tiles(m: Manifest, path: Path, f: int) -> str | None:
    """The first damaged tile of a jpeg page file (page_jpeg.tiles_problem), named by its image and variant."""
    records, names = m.format.open(path, m.spec), sorted(m.images)
    levels = m.spec.kind.half_level   # a page warped at read time: its half level's tiles too
    for r, (i, v) in enumerate(m.layout.members()[f]):
        fields = records[r]
        why = tiles_problem(fields["image"], fields["size"], f"image {names[i]}, variant {v}", levels)
        if why:
            return why
    return None
