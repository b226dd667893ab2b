"""The manifest: what a cache holds, what it was built from, and whether that source has changed.

It is written last and atomically, so a cache directory either has a complete manifest that
describes complete files, or none the reader will accept.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from preprocess.config import BuildConfig
from preprocess.errors import CacheError, DataError
from preprocess.ingest.ufo import find_split, load_splits
from preprocess.store.format import DATA_DIR, FORMAT_VERSION, MANIFEST, QUADS_SUFFIX, open_records, record_dtype


def digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


# The modules whose code decides a sample's bytes: ingest rules, decoding, the warp, the targets.
SAMPLE_MODULES = ("ingest/ufo", "ingest/imageio", "sample/geometry", "sample/targets", "sample/make")


def build_fingerprint(cfg: BuildConfig) -> str:
    """Changes whenever a sample could change for reasons other than its source: config, code, format."""
    return digest(cfg.fingerprint(), sample_code_version(), FORMAT_VERSION)


@functools.lru_cache(maxsize=1)
def sample_code_version() -> str:
    """A hash of the syntax trees of SAMPLE_MODULES without docstrings: it changes whenever their code does, and
    only then (comments, layout and docs do not count), with no version number to remember to bump. A cache
    built by other code is rebuilt, never read as if the maths were the same."""
    return code_hash([(Path(__file__).parents[1] / f"{name}.py").read_text() for name in SAMPLE_MODULES])


def code_hash(sources: list[str]) -> str:
    """Hash of Python sources as syntax trees, docstrings dropped (see sample_code_version)."""
    h = hashlib.blake2b(digest_size=16)
    for source in sources:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        h.update(ast.dump(tree).encode())
    return h.hexdigest()


def file_fingerprint(path: str | os.PathLike, check_content: bool = False) -> str:
    """size + mtime (cheap), or the bytes themselves with check_content."""
    if check_content:
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return "b2:" + h.hexdigest()
    st = os.stat(path)
    return f"st:{st.st_size}:{st.st_mtime_ns}"


def rows_checksum(row_crcs) -> str:
    """A data file's checksum: a hash of its records' CRC32s in row order (workers compute those)."""
    return digest(*[f"{int(c):08x}" for c in row_crcs])


def record_crc(record: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(record)).cast("B"))


def file_checksum(path: Path) -> str:
    """Recompute a data file's checksum from its bytes (verify, resume)."""
    arr = open_records(path)
    return rows_checksum(record_crc(arr[r:r + 1]) for r in range(len(arr)))


def quads_checksum(path: Path) -> str:
    return file_fingerprint(path, check_content=True)


