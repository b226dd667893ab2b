"""The finished rows of an unfinished data file, kept across an interrupted build: a journal beside its staging file.

Workers fill a data file's rows in place in its staging file (plan.stage_name: an npy file's temp file, a page
file's staging file of fixed slots) and flush them before they report (a page file's on the build's own machine
stay in the page cache: worker.write_rows); the build appends each reported row to
the file's journal (plan.journal_name): its sample key and what the worker returned (worker.RowResult: the row's
checksum, words, note). A Ctrl-C or SIGTERM leaves the staging files that have journaled rows, a SIGKILL all of
them; the next build of the same samples (the same file name, so the same keys in the same rows) takes every
journaled row whose key matches and whose bytes in the staging file still give the journaled checksum, and
makes only the others. A format that writes a file in one call (zarr) has no finished rows before its file is
whole: it keeps no journal.

Layout: JOURNAL_MAGIC, then one entry per row: the payload's bytes (uint64) and its CRC32 (uint32), little-endian,
then the payload, an npz of the RowResult's fields and the key (no pickles). A torn last entry (a kill while it
was written) ends the journal; the next build cuts it off before appending.
"""
from __future__ import annotations

import dataclasses
import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from east_cache.store.fingerprint import record_crc
from east_cache.store.format import RecordSpec
from east_cache.store.manifest import data_path
from east_cache.build.plan import Plan, journal_name, stage_name
from east_cache.build.worker import RowResult, page_crc

JOURNAL_MAGIC = b"EASTRJ01"   # bump the digits when the entry layout changes: an old journal is then ignored
ENTRY_HEAD = struct.Struct("<QI")
FIELD = "row."   # before a RowResult field's name in an entry (np.savez takes `file` for itself)
# RowResult fields stored as 0-d arrays, back to their Python types; the others are arrays.
SCALARS = {"file": int, "row": int, "crc": int, "legible": int, "exif": bool, "name": str, "note": str,
           "lengths": lambda v: tuple(int(n) for n in v)}


def append_rows(path: Path, rows: list[tuple[str, RowResult]]) -> None:
    """Append (key, row) entries to the journal at path, which is created with its magic if missing."""
    with open(path, "ab") as f:
        if f.tell() == 0:
            f.write(JOURNAL_MAGIC)
        for key, r in rows:
            payload = _encode(key, r)
            f.write(ENTRY_HEAD.pack(len(payload), zlib.crc32(payload)) + payload)


def read_journal(path: Path) -> tuple[list[tuple[str, RowResult]], int]:
    """The whole entries of the journal at path, and the byte at which they end (0: no journal of ours)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return [], 0
    if not data.startswith(JOURNAL_MAGIC):
        return [], 0
    entries, at = [], len(JOURNAL_MAGIC)
    while at + ENTRY_HEAD.size <= len(data):
        n, crc = ENTRY_HEAD.unpack_from(data, at)
        payload = data[at + ENTRY_HEAD.size:at + ENTRY_HEAD.size + n]
        if len(payload) != n or zlib.crc32(payload) != crc:
            break
        try:
            entries.append(_decode(payload))
        except Exception:   # noqa: BLE001  an entry of another layout: what follows is not trusted either
            break
        at += ENTRY_HEAD.size + n
    return entries, at


def resume(out: Path, plan: Plan, spec: RecordSpec) -> set[str]:
    """Fill each file to write's `done` with the rows an interrupted build finished in its staging file, and drop
    their tasks; each journal is cut after its last whole entry, for this build to append to. Returns the names
    in data/ of the staging files and journals this build goes on with."""
    done_tasks, names = set(), set()
    for index, f in enumerate(plan.files):
        if f.reuse is not None:
            continue
        journal = data_path(out, journal_name(f.name))
        entries, end = read_journal(journal)
        f.done = _sound_rows(data_path(out, stage_name(f.name, spec)), spec, f.keys, entries, index)
        if f.done:
            os.truncate(journal, end)
            done_tasks |= {(index, row) for row in f.done}
            names |= {journal.name, stage_name(f.name, spec)}
    plan.tasks = [t for t in plan.tasks if (t.file, t.row) not in done_tasks]
    return names


def journaled(out: Path, plan: Plan, spec: RecordSpec) -> tuple[set[str], int]:
    """The names in data/ of the staging files and journals of plan's unfinished files that hold journaled rows,
    and how many rows (what a build interrupted now leaves for the next one)."""
    names, rows = set(), 0
    for f in plan.to_write:
        if data_path(out, f.name).exists():   # installed: its staging files are leftovers
            continue
        n = len(read_journal(data_path(out, journal_name(f.name)))[0])
        if n and data_path(out, stage_name(f.name, spec)).exists():
            names |= {journal_name(f.name), stage_name(f.name, spec)}
            rows += n
    return names, rows


def _sound_rows(stage: Path, spec: RecordSpec, keys: list[str], entries, index: int) -> dict[int, RowResult]:
    """The journaled rows of the staging file at stage that hold the sample of their key, as journaled."""
    if not entries:
        return {}
    try:
        slots = np.load(stage, mmap_mode="r")
    except (OSError, ValueError):   # gone, or not an npy file: nothing to take
        return {}
    if slots.dtype != spec.dtype or slots.shape != (len(keys),):
        return {}
    done = {}
    for key, r in entries:
        if not (0 <= r.row < len(keys) and keys[r.row] == key):
            continue
        if spec.kind.packed:
            crc = page_crc(slots[r.row], spec, r.lengths) if r.lengths is not None else None
        else:
            crc = record_crc(slots[r.row:r.row + 1])
        if crc == r.crc:
            done[r.row] = dataclasses.replace(r, file=index)
    return done


def _encode(key: str, r: RowResult) -> bytes:
    arrays = {"key": np.array(key)}
    for f in dataclasses.fields(RowResult):
        value = getattr(r, f.name)
        if value is not None:
            arrays[FIELD + f.name] = np.asarray(value)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _decode(payload: bytes) -> tuple[str, RowResult]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = str(arrays.pop("key"))
    fields = {k.removeprefix(FIELD): v for k, v in arrays.items()}
    return key, RowResult(**{k: SCALARS[k](v.item() if v.ndim == 0 else v) if k in SCALARS else v
                             for k, v in fields.items()})
