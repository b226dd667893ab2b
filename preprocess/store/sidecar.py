"""The word sidecar of a data file: X.quads.npz beside X.npy or X.zarr, its samples' words in crop pixels.

Arrays: points (P, 2) float32, all words' corners; offsets (N + 1,) int64, word j's corners are
points[offsets[j]:offsets[j + 1]]; care (N,) uint8, 0 for a don't-care word; sample_offsets (R + 1,)
int64, record r's words are words sample_offsets[r]:sample_offsets[r + 1]; word (N,) int32, each word's index
among its source image's words (what coverage counts); legible (R,) int32, legible words of each record's
source image; and for page records weight (N,) float32, each word's chance to be the one a crop is drawn
around (0 for a don't-care word).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from preprocess.store.fingerprint import file_fingerprint
from preprocess.store.format import QUADS_SUFFIX


def quads_path(data_file: Path) -> Path:
    """X.quads.npz beside X.npy or X.zarr (both hold the same rows when their names share the stem)."""
    data_file = Path(data_file)
    return data_file.with_name(data_file.stem + QUADS_SUFFIX)


def load_sidecar(data_file: Path) -> dict[str, np.ndarray]:
    return dict(np.load(quads_path(data_file)))


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


def sidecar_arrays(rows) -> dict[str, np.ndarray]:
    """The sidecar of a file from its rows' words, in row order: each row has points, offsets and care, and
    word, weight (None where a record has none) and legible."""
    point_base = np.cumsum([0] + [len(r.points) for r in rows])
    out = {
        "points": np.concatenate([r.points for r in rows]).astype(np.float32).reshape(-1, 2),
        "offsets": np.concatenate([[0]] + [r.offsets[1:] + base for r, base in zip(rows, point_base)]).astype(np.int64),
        "care": np.concatenate([r.care for r in rows]).astype(np.uint8),
        "sample_offsets": np.cumsum([0] + [len(r.care) for r in rows]).astype(np.int64),
        "legible": np.array([r.legible for r in rows], np.int32),
    }
    for name, dtype in (("word", np.int32), ("weight", np.float32)):
        if rows and all(getattr(r, name) is not None for r in rows):
            out[name] = np.concatenate([getattr(r, name) for r in rows]).astype(dtype)
    return out


def quads_checksum(path: Path) -> str:
    return file_fingerprint(path, check_content=True)
