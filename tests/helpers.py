"""Helpers shared by the tests: a small build config, cache contents as bytes, edits of a UFO file."""
from __future__ import annotations

import json
from pathlib import Path

from preprocess.config import BuildConfig
from preprocess.store.manifest import Manifest, data_path
from preprocess.store.sidecar import quads_path

SMALL = dict(image_size=192, input_size=96, map_scale=0.5, variants=2, crop_tries=50)


def small_config(**over) -> BuildConfig:
    return BuildConfig(**{**SMALL, **over})


def cache_bytes(out: Path) -> dict[str, bytes]:
    """Every data file and sidecar the manifest names, by name: two caches are equal when these are."""
    files = {}
    for f in Manifest.load(out).files:
        p = data_path(out, f.name)
        files[p.name], files[quads_path(p).name] = p.read_bytes(), quads_path(p).read_bytes()
    return files


def record_bytes(ds) -> dict:
    """Every sample's stored bytes by (image index, variant), read through the Dataset."""
    return {(i, v): ds.record(i, v).tobytes() for i in range(len(ds)) for v in range(ds.config.variants)}


def edit_ufo(data: Path, change) -> None:
    path = data / "ufo" / "train.json"
    ufo = json.loads(path.read_text())
    change(ufo["images"])
    path.write_text(json.dumps(ufo))


def first_image(images: dict) -> str:
    return sorted(images)[0]


def nudge_first_word(images) -> None:
    words = images[first_image(images)]["words"]
    word = words[sorted(words)[0]]
    word["points"] = [[x + 2, y] for x, y in word["points"]]
