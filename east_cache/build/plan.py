"""Incremental planning: which data files to keep, and for the others which rows to copy or compute.

Every sample has a key: hash(build fingerprint, image name, annotation and file fingerprints,
variant). A data file's name carries the hash of its rows' keys, so a file whose samples did not
change keeps its name and is reused untouched, and a file is complete whenever it exists under
its final name (it is renamed into place only after it is written). A row of a file that must be
rewritten is copied from the previous cache when its key is there, and recomputed otherwise.
Hence an incremental rebuild gives the same bytes as a full one. The name's suffix is the file
format (.npy or .zarr); switching formats copies every row, since the samples are the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from east_cache.config import STRATEGIES, BuildConfig
from east_cache.store.fingerprint import ImageSource, digest
from east_cache.store.format import QUADS_SUFFIX, RecordSpec, record_spec
from east_cache.store.formats import FILE_FORMATS, format_of
from east_cache.store.layout import Layout
from east_cache.store.manifest import FileEntry, Manifest, data_path
from east_cache.store.sidecar import quads_path, sidecar_file_problem

CORRUPT_MARKER = ".corrupt.json"   # written by `verify`, read by the next build: files not to trust


@dataclass
class Task:
    """One row of a data file to fill: from the source image, or copied from an old file."""
    file: int
    row: int
    dst: str                      # temp path of the data file being written
    record: object = None         # ImageRecord, when computing
    variant: int = 0
    src: str | None = None        # old data file, when copying
    src_row: int = 0


@dataclass
class FilePlan:
    name: str
    keys: list[str]               # sample key of each row
    members: list[tuple[int, int]]
    reuse: FileEntry | bool | None = None   # kept as it is: its old manifest entry, or True for a file finished
                                            # by an interrupted build (no entry yet); None: to write
    done: dict = field(default_factory=dict)   # to write: rows an interrupted build finished in its staging file
                                               # (worker.RowResult by row, journal.py), not to be made again


@dataclass
class Plan:
    files: list[FilePlan]
    file_format: str = "npy"      # one of formats.FILE_FORMATS
    tasks: list[Task] = field(default_factory=list)

    @property
    def to_write(self) -> list[FilePlan]:
        return [f for f in self.files if f.reuse is None]

    def count(self, kind: str) -> int:
        return sum((t.src is None) == (kind == "compute") for t in self.tasks)

    @property
    def resumed(self) -> int:
        """Rows an interrupted build finished, kept in the staging files of the files to write."""
        return sum(len(f.done) for f in self.to_write)


def sample_keys(build_fp: str, records, sources: dict[str, ImageSource]) -> list[str]:
    return [digest(build_fp, r.name, sources[r.name].ann, sources[r.name].file) for r in records]


TMP_SUFFIX = ".tmp"   # a file being written; renamed to its final name when complete
STAGE_SUFFIX = ".slots"   # before TMP_SUFFIX: a packed kind's staging file of fixed slots (formats/packed.py)
ROWS_SUFFIX = ".rows"     # before TMP_SUFFIX: the journal of a staging file's finished rows (journal.py)


def file_name(strategy: str, index: int, digest16: str, file_format: str) -> str:
    return f"{strategy}-{index:05d}-{digest16}.{file_format}"


def tmp_name(name: str) -> str:
    """The temp name of a data file (name) or a sidecar (name ending .npz, which np.savez keeps)."""
    return name + TMP_SUFFIX + (".npz" if name.endswith(".npz") else "")


def stage_name(name: str, spec: RecordSpec) -> str:
    """The temp file a data file's rows are written into: its temp name, or for a packed kind (pages) its staging
    file of fixed slots, packed into the temp name once every row is in."""
    return name + STAGE_SUFFIX + TMP_SUFFIX if spec.kind.packed else tmp_name(name)


def journal_name(name: str) -> str:
    """The journal of the rows finished in data file name's staging file, kept across an interruption."""
    return name + ROWS_SUFFIX + TMP_SUFFIX


