"""`python -m preprocess verify CACHE`: recompute every checksum; mark bad files for the next build."""
from __future__ import annotations

import json
from pathlib import Path

from preprocess.store.atomic import write_atomic
from preprocess.store.manifest import FileEntry, Manifest, data_path
from preprocess.store.plan import CORRUPT_MARKER
from preprocess.store.sidecar import quads_checksum, quads_path


def verify(cache_dir) -> list[tuple[str, str]]:
    """[(file name, what is wrong)]; also written to CACHE/.corrupt.json so that `build` redoes exactly those."""
    cache_dir = Path(cache_dir)
    m = Manifest.load(cache_dir)
    bad = []
    for f in m.files:
        why = _check(m, data_path(cache_dir, f.name), f)
        if why:
            bad.append((f.name, why))
    if bad:
        write_atomic(cache_dir / CORRUPT_MARKER, json.dumps(sorted(name for name, _ in bad)))
    return bad


def _check(m: Manifest, path: Path, entry: FileEntry) -> str | None:
    if not path.exists():
        return "missing"
    if not quads_path(path).exists():
        return "word quads sidecar missing"
    try:
        why = m.format.verify(path, m.spec, entry.checksum, entry.shards)
        if why:
            return why
        if quads_checksum(quads_path(path)) != entry.quads_checksum:
            return "word quads checksum mismatch"
    except (ValueError, OSError) as e:
        return f"unreadable ({e})"
    return None
