"""Hostile inputs and damaged caches, run through `build`, `verify`, the Dataset and train.py as a user would.

Every case asserts the same things: no traceback, no hang (what could hang runs in a subprocess under a timeout:
the data sets that could hang or exhaust the machine, the FIFO caches, train.py once; the rest runs in-process, for
speed), an exit status of
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

from east_cache.cli import main as cli_main
from east_cache.tools.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
SENTINEL = (13, 177, 211)          # RGB of the image outside the dataset; no sample page uses it
TIMEOUT_S = 60                     # per subprocess: a hang fails the test instead of stalling the suite
FLAGS = ["--input-size", "64", "--image-size", "128", "--variants", "1", "--strategy", "whole", "--jobs", "1",
         "--quiet"]
CROPS = ["--crop", "build"]         # crop records, (3, S, S) images: cached_pixels reads them
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


def run_cli(*args, timeout=TIMEOUT_S) -> tuple[int, str]:
    """The CLI in a subprocess under a timeout: (exit status, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "preprocess", *map(str, args)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=timeout, check=False)
    return r.returncode, r.stderr


def check_answer(rc: int, err: str, expect: str | tuple[str, ...] | None) -> None:
    """0, or one `error:` line naming `expect` (one of them, given several); never a traceback."""
    assert "Traceback" not in err, err
    if expect is None:
        assert rc == 0, err
        return
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    expect = (expect,) if isinstance(expect, str) else expect
    assert rc == 2 and len(lines) == 1 and any(e in lines[0] for e in expect), err


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


# cases that could hang, recurse past the stack or ask for all the memory: a build of its own under a timeout (slow)
IN_A_PROCESS = ("fifo image", "device link", "fifo ufo file", "deep json", "huge frame")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in IN_A_PROCESS else c
                                  for c in INGEST_CASES])
def test_hostile_dataset_through_build(world, case, capsys):
    data, out, secret = world
    mutate, expect = INGEST_CASES[case]
    cli = run_cli if case in IN_A_PROCESS else in_process(capsys)
    mutate(data, secret)
    before = snapshot(data)
    check_answer(*cli("build", "--data", data, "--out", out, *FLAGS, *CROPS), expect)
    if case.startswith("linked image"):   # followed, by decision: the link is the user's; docs/guide.md says so
        assert (cached_pixels(out) == SENTINEL).all(axis=1).any()
        return
    check_world(data, out, before)
    if expect is not None and case not in ("fifo ufo file", "deep json"):   # --skip-bad leaves the image out
        check_answer(*cli("build", "--data", data, "--out", out, *FLAGS, *CROPS, "--skip-bad"), None)
        check_world(data, out, before)


@pytest.mark.parametrize("content", ['{"dataset": "mine"}', "not json"])
def test_a_foreign_manifest_in_out_survives_a_build(world, capsys, content):
    data, out, _ = world
    (out / "manifest.json").write_text(content)
    rc = cli_main(["build", "--data", str(data), "--out", str(out), *FLAGS])
    check_answer(rc, capsys.readouterr().err, "no build of this tool wrote")
    assert (out / "manifest.json").read_text() == content and (out / USERS).read_text() == "mine"


# ---- damaged caches: read by the Dataset, checked by verify, repaired by build, refused by train.py ----

@pytest.fixture(scope="module", params=["read", "build"])
def built(pristine, tmp_path_factory, request) -> tuple[Path, list[str]]:
    """(cache, its crop flags): a cache of the pristine set (npy, whole strategy) of page records (--crop read) or
    crop records (--crop build), built once and copied per case."""
    crop = ["--crop", request.param]
    out = tmp_path_factory.mktemp(f"built-{request.param}") / "cache"
    assert cli_main(["build", "--data", str(pristine), "--out", str(out), *FLAGS, *crop]) == 0
    return out, crop


def manifest_of(cache: Path) -> dict:
    return json.loads((cache / "manifest.json").read_text())


def edit_manifest(cache: Path, change) -> None:
    m = manifest_of(cache)
    change(m)
    (cache / "manifest.json").write_text(json.dumps(m))


def first_file(cache: Path) -> Path:
    return cache / "data" / manifest_of(cache)["files"][0]["name"]


def sidecar(cache: Path) -> Path:
    f = first_file(cache)
    return f.with_name(f.stem + ".quads.npz")


def patch_header(path: Path, old: bytes, new: bytes) -> None:
    """Replace bytes in an npy header, keeping its length (so only the header lies)."""
    data = bytearray(path.read_bytes())
    head = bytes(data[:256])
    assert old in head and len(old) == len(new), (old, head)
    at = head.index(old)
    data[at:at + len(old)] = new
    path.write_bytes(bytes(data))


def flip_header_type(path: Path) -> None:
    """The first field's byte order flipped (records of fields), or a page file's bytes made 16-bit values."""
    head = path.read_bytes()[:256]
    patch_header(path, *((b"'<", b"'>") if b"'<" in head else (b"'|u1'", b"'<u2'")))