def temp_names(name: str) -> list[str]:
    """Every temp name a build may write a data file under (outdir.remove_temp_files removes them)."""
    return [tmp_name(name), name + STAGE_SUFFIX + TMP_SUFFIX, journal_name(name)]


def _alternatives(words) -> str:
    return "(" + "|".join(re.escape(w) for w in words) + ")"


# Every name a build writes in CACHE/data/: file_name's data files (X.npy, X.zarr), their sidecars (X.quads.npz,
# named from the stem), the temp names of both, the staging files of packed data files and the journals. Garbage collection
# deletes only these, so that a --out holding anything else (a dataset's own data/ folder) loses nothing.
OWN_FILE = re.compile(rf"{_alternatives(STRATEGIES)}-\d{{5}}-[0-9a-f]{{16}}"
                      rf"(\.{_alternatives(FILE_FORMATS)}({_alternatives((STAGE_SUFFIX, ROWS_SUFFIX))}?{re.escape(TMP_SUFFIX)})?"
                      rf"|{re.escape(QUADS_SUFFIX)}({re.escape(tmp_name(QUADS_SUFFIX).removeprefix(QUADS_SUFFIX))})?)")


def make_plan(cfg: BuildConfig, build_fp: str, records, sources: dict[str, ImageSource], old: Manifest | None,
              out: Path, corrupt: set[str], file_format: str = "npy") -> Plan:
    out = out.absolute()  # tasks may run in other processes and directories (a dask cluster's workers)
    image_keys = sample_keys(build_fp, records, sources)
    layout = Layout.of(cfg, len(records)).members()
    spec = record_spec(cfg)
    # A file whose header, size or sidecar is damaged is neither kept nor copied from, verify or not.
    old_files = {f.name: f for f in (old.files if old else [])
                 if f.name not in corrupt and _sound(data_path(out, f.name), spec, f.rows, f.bytes)}
    # Where each old sample lives, to copy instead of recompute.
    old_rows = {k: (f.name, r) for f in old_files.values() for r, k in enumerate(f.keys)}
    plan = Plan(files=[], file_format=file_format)
    for index, members in enumerate(layout):
        keys = [f"{image_keys[i]}:{v}" for i, v in members]
        name = file_name(cfg.strategy, index, digest(build_fp, *keys)[:16], file_format)
        fp = FilePlan(name=name, keys=keys, members=members)
        fp.reuse = _reusable(out, name, old_files.get(name), corrupt, spec, len(keys))
        plan.files.append(fp)
        if fp.reuse is not None:
            continue
        dst = str(data_path(out, stage_name(name, spec)))
        for row, ((i, v), key) in enumerate(zip(members, keys)):
            if key in old_rows and data_path(out, old_rows[key][0]).exists():
                src_name, src_row = old_rows[key]
                plan.tasks.append(Task(index, row, dst, src=str(data_path(out, src_name)), src_row=src_row))
            else:
                plan.tasks.append(Task(index, row, dst, record=records[i], variant=v))
    return plan


def _reusable(out: Path, name: str, entry: FileEntry | None, corrupt: set[str], spec: RecordSpec,
              rows: int) -> FileEntry | bool | None:
    """The old manifest entry if the file can be kept; True for a file finished by an interrupted build."""
    path = data_path(out, name)
    if name in corrupt or not _sound(path, spec, rows, entry.bytes if entry is not None else None):
        return None
    return entry if entry is not None else True


def _sound(path: Path, spec: RecordSpec, rows: int, nbytes: int | None = None) -> bool:
    """A finished file and its sidecar whose headers and sizes are right (what integrity.py checks at reading)."""
    try:
        return (path.exists() and quads_path(path).exists() and format_of(path).check(path, spec, rows, nbytes) is None
                and sidecar_file_problem(path, rows) is None)
    except ValueError:   # a name of no known format
        return False
