"""Hostile annotations and images at ingest and decode: names that leave the image folder, files that are not
files, JSON that is too deep or names a key twice, images that decode black or to gigabytes, absurd coordinates.
Each is refused (or dropped and counted) with a message naming the UFO file and the entry, and nothing hangs."""
from __future__ import annotations

import json
import os
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest import imageio
from east_cache.ingest.files import NotAllowed, name_problem, open_regular
from east_cache.ingest.imageio import decode_image
from east_cache.ingest.ufo import CARE, load_splits

QUAD = [[10, 10], [50, 10], [50, 30], [10, 30]]


def write_ufo(root: Path, images: dict | str, files=("a.jpg",)) -> Path:
    """A dataset root whose ufo/train.json is `images` (a dict of entries, or raw text) and whose images/
    holds an empty file per name in `files`."""
    (root / "ufo").mkdir(parents=True, exist_ok=True)
    text = images if isinstance(images, str) else json.dumps({"images": images})
    (root / "ufo" / "train.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    (root / "images").mkdir(exist_ok=True)
    for name in files:
        (root / "images" / name).touch()
    return root


def entry(words=None) -> dict:
    return {"img_w": 100, "img_h": 80, "words": words if words is not None else {"1": {"points": QUAD}}}


def ingest(root: Path, **kw):
    return load_splits([root], "train", BuildConfig(), **kw)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A JPEG outside the dataset root, which no build may read."""
    secret = tmp_path / "outside" / "secret.jpg"
    secret.parent.mkdir()
    Image.new("RGB", (100, 80), (200, 10, 10)).save(secret)
    return secret


@pytest.mark.parametrize("name", ["../outside/secret.jpg", "../../outside/secret.jpg", "ABS", "/proc/self/environ",
                                  "/etc/passwd", "sub/../../outside/secret.jpg", "a.jpg/../../outside/secret.jpg"])
def test_a_name_that_leaves_the_image_folder_is_refused_before_any_stat(tmp_path, outside, monkeypatch, name):
    name = str(outside) if name == "ABS" else name
    root = write_ufo(tmp_path / "d", {name: entry()})
    seen = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: seen.append(str(p)) or real_stat(p, *a, **k))
    with pytest.raises(DataError) as e:
        ingest(root)
    msg = str(e.value)
    assert str(root / "ufo" / "train.json") in msg and repr(name) in msg and "refused" in msg and "\n" not in msg
    assert not any("secret" in p or "proc" in p or "passwd" in p for p in seen), "nothing outside was even stat'ed"


@pytest.mark.parametrize("name, why", [("a\0.jpg", "U\\+0000"), ("a\n.jpg", "U\\+000A"), ("\x1b[2Ja.jpg", "U\\+001B"),
                                       ("\ud800.jpg", "lone surrogate"), ("", "empty")])
def test_names_no_file_can_have_are_refused_naming_the_entry(tmp_path, name, why):
    root = write_ufo(tmp_path / "d", {name: entry(), "a.jpg": entry()})
    with pytest.raises(DataError, match=why) as e:
        ingest(root)
    assert repr(name) in str(e.value) and "train.json" in str(e.value)
    records, s = ingest(root, skip_bad=True)
    assert [r.name for r in records] == ["a.jpg"] and [b[0] for b in s.bad] == [name]


@pytest.mark.parametrize("kind", ["fifo", "directory", "device link", "dangling link"])
def test_anything_but_a_regular_file_is_refused_without_hanging(tmp_path, kind):
    root = write_ufo(tmp_path / "d", {"x.jpg": entry()}, files=())
    path = root / "images" / "x.jpg"
    {"fifo": lambda: os.mkfifo(path), "directory": path.mkdir,
     "device link": lambda: path.symlink_to("/dev/zero"),
     "dangling link": lambda: path.symlink_to(tmp_path / "gone.jpg")}[kind]()
    with pytest.raises(DataError, match="not found" if kind == "dangling link" else "refused") as e:
        ingest(root)
    assert "'x.jpg'" in str(e.value)
    if kind != "dangling link":   # and the decoder, should one be swapped in after ingest, refuses it too
        with pytest.raises(DataError, match="refused"):
            decode_image(path, 100, 80)


def test_a_fifo_in_place_of_the_ufo_file_is_refused(tmp_path):
    root = tmp_path / "d"
    (root / "ufo").mkdir(parents=True)
    (root / "images").mkdir()
    os.mkfifo(root / "ufo" / "train.json")
    with pytest.raises(DataError, match="a FIFO"):
        ingest(root)
    with pytest.raises(NotAllowed):
        open_regular(root / "ufo" / "train.json")


def test_symlinks_made_by_the_user_are_followed(tmp_path, outside):
    """A linked image folder, and an image linked from another disk, are how people assemble data sets."""
    real = tmp_path / "elsewhere" / "pages"
    real.mkdir(parents=True)
    Image.new("RGB", (100, 80)).save(real / "a.jpg")
    root = write_ufo(tmp_path / "d", {"a.jpg": entry(), "b.jpg": entry()}, files=())
    (root / "images").rmdir()
    (root / "images").symlink_to(real)
    (real / "b.jpg").symlink_to(outside)
    records, _ = ingest(root)
    assert [r.name for r in records] == ["a.jpg", "b.jpg"]
    assert decode_image(records[1].path, 100, 80).image[0, 0].tolist()[0] > 150, "the linked file is what is read"


def test_lexical_check_list():
    assert name_problem("sub/dir/a.jpg") is None and name_problem("./a.jpg") is None
    assert name_problem("..a.jpg") is None, "a name that merely starts with dots is a name"
    assert all(name_problem(n) for n in ("..", "../a", "a/..", "/a", "//a", "a\0"))


def test_json_nested_too_deep_is_an_error_with_a_position(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    root = write_ufo(tmp_path / "d", '{"images": {"a.jpg": {"img_w": 1, "junk": ' + deep + "}}}")
    with pytest.raises(DataError, match=r"train\.json: invalid JSON at line 1, column \d+: .*nested"):
        ingest(root)


@pytest.mark.parametrize("depth", [200, 900, 990])
def test_json_nested_just_under_the_limit_is_an_answer_not_a_recursion_error(tmp_path, depth):
    deep = "[" * depth + "]" * depth
    root = write_ufo(tmp_path / "d", '{"images": {"a.jpg": {"img_w": 100, "img_h": 80, "junk": ' + deep + "}}}")
    try:
        records, _ = ingest(root)
        assert records[0].name == "a.jpg"
    except DataError as e:
        assert "nest" in str(e) and "a.jpg" in str(e) or "line 1" in str(e)


def test_a_word_id_given_twice_is_refused_not_merged(tmp_path):
    text = ('{"images": {"a.jpg": {"img_w": 100, "img_h": 80, "words": {"1": {"points": Q}, "2": {"points": Q}, '
            '"1": {"points": Q}}}, "b.jpg": {"img_w": 100, "img_h": 80, "words": {}}}}').replace("Q", json.dumps(QUAD))
    root = write_ufo(tmp_path / "d", text, files=("a.jpg", "b.jpg"))
    with pytest.raises(DataError, match=r"image 'a\.jpg': word id\(s\) '1' appear more than once"):
        ingest(root)
    records, s = ingest(root, skip_bad=True)
    assert [r.name for r in records] == ["b.jpg"] and s.bad[0][0] == "a.jpg"


def test_a_key_given_twice_inside_a_word_or_entry_is_refused(tmp_path):
    q = json.dumps(QUAD)
    for text, what in [('{"images": {"a.jpg": {"img_w": 100, "img_w": 90, "img_h": 80}}}', "the entry names key(s) 'img_w'"),
                       ('{"images": {"a.jpg": {"img_w": 100, "img_h": 80, "words": {"7": {"points": Q, "points": []}}}}}'
                        .replace("Q", q), "word '7' names key(s) 'points'")]:
        with pytest.raises(DataError, match=re.escape(what)):
            ingest(write_ufo(tmp_path / "d", text))


@pytest.mark.parametrize("far", [1e30, -1e30, 1e39, 5e3, -200.0])
def test_a_point_far_outside_the_frame_drops_the_word_and_counts_it(tmp_path, far):
    bad = [[10, 10], [far, 10], [50, 30], [10, 30]]
    records, s = ingest(write_ufo(tmp_path / "d", {"a.jpg": entry({"1": {"points": bad}, "2": {"points": QUAD}})}))
    assert records[0].reason.tolist() == [CARE] and s.dropped_far == 1 and s.legible == 1
    assert any("word '1'" in w and "outside" in w for w in s.warnings)


def test_a_word_partly_outside_the_frame_is_kept(tmp_path):
    edge = [[-30, 10], [120, 10], [120, 30], [-30, 30]]     # cut by both sides of a 100 px frame
    records, s = ingest(write_ufo(tmp_path / "d", {"a.jpg": entry({"1": {"points": edge}})}))
    assert records[0].reason.tolist() == [CARE] and s.dropped_far == 0


def test_an_absurd_frame_size_is_refused(tmp_path):
    with pytest.raises(DataError, match="img_w/img_h"):
        ingest(write_ufo(tmp_path / "d", {"a.jpg": {"img_w": 10**12, "img_h": 80}}))


def test_tags_of_the_wrong_type_are_no_tags(tmp_path):
    words = {"1": {"points": QUAD, "tags": 5}, "2": {"points": QUAD, "tags": {"masked": 1}}}
    records, _ = ingest(write_ufo(tmp_path / "d", {"a.jpg": entry(words)}))
    assert records[0].reason.tolist() == [CARE, CARE]


@pytest.mark.parametrize("values, expect", [
    (np.full((6, 8), 0.5, np.float32), 128),          # a float page in [0, 1]
    (np.full((6, 8), 200.0, np.float32), 200),        # float in [0, 255]
    (np.full((6, 8), 200, np.int32), 200),            # 32-bit integer with 8-bit values
    (np.full((6, 8), 40000, np.int32), 156),          # 32-bit integer with 16-bit values
])
def test_float_and_32_bit_images_decode_to_their_brightness_not_black(tmp_path, values, expect):
    Image.fromarray(values).save(tmp_path / "f.tif")
    d = decode_image(tmp_path / "f.tif", 8, 6)
    assert d.image.dtype == np.uint8 and d.image.shape == (6, 8, 3) and abs(int(d.image[0, 0, 0]) - expect) <= 1


@pytest.mark.parametrize("bad", [-1.0, 1e6, np.nan, np.inf])
def test_float_images_without_a_known_range_are_refused_naming_the_range(tmp_path, bad):
    a = np.full((6, 8), 0.5, np.float32)
    a[0, 0] = bad
    Image.fromarray(a).save(tmp_path / "f.tif")
    with pytest.raises(DataError, match=r"f\.tif: a float or 32-bit grayscale image with values from .*Convert it"):
        decode_image(tmp_path / "f.tif", 8, 6)


def png_header_only(path: Path, w: int, h: int) -> Path:
    """A valid PNG signature and IHDR declaring w x h, with one tiny IDAT: a decoder would have to allocate it all."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)   # 8-bit grayscale
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path):
    path = png_header_only(tmp_path / "bomb.png", 60_000, 60_000)    # 3.6 Gpx in 100 bytes
    assert path.stat().st_size < 200
    with pytest.raises(DataError, match=r"bomb\.png: the image header declares 60000x60000 = 3600 Mpx, more than"):
        decode_image(path, 60_000, 60_000)


def test_the_pixel_limit_applies_to_the_reduced_jpeg_decode(tmp_path, monkeypatch):
    Image.new("RGB", (800, 800), (90, 90, 90)).save(tmp_path / "big.jpg")
    monkeypatch.setattr(imageio, "MAX_DECODED_PIXELS", 200 * 200)
    assert decode_image(tmp_path / "big.jpg", 800, 800, scale=0.2).image.shape == (200, 200, 3)
    with pytest.raises(DataError, match="Mpx one decode may produce"):
        decode_image(tmp_path / "big.jpg", 800, 800, scale=1.0)


@pytest.mark.parametrize("split", ["../../outside/x", "/etc/passwd", "..", "", "a\0b"])
def test_a_split_that_is_not_a_plain_name_is_refused(tmp_path, split):
    root = write_ufo(tmp_path / "d", {"a.jpg": entry()})
    with pytest.raises(DataError, match="a split is a plain name"):
        load_splits([root], split, BuildConfig())
