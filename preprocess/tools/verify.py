"""`python -m preprocess verify CACHE`: recompute every checksum; mark bad files for the next build."""
from __future__ import annotations

import json
from pathlib import Path

from preprocess.store.manifest import data_path, file_checksum, quads_checksum, quads_path, read_manifest, write_atomic
from preprocess.store.plan import CORRUPT_MARKER
from preprocess.store.zarrfile import shard_checksums


def verify(cache_dir) -> list[tuple[str, str]]:
    """[(file name, what is wrong)]; also written to CACHE/.corrupt.json so that `build` redoes exactly those."""
    cache_dir = Path(cache_dir)
    m = read_manifest(cache_dir)
    bad = []
    for f in m["files"]:
        path = data_path(cache_dir, f["name"])
        why = _check(path, f)
        if why:
            bad.append((f["name"], why))
    if bad:
        write_atomic(cache_dir / CORRUPT_MARKER, json.dumps(sorted(name for name, _ in bad)))
    return bad


def _check(path: Path, entry: dict) -> str | None:
    if not path.exists():
        return "missing"
    if not quads_path(path).exists():
        return "word quads sidecar missing"
    try:
        if "shards" in entry:  # a zarr file: its shard and metadata files, by their bytes
            why = _check_shards(shard_checksums(path), entry["shards"])
            if why:
                return why
        elif file_checksum(path) != entry["checksum"]:
            return "checksum mismatch (corrupt data)"
        if quads_checksum(quads_path(path)) != entry["quads_checksum"]:
            return "word quads checksum mismatch"
    except (ValueError, OSError) as e:
        return f"unreadable ({e})"
    return None


def _check_shards(found: dict[str, str], recorded: dict[str, str]) -> str | None:
    for name, checksum in sorted(recorded.items()):
        if name not in found:
            return f"{name} missing"
        if found[name] != checksum:
            return f"{name}: checksum mismatch (corrupt data)"
    return None