def write_atomic(path: Path, text: str) -> None:
    """temp file + fsync + rename + fsync of the directory: readers see the old or the new file, never half."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:   # a full disk, an interrupt: the old file stands, and no temp file is left behind
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def fsync_path(path) -> None:
    """A file's data, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(cache_dir: Path, manifest: dict) -> None:
    write_atomic(Path(cache_dir) / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def read_manifest(cache_dir: str | os.PathLike) -> dict:
    path = Path(cache_dir) / MANIFEST
    if not path.exists():
        raise CacheError(f"{cache_dir}: no finished cache here ({MANIFEST} is missing). "
                         f"Build one with: python -m preprocess build --data DIR --out {cache_dir}")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CacheError(f"{path}: unreadable manifest ({e}). Rebuild with: python -m preprocess build --data DIR "
                         f"--out {cache_dir} and the options you built it with") from e
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CacheError(f"{cache_dir}: cache format version {manifest.get('format_version')}, this code reads version "
                         f"{FORMAT_VERSION}. Rebuild it with: {update_command(manifest, cache_dir)}")
    return manifest


def build_command(manifest: dict, out) -> str:
    """The command that brings the cache described by manifest up to date: its recorded --data, split, file
    format and config, the config as flags wherever it differs from the defaults (config_from_args inverted)."""
    src, cfg, d = manifest["source"], BuildConfig.from_dict(manifest["config"]), BuildConfig()
    words = ["python -m preprocess build", *(f"--data {shlex.quote(x)}" for x in src["data_dirs"])]
    if src.get("split", "train") != "train":
        words.append(f"--split {shlex.quote(src['split'])}")
    words += [f"--out {shlex.quote(str(out))}", f"--strategy {cfg.strategy}"]
    if manifest.get("file_format", "npy") != "npy":
        words.append(f"--format {manifest['file_format']}")
    for f in dataclasses.fields(BuildConfig):
        value = getattr(cfg, f.name)
        if f.name == "strategy" or value == getattr(d, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag)
        else:
            words.append(f"{flag} {shlex.quote(','.join(value) if isinstance(value, tuple) else str(value))}")
    words += [flag for flag, on in (("--check-content", src.get("check_content")), ("--skip-bad", src.get("skip_bad")))
              if on]
    return " ".join(words)


def update_command(manifest: dict, cache_dir) -> str:
    """The build command recorded in manifest, or a template where the manifest is too old to say."""
    try:
        return build_command(manifest, cache_dir)
    except (KeyError, TypeError, ValueError):
        return f"python -m preprocess build --data DIR --out {cache_dir} (with the --data and options it was built with)"


def manifest_config(manifest: dict) -> BuildConfig:
    return BuildConfig.from_dict(manifest["config"])


def manifest_dtype(manifest: dict) -> np.dtype:
    cfg = manifest_config(manifest)
    return record_dtype(cfg.input_size, cfg.map_size)


def data_path(cache_dir: Path, name: str) -> Path:
    return Path(cache_dir) / DATA_DIR / name


def quads_path(data_file: Path) -> Path:
    """X.quads.npz beside X.npy or X.zarr (both hold the same rows when their names share the stem)."""
    return data_file.with_name(data_file.stem + QUADS_SUFFIX)


@dataclass
class Staleness:
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    error: str | None = None       # the source could not be read at all

    @property
    def stale(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.error)

    def describe(self) -> str:
        if self.error:
            return self.error
        parts = [f"{len(v)} {k}" for k, v in (("changed", self.changed), ("added", self.added), ("removed", self.removed)) if v]
        example = (self.changed + self.added + self.removed)[:3]
        return f"{', '.join(parts)} image(s) since the build (e.g. {', '.join(example)})"


def source_fingerprints(records, check_content: bool = False) -> dict[str, dict]:
    return {r.name: {"ann": r.fingerprint, "file": file_fingerprint(r.path, check_content), "json": r.source,
                     "path": r.path} for r in records}


def json_fingerprints(data_dirs, split: str, check_content: bool = False) -> dict[str, str]:
    """A fingerprint per UFO file of the split: while none changes, no annotation entry can have."""
    paths = [find_split(d, split)[0] for d in data_dirs]
    return {str(p): file_fingerprint(p, check_content) for p in paths}


def sources_unchanged(manifest: dict) -> bool:
    """The quick no-op test: the UFO files and every image file have the fingerprints they had at
    build time. Parses no JSON, so 10k images cost 10k stat calls, not a parse of every word.
    False means "look closer", not "stale": a UFO file saved again unchanged fails this test and
    then passes the per-entry comparison."""
    src = manifest["source"]
    if "json_files" not in src or manifest["ingest"].get("bad"):
        # Images left out with --skip-bad have no entry in "images": only a full read sees them return.
        return False
    check_content = src.get("check_content", False)
    try:
        if json_fingerprints(src["data_dirs"], src["split"], check_content) != src["json_files"]:
            return False
        return all(file_fingerprint(fp["path"], check_content) == fp["file"] for fp in manifest["images"].values())
    except (OSError, KeyError, ValueError):   # ValueError: DataError, a data dir or UFO file gone
        return False


def compare_sources(old: dict[str, dict], new: dict[str, dict]) -> Staleness:
    st = Staleness()
    for name, fp in new.items():
        if name not in old:
            st.added.append(name)
        elif (old[name]["ann"], old[name]["file"]) != (fp["ann"], fp["file"]):
            st.changed.append(name)
    st.removed = [n for n in old if n not in new]
    return st


def check_stale(manifest: dict) -> Staleness:
    """Re-read the recorded source (annotations + file stats, no decoding) and compare fingerprints."""
    if sources_unchanged(manifest):
        return Staleness()
    cfg = manifest_config(manifest)
    src = manifest["source"]
    try:
        records, _ = load_splits([Path(d) for d in src["data_dirs"]], src["split"], cfg, skip_bad=src.get("skip_bad", False))
        fps = source_fingerprints(records, src.get("check_content", False))
    except (DataError, OSError) as e:
        return Staleness(error=f"the source data cannot be read: {e}")
    return compare_sources(manifest["images"], fps)
