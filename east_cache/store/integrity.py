"""What a reader checks before it trusts a cache's files, once, when it opens the cache.

Every file the manifest names must lie inside CACHE/data once links are resolved (CACHE/data itself may
be a link: a cache kept on another disk), and hold what the manifest says: records of its dtype, byte
order included, one per sample, in the bytes that many records take (FileFormat.check). Every sidecar must
be a readable zip there with the arrays a sidecar has, for as many records. Only headers, metadata, sizes and
a sidecar's record offsets are read, so thousands of files cost well under a second; the records' bytes are
for `verify` to check against their checksums, and the rest of a sidecar is checked when it is loaded.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from east_cache.errors import CacheError
from east_cache.store.format import DATA_DIR
from east_cache.store.manifest import FileEntry, Manifest, repair_hint
from east_cache.store.sidecar import quads_path, sidecar_file_problem


def inside_data(cache_dir, name: str) -> Path | None:
    """CACHE/data/name, or None where the path it resolves to lies outside CACHE/data's."""
    folder = Path(cache_dir) / DATA_DIR
    path = folder / name
    try:
        real, root = path.resolve(), folder.resolve()
    except (OSError, RuntimeError):   # RuntimeError: a loop of links
        return None
    return path if real != root and real.is_relative_to(root) else None


def file_problem(m: Manifest, cache_dir, entry: FileEntry) -> str | None:
    """What is wrong with a data file or its sidecar, judged from names, headers and sizes; None if nothing."""
    path = inside_data(cache_dir, entry.name)
    if path is None:
        return f"its path resolves outside CACHE/{DATA_DIR}"
    if not os.path.lexists(path):
        return "missing"
    why = m.format.check(path, m.spec, entry.rows, entry.bytes)
    if why:
        return why
    sidecar = inside_data(cache_dir, quads_path(path).name)
    if sidecar is None:
        return f"its word quads sidecar resolves outside CACHE/{DATA_DIR}"
    try:
        st = os.stat(sidecar)
    except OSError:
        return f"its word quads sidecar {sidecar.name} is missing"
    if not stat.S_ISREG(st.st_mode):
        return f"its word quads sidecar {sidecar.name} is not a file"
    why = sidecar_file_problem(path, entry.rows, entry.checksum)
    return f"its word quads sidecar {sidecar.name}: {why}" if why else None


def check_files(m: Manifest, cache_dir) -> None:
    """CacheError naming the first damaged file (and how many more there are) and the repair."""
    bad = [(e.name, why) for e in m.files if (why := file_problem(m, cache_dir, e))]
    if bad:
        name, why = bad[0]
        more = f" (and {len(bad) - 1} more damaged file(s))" if len(bad) > 1 else ""
        raise CacheError(f"{cache_dir}: data file {name} is damaged or missing: {why}{more}. "
                         f"{repair_hint(cache_dir, m)}")
