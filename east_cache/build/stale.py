"""Whether a cache's source changed since it was built: the quick stat-only test, then a per-image compare."""
from __future__ import annotations

from dataclasses import dataclass, field

from east_cache.errors import DataError
from east_cache.ingest.ufo import load_splits
from east_cache.build.fingerprint import build_fingerprint, json_fingerprints, source_fingerprints
from east_cache.store.fingerprint import ImageSource, file_fingerprint
from east_cache.store.format import FORMAT_VERSION
from east_cache.store.manifest import Manifest


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


def sources_unchanged(m: Manifest) -> bool:
    """The quick no-op test: the UFO files and every image file have the fingerprints they had at
    build time. Parses no JSON, so 10k images cost 10k stat calls, not a parse of every word.
    False means "look closer", not "stale": a UFO file saved again unchanged fails this test and
    then passes the per-entry comparison."""
    src = m.source
    if src.json_files is None or m.bad:
        # Images left out with --skip-bad have no entry in "images": only a full read sees them return.
        return False
    try:
        if json_fingerprints(src.data_dirs, src.split, src.check_content) != src.json_files:
            return False
        return all(file_fingerprint(fp.path, src.check_content) == fp.file for fp in m.images.values())
    except (OSError, ValueError):   # ValueError: DataError, a data dir or UFO file gone
        return False


def compare_sources(old: dict[str, ImageSource], new: dict[str, ImageSource]) -> Staleness:
    st = Staleness()
    for name, fp in new.items():
        if name not in old:
            st.added.append(name)
        elif (old[name].ann, old[name].file) != (fp.ann, fp.file):
            st.changed.append(name)
    st.removed = [n for n in old if n not in new]
    return st


def check_stale(m: Manifest) -> Staleness:
    """Re-read the recorded source (annotations + file stats, no decoding) and compare fingerprints."""
    if sources_unchanged(m):
        return Staleness()
    src = m.source
    try:
        records, _ = load_splits(src.data_dirs, src.split, m.config, skip_bad=src.skip_bad)
        fps = source_fingerprints(records, src.check_content)
    except (DataError, OSError) as e:
        return Staleness(error=f"the source data cannot be read: {e}")
    return compare_sources(m.images, fps)


def out_of_date(m: Manifest) -> str | None:
    """Why the cache of manifest m (Manifest.load(any_version=True)) must be rebuilt before this code reads it,
    or None: another format version, another build fingerprint (made by other sample-making code, or with a
    config this code reads otherwise), or a source that changed since the build."""
    if m.format_version != FORMAT_VERSION:
        return f"it is of cache format version {m.format_version}, this code reads version {FORMAT_VERSION}"
    if m.build_fingerprint != build_fingerprint(m.config):
        return "it was made by other sample-making code (its build fingerprint is not this code's)"
    changes = check_stale(m)
    return changes.describe() if changes.stale else None