def grow_header_shape(path: Path) -> None:
    """The header's record count (or a packed page file's byte count) made larger, its length kept."""
    head = path.read_bytes()[:256]
    at = head.index(b"'shape': (") + len(b"'shape': (")
    old = head[at - 10:at + 1]
    patch_header(path, old, old[:-1] + (b"9" if old[-1:] != b"9" else b"8"))


def truncate(path: Path, fraction: float) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(path.stat().st_size * fraction))


def link_to_copy_outside(cache: Path) -> None:
    """The first data file moved out of the cache (same bytes, so the same size and header) and linked to: only
    the check that a file resolves inside CACHE/data can tell."""
    real = first_file(cache)
    outside = cache.parent / ("outside-" + real.name)
    shutil.move(real, outside)
    real.symlink_to(outside)


def _set_file_name(m: dict, name: str) -> None:
    m["files"][0]["name"] = name


# case -> (damage(cache, secret), what the error must name; "FILE" stands for the first data file's name,
# "SIDECAR" for its sidecar's)
DAMAGE = {
    "data file missing": (lambda c, s: first_file(c).unlink(), "FILE"),
    "data file truncated": (lambda c, s: truncate(first_file(c), 0.6), "FILE"),
    "data file empty": (lambda c, s: truncate(first_file(c), 0), "FILE"),
    "header byte order flipped": (lambda c, s: flip_header_type(first_file(c)), "FILE"),
    "header garbage": (lambda c, s: patch_header(first_file(c), b"'descr'", b"garbage"), "FILE"),
    "header shape": (lambda c, s: grow_header_shape(first_file(c)), "FILE"),
    "data file is a link outside": (lambda c, s: (first_file(c).unlink(), first_file(c).symlink_to(s)), "FILE"),
    "data file is a link to a valid copy outside": (lambda c, s: link_to_copy_outside(c), "FILE"),
    "data file is a FIFO": (lambda c, s: (first_file(c).unlink(), os.mkfifo(first_file(c))), "FILE"),
    "sidecar missing": (lambda c, s: sidecar(c).unlink(), "SIDECAR"),
    "sidecar is a FIFO": (lambda c, s: (sidecar(c).unlink(), os.mkfifo(sidecar(c))), "SIDECAR"),
    "sidecar truncated": (lambda c, s: truncate(sidecar(c), 0.5), "SIDECAR"),
    "sidecar garbage": (lambda c, s: sidecar(c).write_bytes(b"PK\x03\x04 not a zip"), "SIDECAR"),
    "sidecar wrong arrays": (lambda c, s: np.savez(sidecar(c), points=np.zeros((1, 2), np.float32)), "SIDECAR"),
    "manifest not JSON": (lambda c, s: (c / "manifest.json").write_text("{ nope"), "manifest.json"),
    "manifest empty": (lambda c, s: (c / "manifest.json").write_text(""), "manifest.json"),
    "manifest is a FIFO": (lambda c, s: ((c / "manifest.json").unlink(), os.mkfifo(c / "manifest.json")),
                           "manifest.json"),
    "manifest files removed": (lambda c, s: edit_manifest(c, lambda m: m.pop("files")), "manifest.json"),
    "manifest files an object": (lambda c, s: edit_manifest(c, lambda m: m.update(files={"a": 1})), "manifest.json"),
    "manifest images a list": (lambda c, s: edit_manifest(c, lambda m: m.update(images=[])), "manifest.json"),
    "manifest rows a string": (lambda c, s: edit_manifest(c, lambda m: m["files"][0].update(rows="3")),
                               "manifest.json"),
    "manifest strategy edited": (lambda c, s: edit_manifest(c, lambda m: m["config"].update(strategy="image")),
                                 "manifest.json"),
    "manifest variants edited": (lambda c, s: edit_manifest(c, lambda m: m["config"].update(variants=2)),
                                 "manifest.json"),
    # (not the input size: a --geometry read cache's is the readers' default, which a build changes in place)
    "manifest seed edited": (lambda c, s: edit_manifest(c, lambda m: m["config"].update(seed=7)),
                             ("FILE", "build fingerprint")),
    "manifest map scale edited": (lambda c, s: edit_manifest(c, lambda m: m["config"].update(map_scale=0.25)),
                                  ("FILE", "build fingerprint")),   # a packed page file's index holds any maps
    "manifest image removed": (lambda c, s: edit_manifest(c, lambda m: m["images"].pop(min(m["images"]))),
                               "manifest.json"),
    "manifest names ../ file": (lambda c, s: edit_manifest(c, lambda m: _set_file_name(m, "../../secret.npy")),
                                "manifest.json"),
    "manifest names absolute file": (lambda c, s: edit_manifest(c, lambda m: _set_file_name(m, str(s))),
                                     "manifest.json"),
    "manifest image path outside": (lambda c, s: edit_manifest(
        c, lambda m: m["images"][min(m["images"])].update(path=str(s))), "manifest.json"),
    "other sample code": (lambda c, s: edit_manifest(c, lambda m: m.update(build_fingerprint="0" * 32)),
                          "build fingerprint"),
}


