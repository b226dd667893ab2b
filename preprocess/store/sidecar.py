"""The word sidecar of a data file: X.quads.npz beside X.npy or X.zarr, its samples' words in crop pixels.

Arrays: points (P, 2) float32, all words' corners; offsets (N + 1,) int64, word j's corners are
points[offsets[j]:offsets[j + 1]]; care (N,) uint8, 0 for a don't-care word; sample_offsets (R + 1,)
int64, record r's words are words sample_offsets[r]:sample_offsets[r + 1].
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


def sidecar_arrays(rows) -> dict[str, np.ndarray]:
    """The sidecar of a file from its rows' words, in row order: each row has points, offsets and care."""
    point_base = np.cumsum([0] + [len(r.points) for r in rows])
    return {
        "points": np.concatenate([r.points for r in rows]).astype(np.float32).reshape(-1, 2),
        "offsets": np.concatenate([[0]] + [r.offsets[1:] + base for r, base in zip(rows, point_base)]).astype(np.int64),
        "care": np.concatenate([r.care for r in rows]).astype(np.uint8),
        "sample_offsets": np.cumsum([0] + [len(r.care) for r in rows]).astype(np.int64),
    }


def quads_checksum(path: Path) -> str:
    return file_fingerprint(path, check_content=True)
