"""The manifest: what a cache holds, what it was built from, and how to rebuild it. Typed and validated once.

CACHE/manifest.json is written last and atomically, so a cache directory either has a complete manifest
that describes complete files, or none the reader will accept. Manifest.load checks its version, its
structure and its types, and that its files fit its layout; anything else is a CacheError that names
the cache and the file, and says what to run.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from east_cache.config import IMAGE_CODECS, STRATEGIES, BuildConfig
from east_cache.errors import CacheError, cache_command
from east_cache.ingest.files import open_regular
from east_cache.atomic import write_atomic
from east_cache.store.fingerprint import ImageSource
from east_cache.store.format import (
    DATA_DIR,
    FORMAT_VERSION,
    MANIFEST,
    RecordSpec,
    record_spec,
)
from east_cache.store.formats import FILE_FORMATS, FileFormat, get_format
from east_cache.store.layout import Layout


@dataclass
class Source:
    data_dirs: list[str]          # absolute dataset roots, in --data order
    split: str                    # which ufo/{split}.json
    skip_bad: bool                # --skip-bad
    check_content: bool           # --check-content: fingerprints of bytes, not size + mtime
    json_files: dict[str, str] | None = None   # UFO file -> fingerprint, taken before it was read

    def request(self) -> tuple:
        """What the user asked for, without what was found (json_files)."""
        return self.data_dirs, self.split, self.skip_bad, self.check_content


@dataclass
class DataSource:
    """A --data root as a run's selection names it (store/selection.py): its name and the UFO files found in its ufo/
    at the build. Bookkeeping, not sample content: no fingerprint that decides what a build recomputes covers it."""
    name: str                     # the root's folder name, or its --name
    root: str                     # as Source.data_dirs records it
    files: dict[str, str]         # split -> fingerprint of ufo/{split}.json, every such file found
    unread: dict[str, str] = field(default_factory=dict)   # split -> why its file could not be read (a build warning)

    @property
    def splits(self) -> list[str]:
        """The splits whose images the manifest's members record: the files found and read."""
        return sorted(s for s in self.files if s not in self.unread)


@dataclass
class Member:
    """An image's place among the sources: the root it came from and every split of that root listing it."""
    source: str                   # DataSource.name
    splits: list[str]             # sorted


@dataclass
class FileEntry:
    name: str                     # file name in CACHE/data
    rows: int                     # records
    keys: list[str]               # sample key of each row (plan.py)
    checksum: str                 # of the decoded records, the same in every format
    quads_checksum: str           # of the sidecar's bytes
    shards: dict[str, str] | None = None   # per part of a multi-part file (a zarr group), by relative path
    bytes: int | None = None      # the file's size (a file of one part: npy), which readers and downloads check


@dataclass
class BuildStats:
    seconds: float = 0.0
    finished_at: str = ""
    computed: int = 0             # samples made from source images
    copied: int = 0               # samples copied from the previous cache
    files_reused: int = 0