def expected(cache: Path, what) -> tuple[str, ...]:
    """What the error may name (any one of them): FILE, SIDECAR or a phrase, or a tuple of those."""
    name = manifest_of_names(cache)
    names = {"FILE": name, "SIDECAR": name.rsplit(".", 1)[0] + ".quads.npz"}
    return tuple(names.get(w, w) for w in (what if isinstance(what, tuple) else (what,)))


def manifest_of_names(cache: Path) -> str:
    """The first data file's name, from the pristine copy's manifest (the damaged one may not say)."""
    return json.loads((cache.parent / "names.json").read_text())[0]


@pytest.fixture
def damaged(built, tmp_path, request):
    """(cache, secret, what the error may name, crop flags): a private copy of a built cache, damaged by the case."""
    built, crop = built
    cache = tmp_path / "cache"
    shutil.copytree(built, cache, symlinks=True)
    (tmp_path / "names.json").write_text(json.dumps([f["name"] for f in manifest_of(cache)["files"]]))
    secret = tmp_path / "secret.npy"
    np.save(secret, np.full(4, 7, np.uint8))
    damage, what = DAMAGE[request.param]
    damage(cache, secret)
    return cache, secret, expected(cache, what), crop


def open_and_read_all(cache: Path) -> None:
    from east_cache.reader import CacheDataset
    ds = CacheDataset(cache)
    for i in range(len(ds)):
        ds[i]
        ds.quads(i)


@pytest.mark.parametrize("damaged", DAMAGE, indirect=True)
def test_a_damaged_cache_is_refused_when_opened_naming_file_and_repair(damaged):
    from east_cache.errors import CacheError
    cache, _, names, _ = damaged
    with pytest.raises(CacheError) as e:
        open_and_read_all(cache)
    msg = str(e.value)
    assert str(cache) in msg and any(n in msg for n in names) and ("verify" in msg or "build" in msg) and "\n" not in msg, msg


# A FIFO case runs the CLI in a subprocess under a timeout (about 2 s each): slow; the others run in this process.
REPAIRS = [pytest.param(case, marks=pytest.mark.slow) if "FIFO" in case else case for case in DAMAGE]


@pytest.mark.parametrize("damaged", REPAIRS, indirect=True)
def test_verify_then_build_repairs_a_damaged_cache(damaged, pristine, capsys, request):
    cache, secret, _, crop = damaged
    cli = run_cli if "FIFO" in request.node.name else in_process(capsys)   # a FIFO case runs under a timeout
    rc, err = cli("verify", cache)
    assert rc in (0, 1, 2) and "Traceback" not in err, err
    if rc == 2:
        assert len([x for x in err.splitlines() if x.startswith("error:")]) == 1, err
    rc, err = cli("build", "--data", pristine, "--out", cache, *FLAGS, *crop)
    assert rc == 0 and "Traceback" not in err, err
    open_and_read_all(cache)
    assert secret.exists(), "nothing outside the cache is deleted"
    assert cli("verify", cache)[0] == 0


def in_process(capsys):
    """The CLI in this process (no interpreter start per call): (exit status, stderr) like run_cli's."""
    def cli(*args) -> tuple[int, str]:
        rc = cli_main([str(a) for a in args])
        return rc, capsys.readouterr().err
    return cli


TRAIN_FLAGS = ["--max-steps", "1", "--workers", "0", "--device", "cpu", "--batch-size", "1"]


@pytest.mark.parametrize("damaged", ["header byte order flipped", "sidecar garbage", "manifest files removed",
                                     "manifest names ../ file", "data file truncated", "other sample code"],
                         indirect=True)
def test_train_refuses_a_damaged_cache_with_one_line(damaged, tmp_path, capsys):
    from east_cache.train.train import main as train_main
    cache, _, names, _ = damaged
    status = train_main(["--cache", str(cache), "--out", str(tmp_path / "run"), *TRAIN_FLAGS])
    check_answer(status, capsys.readouterr().err, names)


@pytest.mark.slow
@pytest.mark.parametrize("damaged", ["data file truncated"], indirect=True)
def test_train_py_refuses_a_damaged_cache_with_one_line(damaged, tmp_path):
    """As the user meets it: train.py's own process (its exit status and all it prints)."""
    cache, _, names, _ = damaged
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "train.py", "--cache", str(cache), "--out", str(tmp_path / "run"),
                        *TRAIN_FLAGS], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S * 3,
                       check=False)
    check_answer(r.returncode, r.stderr, names)
