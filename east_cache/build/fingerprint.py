"""What makes a cache out of date: hashes of the build config and the sample code (build_fingerprint,
sample_code_version), and of the source files (source_fingerprints, json_fingerprints).

A sample's bytes are a function of its source (annotation entry and image file), the build config,
the sample-making code and the format. Each has a fingerprint here; equal fingerprints mean the
sample can be reused, and any difference means it is made again. The checksums of records and files, which the
on-disk format keeps, are east_cache/store/fingerprint.py's.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from east_cache.config import BuildConfig
from east_cache.ingest.ufo import find_split
from east_cache.store.fingerprint import ImageSource, digest, file_fingerprint
from east_cache.store.format import FORMAT_VERSION

# The modules whose code decides a sample's bytes: ingest rules, decoding, the warp, the targets, the crop draw's
# rule (a page's word weights assume it), a page's record layout and its image codecs. sample/epoch_geometry (each
# epoch's warp and crop, --geometry read) is drawn by the reader alone: not listed, so changing it rebuilds nothing.
SAMPLE_MODULES = ("ingest/ufo", "ingest/imageio", "sample/geometry", "sample/targets", "sample/make", "sample/page",
                  "sample/crop_draw", "store/page_record", "store/page_rows", "store/jpeg_tiles", "store/page_jpeg")
# Top-level definitions of those modules that only a reader (or a size estimate) runs, left out of the hash so that
# changing them rebuilds no cache: the crop draw's fast form and its per-crop generator (tests/test_crop_draw.py
# checks that they draw what the rule draws); decoding JPEG tiles; a jpeg page image as a reader sees it.
READ_ONLY = {"sample/crop_draw": ("CropDraw", "crop_rng", "epoch_crop", "COUNTS_CELLS_MAX", "CROP_RNG_SALT", "_thread"),
             "store/jpeg_tiles": ("tile_stream", "block_streams", "decode_stream", "clear_outside", "decode_block",
                                  "block_of", "decode_window", "check_tiles"),
             "store/page_jpeg": ("JPEG_BYTES_PER_PX", "jpeg_estimate", "page_estimate", "JpegBlock", "page_tiles",
                                 "tiles_problem")}


def build_fingerprint(cfg: BuildConfig) -> str:
    """Changes whenever a sample could change for reasons other than its source: config, code, format."""
    return digest(cfg.fingerprint(), sample_code_version(), FORMAT_VERSION)


@functools.lru_cache(maxsize=1)
def sample_code_version() -> str:
    """A hash of the syntax trees of SAMPLE_MODULES without docstrings and READ_ONLY definitions: it changes
    whenever their code does, and only then (comments, layout and docs do not count), with no version number to
    remember to bump. A cache built by other code is rebuilt, never read as if the maths were the same."""
    root = Path(__file__).parents[1]
    return code_hash([(root / f"{name}.py").read_text() for name in SAMPLE_MODULES],
                     [READ_ONLY.get(name, ()) for name in SAMPLE_MODULES])


def code_hash(sources: list[str], leave_out: list[tuple[str, ...]] | None = None) -> str:
    """Hash of Python sources as syntax trees, docstrings dropped, and of source k the top-level functions,
    classes and assignments named in leave_out[k] (see sample_code_version)."""
    h = hashlib.blake2b(digest_size=16)
    for k, source in enumerate(sources):
        tree = ast.parse(source)
        names = set(leave_out[k]) if leave_out else set()
        tree.body = [node for node in tree.body if not names & defined(node)]
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        h.update(ast.dump(tree).encode())
    return h.hexdigest()


def defined(node: ast.stmt) -> set[str]:
    """The names a top-level statement defines: a function's, a class's, an assignment's targets."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def source_fingerprints(records, check_content: bool = False) -> dict[str, ImageSource]:
    return {r.name: ImageSource(r.fingerprint, file_fingerprint(r.path, check_content), r.source, r.path)
            for r in records}


def json_fingerprints(data_dirs, split: str, check_content: bool = False) -> dict[str, str]:
    """A fingerprint per UFO file of the split: while none changes, no annotation entry can have."""
    paths = [find_split(d, split)[0] for d in data_dirs]
    return {str(p): file_fingerprint(p, check_content) for p in paths}