@dataclass
class Manifest:
    build_fingerprint: str
    config: BuildConfig           # strategy resolved (never "auto")
    source: Source
    images: dict[str, ImageSource]
    files: list[FileEntry]
    file_format: str = "npy"
    strategy_reason: str = ""
    ingest: dict = field(default_factory=dict)       # IngestSummary.to_dict(): counts, and "bad" [name, why]
    notes: dict[str, str] = field(default_factory=dict)   # image -> decode warning or skip reason
    exif_applied: list[str] = field(default_factory=list)
    build: BuildStats = field(default_factory=BuildStats)
    format_version: int = FORMAT_VERSION
    codec_reason: str = ""        # why config.image_codec (resolved, never "auto") was picked
    # the roots as sources and each image's source and splits; None in a manifest written before they were recorded
    sources: list[DataSource] | None = None
    members: dict[str, Member] | None = None

    @property
    def spec(self) -> RecordSpec:
        return record_spec(self.config)

    @property
    def layout(self) -> Layout:
        return Layout.of(self.config, len(self.images))

    @property
    def format(self) -> FileFormat:
        return get_format(self.file_format)

    @property
    def bad(self) -> list[tuple[str, str]]:
        """Images --skip-bad left out: (name, why)."""
        return [tuple(b) for b in self.ingest.get("bad", [])]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["config"] = self.config.to_dict()
        d["files"] = [{k: v for k, v in f.items() if v is not None} for f in d["files"]]
        if self.source.json_files is None:
            del d["source"]["json_files"]
        for key in ("sources", "members"):
            if d[key] is None:
                del d[key]
        return d

    def save(self, cache_dir) -> None:
        write_atomic(Path(cache_dir) / MANIFEST, json.dumps(self.to_dict(), indent=1, sort_keys=True))

    @classmethod
    def load(cls, cache_dir: str | os.PathLike, any_version: bool = False) -> "Manifest":
        """The cache's manifest, checked; any_version: also one of another format version, as recorded (what a
        rebuild needs: its source and settings), checked only as far as its keys' types."""
        path = Path(cache_dir) / MANIFEST
        if not path.exists():
            raise CacheError(f"{cache_dir}: no finished cache here ({MANIFEST} is missing). "
                             f"Build one with: {cache_command('build')} --data DIR --out {cache_dir}")
        try:   # a regular file only: a FIFO in its place would block the read forever
            with open_regular(path) as f:
                d = json.loads(f.read())
        except (ValueError, OSError) as e:   # ValueError: not JSON, not UTF-8, not a regular file
            raise CacheError(f"{path}: unreadable manifest ({e}). {repair_hint(cache_dir, None)}") from e
        if not isinstance(d, dict) or (d.get("format_version") != FORMAT_VERSION and not any_version):
            found = d.get("format_version") if isinstance(d, dict) else None
            raise CacheError(f"{cache_dir}: cache format version {found}, this code reads version {FORMAT_VERSION}. "
                             f"Rebuild it with: {_lenient_command(d, cache_dir)}, or pass --rebuild to train.py")
        m = cls.from_dict(d, path)
        if m.format_version == FORMAT_VERSION:
            m.validate(path)
        return m

    @classmethod
    def from_dict(cls, d: dict, where) -> "Manifest":
        """Typed from JSON, or CacheError naming where and the first key that does not fit."""
        try:
            cfg = BuildConfig.from_dict(_get(d, "config", dict))
            src = _get(d, "source", dict)
            source = Source([str(x) for x in _get(src, "data_dirs", list)], _get(src, "split", str),
                            _get(src, "skip_bad", bool), _get(src, "check_content", bool),
                            _get(src, "json_files", dict) if "json_files" in src else None)
            images = {n: ImageSource(**{k: _get(v, k, str) for k in ("ann", "file", "json", "path")})
                      for n, v in _get(d, "images", dict).items()}
            files = [FileEntry(_get(f, "name", str), _get(f, "rows", int), _get(f, "keys", list),
                               _get(f, "checksum", str), _get(f, "quads_checksum", str),
                               _get(f, "shards", dict) if "shards" in f else None,
                               _get(f, "bytes", int) if "bytes" in f else None)
                     for f in _get(d, "files", list)]
            b = _get(d, "build", dict)
            build = BuildStats(_get(b, "seconds", (int, float)), _get(b, "finished_at", str), _get(b, "computed", int),
                               _get(b, "copied", int), _get(b, "files_reused", int))
            sources = members = None
            if "sources" in d:   # recorded since the build records memberships (optional: the format is the same)
                sources = [DataSource(_get(x, "name", str), _get(x, "root", str), _strings(_get(x, "files", dict)),
                                      _strings(_get(x, "unread", dict))) for x in _get(d, "sources", list)]
                members = {n: Member(_get(v, "source", str), [str(s) for s in _get(v, "splits", list)])
                           for n, v in _get(d, "members", dict).items()}
            return cls(_get(d, "build_fingerprint", str), cfg, source, images, files,
                       _get(d, "file_format", str), _get(d, "strategy_reason", str), _get(d, "ingest", dict),
                       _get(d, "notes", dict), _get(d, "exif_applied", list), build, _get(d, "format_version", int),
                       _get(d, "codec_reason", str) if "codec_reason" in d else "", sources, members)
        except (KeyError, TypeError, ValueError) as e:
            raise CacheError(f"{where}: damaged manifest ({e}). {repair_hint(Path(where).parent, None)}") from None

    def validate(self, where) -> None:
        """The manifest agrees with itself: a known format, a resolved strategy, files that fit the layout,
        file names inside CACHE/data."""
        def fail(what: str) -> None:
            raise CacheError(f"{where}: {what}. {repair_hint(Path(where).parent, self)}")
        if self.file_format not in FILE_FORMATS:
            fail(f"unknown file format {self.file_format!r}")
        if self.config.strategy not in STRATEGIES:
            fail(f"strategy {self.config.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if self.config.image_codec not in IMAGE_CODECS:
            fail(f"image codec {self.config.image_codec!r} is not one of {', '.join(IMAGE_CODECS)}")
        expected = [len(m) for m in self.layout.members()]
        if [f.rows for f in self.files] != expected or any(len(f.keys) != f.rows for f in self.files):
            fail(f"its {len(self.files)} files do not hold {len(self.images)} images x {self.config.variants} "
                 f"variants in the {self.config.strategy} layout")
        for f in self.files:
            if Path(f.name).name != f.name or f.name.startswith(".") or not self.format.path_ok(f.name):
                fail(f"file name {f.name!r} is not a {self.file_format} data file of CACHE/{DATA_DIR}")
        roots = [os.path.normpath(d) + os.sep for d in self.source.data_dirs]
        for name, src in self.images.items():
            for p in (src.path, src.json):
                if not os.path.normpath(p).startswith(tuple(roots)):
                    fail(f"image {name!r}: {p} lies outside the data dirs the cache was built from")
        if self.sources is not None:
            named = {s.name for s in self.sources}
            members = self.members or {}
            if ([s.root for s in self.sources] != self.source.data_dirs or len(named) != len(self.sources)
                    or set(members) != set(self.images) or any(m.source not in named for m in members.values())):
                fail("its sources and their images' memberships do not describe its images and data dirs")

    def build_command(self, out) -> str:
        """The command that brings this cache up to date: its recorded --data, split, file format and config, the
        config as flags wherever it differs from the defaults (build/request.py's config_from_args inverted)."""
        src, cfg, d = self.source, self.config, BuildConfig()
        words = [cache_command("build"), *(f"--data {shlex.quote(x)}" for x in src.data_dirs)]
        if self.sources is not None and any(s.name != source_name(s.root) for s in self.sources):
            words += [f"--name {shlex.quote(s.name)}" for s in self.sources]
        if src.split != "train":
            words.append(f"--split {shlex.quote(src.split)}")
        words += [f"--out {shlex.quote(str(out))}", f"--strategy {cfg.strategy}"]
        if self.file_format != "npy":
            words.append(f"--format {self.file_format}")
        for f in dataclasses.fields(BuildConfig):
            value = getattr(cfg, f.name)
            if f.name == "strategy" or value == getattr(d, f.name):
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                words.append(flag)
            else:
                words.append(f"{flag} {shlex.quote(','.join(value) if isinstance(value, tuple) else str(value))}")
        words += [flag for flag, on in (("--check-content", src.check_content), ("--skip-bad", src.skip_bad)) if on]
        return " ".join(words)


def source_name(root: str) -> str:
    """The name a --data root goes by as a source (--split and --repeat of east-train name it) unless given --name:
    its folder's name (a URL's last part)."""
    return root.rstrip("/").rsplit("/", 1)[-1] if "://" in root else Path(root).name


def data_path(cache_dir, name: str) -> Path:
    return Path(cache_dir) / DATA_DIR / name


def update_command(manifest: Manifest | None, cache_dir) -> str:
    """The build command recorded in a manifest, or a template where there is none to read."""
    if manifest is None:
        return f"{cache_command('build')} --data DIR --out {cache_dir} (with the --data and options it was built with)"
    return manifest.build_command(cache_dir)


def repair_hint(cache_dir, manifest: Manifest | None) -> str:
    return (f"Repair: run `{cache_command('verify')} {cache_dir}`, then rebuild with: "
            f"{update_command(manifest, cache_dir)}")


def _lenient_command(d, cache_dir) -> str:
    """The build command of a manifest of another version, where it can be read, else a template."""
    try:
        return update_command(Manifest.from_dict(d, Path(cache_dir) / MANIFEST), cache_dir)
    except (CacheError, AttributeError):
        return update_command(None, cache_dir)


def _strings(d: dict) -> dict[str, str]:
    """A JSON object of strings, checked."""
    if not all(isinstance(v, str) for v in d.values()):
        raise TypeError("expected an object of strings")
    return dict(d)


def _get(d: dict, key: str, kind):
    """d[key], which must be of type kind (a bool is not an int here)."""
    if not isinstance(d, dict):
        raise TypeError(f"expected an object holding {key!r}, found {type(d).__name__}")
    if key not in d:
        raise ValueError(f"{key!r} is missing")
    v = d[key]
    if not isinstance(v, kind) or (isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))):
        raise TypeError(f"{key!r} is {type(v).__name__}, not {getattr(kind, '__name__', kind)}")
    return v
