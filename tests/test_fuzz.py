"""Hostile inputs and damaged caches, run through `build`, `verify`, the Dataset and train.py as a user would.

Every case asserts the same things: no traceback, no hang (subprocesses run under a timeout), an exit status of
0 or one `error: ...` line that names what it should, nothing outside the dataset read into the cache (a
sentinel image of a colour no page has lies next to the dataset: its colour must not appear in any cached
crop), and nothing of the user's deleted or changed (the dataset, and a file of theirs in --out).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from preprocess.cli import main as cli_main
from preprocess.tools.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
SENTINEL = (13, 177, 211)          # RGB of the image outside the dataset; no sample page uses it
TIMEOUT_S = 60                     # per subprocess: a hang fails the test instead of stalling the suite
FLAGS = ["--input-size", "64", "--image-size", "128", "--variants", "1", "--strategy", "whole", "--jobs", "1",
         "--quiet"]
USERS = "notes.txt"                # a file of the user's in --out, which no build may touch


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "data"
    return write_sample_dataset(root, n_images=3, words_per_page=6, page_size=(160, 120), seed=2)


@pytest.fixture
def world(pristine, tmp_path):
    """(dataset root, --out, sentinel): a private copy of the set, an --out holding a file of the user's, and a
    secret image outside the root, which a build must never read."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    out = tmp_path / "cache"
    out.mkdir()
    (out / USERS).write_text("mine")
    secret = tmp_path / "secret.png"
    Image.new("RGB", (160, 120), SENTINEL).save(secret)
    return data, out, secret


def snapshot(root: Path) -> dict[str, str]:
    """Hash of every regular file under root, by relative path (links: their target's path)."""
    found = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            found[str(p.relative_to(root))] = "-> " + os.readlink(p)
        elif p.is_file():
            found[str(p.relative_to(root))] = hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest()
    return found


def ufo_path(data: Path) -> Path:
    return data / "ufo" / "train.json"


def edit_images(data: Path, change) -> None:
    doc = json.loads(ufo_path(data).read_text())
    change(doc["images"])
    ufo_path(data).write_text(json.dumps(doc))


def rename_first(images: dict, new: str) -> None:
    first = min(images)
    images[new] = images.pop(first)


def run_cli(*args, timeout=TIMEOUT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "preprocess", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def check_answer(rc: int, err: str, expect: str | None) -> None:
    """0, or one `error:` line naming `expect`; never a traceback."""
    assert "Traceback" not in err, err
    if expect is None:
        assert rc == 0, err
        return
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and expect in lines[0], err


def cached_pixels(out: Path) -> np.ndarray:
    """Every cached crop's pixels as (N, 3) RGB, or an empty array when there is no cache."""
    arrays = [np.load(p, mmap_mode="r")["image"] for p in (out / "data").glob("*.npy")] if (out / "data").exists() else []
    return np.concatenate([a.transpose(0, 2, 3, 1).reshape(-1, 3) for a in arrays]) if arrays else np.zeros((0, 3))


def check_world(data: Path, out: Path, before: dict[str, str]) -> None:
    assert snapshot(data) == before, "the dataset was changed"
    assert (out / USERS).read_text() == "mine", "a file of the user's in --out was touched"
    px = cached_pixels(out)
    assert not (px == SENTINEL).all(axis=1).any(), "the image outside the dataset was read into the cache"


# Each case mutates the dataset (given the root and the secret image) and names what the error must name
# (None: the build succeeds; the case is then about what it must not do).
def _link_to_secret(data, secret):
    first = min((data / "images").iterdir())
    first.unlink()
    first.symlink_to(secret)


def _duplicate_first_word(data: Path) -> None:
    """The first word's id given twice in the first image (json.loads would keep one, silently)."""
    text = json.dumps(json.loads(ufo_path(data).read_text()))
    ufo_path(data).write_text(text.replace('"0001": ', '"0001": {"points": [[1, 1], [9, 1], [9, 9]]}, "0001": ', 1))


INGEST_CASES = {
    "dotdot name": (lambda d, s: edit_images(d, lambda im: rename_first(im, "../../secret.png")), "'../../secret.png'"),
    "absolute name": (lambda d, s: edit_images(d, lambda im: rename_first(im, str(s))), "secret.png"),
    "proc name": (lambda d, s: edit_images(d, lambda im: rename_first(im, "/proc/self/environ")), "/proc/self/environ"),
    "dotdot inside": (lambda d, s: edit_images(d, lambda im: rename_first(im, "x/../../../secret.png")), "'x/../"),
    "NUL name": (lambda d, s: edit_images(d, lambda im: rename_first(im, "a\0.jpg")), "U+0000"),
    "newline name": (lambda d, s: edit_images(d, lambda im: rename_first(im, "a\n.jpg")), "U+000A"),
    "fifo image": (lambda d, s: (min((d / "images").iterdir()).unlink(), os.mkfifo(min_name(d))), "a FIFO"),
    "directory image": (lambda d, s: (min((d / "images").iterdir()).unlink(), os.mkdir(min_name(d))), "a directory"),
    "device link": (lambda d, s: (min((d / "images").iterdir()).unlink(), os.symlink("/dev/zero", min_name(d))),
                    "a character device"),
    "fifo ufo file": (lambda d, s: (ufo_path(d).unlink(), os.mkfifo(ufo_path(d))), "a FIFO"),
    "deep json": (lambda d, s: ufo_path(d).write_text('{"images": {"a.jpg": ' + "[" * 50000 + "]" * 50000 + "}}"),
                  "nested"),
    "duplicate word id": (lambda d, s: _duplicate_first_word(d), "word id(s) '0001' appear more than once"),
    "huge frame": (lambda d, s: edit_images(d, lambda im: im[min(im)].update(img_w=10**13)), "img_w/img_h"),
    "linked image (the user's link)": (_link_to_secret, None),
}


def min_name(data: Path) -> Path:
    """The path of the first image by name, as the UFO file names it."""
    return data / "images" / min(json.loads(ufo_path(data).read_text())["images"])


@pytest.mark.parametrize("case", INGEST_CASES)
def test_hostile_dataset_through_build(world, case):
    data, out, secret = world
    mutate, expect = INGEST_CASES[case]
    mutate(data, secret)
    before = snapshot(data)
    r = run_cli("build", "--data", data, "--out", out, *FLAGS)
    check_answer(r.returncode, r.stderr, expect)
    if case.startswith("linked image"):   # followed, by decision: the link is the user's; README says so
        assert (cached_pixels(out) == SENTINEL).all(axis=1).any()
        return
    check_world(data, out, before)
    if expect is not None and case not in ("fifo ufo file", "deep json"):   # --skip-bad leaves the image out
        r = run_cli("build", "--data", data, "--out", out, *FLAGS, "--skip-bad")
        check_answer(r.returncode, r.stderr, None)
        check_world(data, out, before)


@pytest.mark.parametrize("content", ['{"dataset": "mine"}', "not json"])
def test_a_foreign_manifest_in_out_survives_a_build(world, capsys, content):
    data, out, _ = world
    (out / "manifest.json").write_text(content)
    rc = cli_main(["build", "--data", str(data), "--out", str(out), *FLAGS])
    check_answer(rc, capsys.readouterr().err, "no build of this tool wrote")
    assert (out / "manifest.json").read_text() == content and (out / USERS).read_text() == "mine"
