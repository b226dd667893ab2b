"""The word sidecar of a data file: X.quads.npz beside X.npy or X.zarr, its samples' words in crop pixels.

Arrays: points (P, 2) float32, all words' corners; offsets (N + 1,) int64, word j's corners are
points[offsets[j]:offsets[j + 1]]; care (N,) uint8, 0 for a don't-care word; sample_offsets (R + 1,)
int64, record r's words are words sample_offsets[r]:sample_offsets[r + 1]; word (N,) int32, each word's index
among its source image's words (what coverage counts); legible (R,) int32, legible words of each record's
source image; and for page records weight (N,) float32, each word's chance to be the one a crop is drawn
around (0 for a don't-care word); and DATA_CHECKSUM, a 0-d string array: the checksum of the data file whose rows these
are (the manifest's FileEntry.checksum, of its decoded records), so that a sidecar put beside another data file (a
bucket's objects mixed up, a manifest edited to match) is refused wherever it is read.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from east_cache.errors import REPAIR, CacheError
from east_cache.store.fingerprint import file_fingerprint
from east_cache.store.format import QUADS_SUFFIX


def quads_path(data_file: Path) -> Path:
    """X.quads.npz beside X.npy or X.zarr (both hold the same rows when their names share the stem)."""
    data_file = Path(data_file)
    return data_file.with_name(data_file.stem + QUADS_SUFFIX)


# The arrays a sidecar holds, and their dtypes.
ARRAYS = {"points": np.float32, "offsets": np.int64, "care": np.uint8, "sample_offsets": np.int64}
DATA_CHECKSUM = "data_checksum"   # the identity of its data file


def identity_problem(arrays, checksum: str | None) -> str | None:
    """Why a sidecar (its arrays, or its open npz) is not the one of the data file whose checksum is given; None
    when it is, or when no checksum is given."""
    if checksum is None:
        return None
    if DATA_CHECKSUM not in (arrays.files if hasattr(arrays, "files") else arrays):
        return "it does not say whose words it holds (no data file checksum)"
    held = arrays[DATA_CHECKSUM]
    if held.shape != () or held.dtype.kind != "U" or str(held) != checksum:
        return (f"it holds the words of another data file (data checksum {str(held)[:16]}, the manifest's "
                f"{checksum[:16]}): sidecars were swapped or the manifest edited")
    return None


def load_sidecar(data_file: Path, rows: int | None = None, checksum: str | None = None) -> dict[str, np.ndarray]:
    """The sidecar's arrays. Given the data file's rows, they are checked to describe that many records, and given
    its checksum, to be that file's (identity_problem): anything else (not a zip, arrays missing, offsets that do
    not add up, another file's words) raises CacheError naming the file."""
    path = quads_path(data_file)
    if rows is None:
        return dict(np.load(path))
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:   # noqa: BLE001  a damaged zip or npy raises any of a dozen kinds
        raise CacheError(f"{path.name}: unreadable word quads sidecar ({type(e).__name__})") from None
    why = sidecar_problem(arrays, rows) or identity_problem(arrays, checksum)
    if why:
        raise CacheError(f"{path.name}: word quads sidecar: {why}; {REPAIR}")
    return arrays


def sidecar_file_problem(data_file: Path, rows: int, checksum: str | None = None) -> str | None:
    """What a quick look finds wrong with a sidecar (its zip directory, its array names, its sample_offsets, whose
    data file it says it belongs to: a few hundred bytes read): cheap enough for every file when a cache is opened.
    load_sidecar checks the rest."""
    try:
        with np.load(quads_path(data_file)) as z:
            missing = [k for k in ARRAYS if k not in z.files]
            if missing:
                return f"array(s) {', '.join(missing)} missing"
            so = z["sample_offsets"]
            why = identity_problem(z, checksum)
            if why:
                return why
    except Exception as e:   # noqa: BLE001  a damaged zip or npy raises any of a dozen kinds
        return f"unreadable ({type(e).__name__})"
    if so.shape != (rows + 1,):
        return f"it describes {len(so) - 1} records, the manifest {rows}"
    return None


def sidecar_problem(arrays: dict, rows: int) -> str | None:
    """What keeps a sidecar's arrays from describing `rows` records, or None."""
    for key, kind in ARRAYS.items():
        a = arrays.get(key)
        if a is None or a.dtype != kind:
            return f"array {key!r} is missing or not {np.dtype(kind).name}"
    so, off, points, care = arrays["sample_offsets"], arrays["offsets"], arrays["points"], arrays["care"]
    if so.shape != (rows + 1,) or so[0] != 0 or so[-1] != len(care) or np.any(np.diff(so) < 0):
        return f"sample_offsets do not split {len(care)} words over {rows} records"
    if (off.shape != (len(care) + 1,) or off[0] != 0 or np.any(np.diff(off) < 0) or points.ndim != 2
            or points.shape != (off[-1], 2)):
        return f"offsets do not split {len(points)} points over {len(care)} words"
    for key, n in (("word", len(care)), ("weight", len(care)), ("legible", rows)):   # present in newer sidecars
        if key in arrays and arrays[key].shape != (n,):
            return f"array {key!r} has {arrays[key].shape} entries, not ({n},)"
    return None


def row_quads(sidecar: dict, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points (P,2), offsets (N+1,) from 0, care (N,)) of one record, from its file's loaded sidecar."""
    w0, w1 = sidecar["sample_offsets"][row], sidecar["sample_offsets"][row + 1]
    offsets = sidecar["offsets"][w0:w1 + 1]
    return sidecar["points"][offsets[0]:offsets[-1]], offsets - offsets[0], sidecar["care"][w0:w1]


def row_words(sidecar: dict, row: int) -> dict[str, np.ndarray]:
    """A record's per-word arrays beside its quads (word, and weight for pages), and legible (its image's count)."""
    w0, w1 = sidecar["sample_offsets"][row], sidecar["sample_offsets"][row + 1]
    out = {k: sidecar[k][w0:w1] for k in ("word", "weight") if k in sidecar}
    if "legible" in sidecar:
        out["legible"] = int(sidecar["legible"][row])
    return out


def sidecar_arrays(rows, checksum: str) -> dict[str, np.ndarray]:
    """The sidecar of a file from its rows' words, in row order (each row has points, offsets and care, and
    word, weight (None where a record has none) and legible) and the data file's checksum."""
    point_base = np.cumsum([0] + [len(r.points) for r in rows])
    out = {
        "points": np.concatenate([r.points for r in rows]).astype(np.float32).reshape(-1, 2),
        "offsets": np.concatenate([[0]] + [r.offsets[1:] + base for r, base in zip(rows, point_base)]).astype(np.int64),
        "care": np.concatenate([r.care for r in rows]).astype(np.uint8),
        "sample_offsets": np.cumsum([0] + [len(r.care) for r in rows]).astype(np.int64),
        "legible": np.array([r.legible for r in rows], np.int32),
        DATA_CHECKSUM: np.array(checksum),
    }
    for name, dtype in (("word", np.int32), ("weight", np.float32)):
        if rows and all(getattr(r, name) is not None for r in rows):
            out[name] = np.concatenate([getattr(r, name) for r in rows]).astype(dtype)
    return out


def quads_checksum(path: Path) -> str:
    return file_fingerprint(path, check_content=True)
