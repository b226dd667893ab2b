"""The local cache folder's size limit: sizes as flags write them, the least limit that can work, what to evict.

Bytes are counted as the files' sizes (st_size), temp files of downloads under way included: a download
reserves its files at their full size before its first byte arrives, so the processes of a machine never
together pass the limit. Sparse files (pages) may take fewer blocks on disk than that.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from east_cache.errors import UsageError

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
TEMP_SUFFIX = ".part"   # a file or folder being downloaded, under the download's fetch lock


def parse_size(text: str) -> int:
    """Bytes from "500M", "20G", "1.5T", "20GiB" or a plain count of bytes (0: no limit)."""
    m = SIZE.match(str(text))
    if m is None or isinstance(text, bool):
        raise UsageError(f"{text!r} is not a size: give bytes with an optional unit, e.g. 500M, 20G or 1.5T")
    size = float(m.group(1)) * UNITS[m.group(2).upper()]
    if 0 < size < 1:   # would round to 0, which means no limit at all
        raise UsageError(f"{text!r} is less than a byte: give 0 for no limit, or a size such as 500M, 20G or 1.5T")
    return int(size)


def size_text(text: str) -> str:
    """argparse's type= of --local-cache-limit: the text, once parse_size reads it (else the flag's one-line error)."""
    try:
        parse_size(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def size_flag(n: int) -> str:
    """n bytes as parse_size reads them, rounded up (so that passing it is enough): 1536 -> "1.5K"."""
    for unit in ("T", "G", "M", "K"):
        if n >= UNITS[unit]:
            return f"{math.ceil(n / UNITS[unit] * 10) / 10:g}{unit}"
    return str(n)


def least_limit(unit_bytes, at_once: int) -> int:
    """The smallest limit that holds the at_once largest files (a data file with its sidecar each), which the
    readers of one machine may need at the same time: the one read now and the ones fetched ahead."""
    return sum(sorted(unit_bytes, reverse=True)[:at_once])


def check_limit(limit: int, unit_bytes, at_once: int, where: str) -> None:
    """Refuse, before any download, a limit that could not hold what the readers need at once."""
    need = least_limit(unit_bytes, at_once)
    if limit and limit < need:
        raise UsageError(f"{where}: --local-cache-limit {size_flag(limit)} cannot hold the {at_once} largest files "
                         f"({size_flag(need)} together) that readers fetch ahead and read at once; pass "
                         f"--local-cache-limit {size_flag(need)} or more (0: no limit)")


def stem(name: str) -> str:
    """The data file a name of the folder belongs to: X for X.npy, X.zarr, X.quads.npz and their temp names."""
    return name.split(".", 1)[0]


def folder_bytes(data_dir: Path) -> int:
    """Sizes of every file under data_dir, temp files and folders (a zarr group) included."""
    total = 0
    for root, _, files in os.walk(data_dir):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:   # evicted meanwhile by a process that does not hold the space lock
                pass
    return total


def stems_present(data_dir: Path) -> dict[str, list[Path]]:
    """The finished files under data_dir by stem (temp names left out), data files before sidecars, so that
    deleting them in this order never leaves a data file without its sidecar."""
    found: dict[str, list[Path]] = {}
    for p in sorted(data_dir.iterdir(), key=lambda p: p.name.endswith(".npz")):
        if not p.name.endswith(TEMP_SUFFIX):
            found.setdefault(stem(p.name), []).append(p)
    return found


def eviction_order(present: dict[str, list[Path]], wanted: set[str], last_use) -> list[str]:
    """Stems to evict first to last: files the current manifest does not name (another build's), then the
    least recently used."""
    return sorted(present, key=lambda s: (s in wanted, last_use(s), s))
