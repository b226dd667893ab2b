"""The sample set a build without --data generates: deterministic, idempotent, every kind of word real UFO sets
have, quads on the ink."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from east_cache.tools import sampledata
from east_cache.config import DEFAULT_IGNORE_TAGS
from east_cache.tools.sampledata import TAGS, ensure_default_sample, write_sample_dataset

SMALL = dict(n_images=3, words_per_page=10, page_size=(400, 300))


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("sample"), **SMALL)


def load(root: Path, split: str = "train") -> dict:
    return json.loads((root / "ufo" / f"{split}.json").read_text())["images"]


def all_words(root: Path) -> list[dict]:
    return [w for page in load(root).values() for w in page["words"].values()]


def signed_area(points) -> float:
    """Shoelace area; positive for clockwise points in image coordinates (y down)."""
    x, y = np.asarray(points, float).T
    return 0.5 * float(x @ np.roll(y, -1) - np.roll(x, -1) @ y)


def file_bytes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def mtimes(root: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_same_arguments_give_identical_files(tmp_path):
    a = file_bytes(write_sample_dataset(tmp_path / "a", **SMALL))
    b = file_bytes(write_sample_dataset(tmp_path / "b", **SMALL))
    assert len(a) == 3 + 2 and a == b  # 3 pages, the JSON and the marker
    c = file_bytes(write_sample_dataset(tmp_path / "c", **SMALL, seed=1))
    assert c["ufo/train.json"] != a["ufo/train.json"]


def test_json_has_every_kind_of_word(small):
    pages, words = load(small), all_words(small)
    for page in pages.values():
        assert set(page) == {"img_w", "img_h", "words", "paragraphs", "tags", "relations"}
        assert len(page["words"]) == SMALL["words_per_page"]
    illegible = [w for w in words if w["illegibility"]]
    assert illegible and all(w["transcription"] == "###" for w in illegible)
    assert len(illegible) < 0.2 * len(words)
    tags = {t for w in words for t in w["tags"]}
    assert tags == set(TAGS) and set(DEFAULT_IGNORE_TAGS) < tags
    assert {len(w["points"]) for w in words} == {4, 5, 6}
    assert all(signed_area(w["points"]) > 0 for w in words), "points run clockwise"
    assert any(0 < signed_area(w["points"]) < 10 for w in words), "a tiny word"
    outside = [w for page in pages.values() for w in page["words"].values()
               if any(not (0 <= x <= page["img_w"] and 0 <= y <= page["img_h"]) for x, y in w["points"])]
    assert len(outside) == 1
    rotated = [w for w in words if len(w["points"]) == 4 and abs(w["points"][0][1] - w["points"][1][1]) > 1]
    assert rotated, "some quads are rotated"


def test_image_formats_and_exif_orientation(small):
    pages = load(small)
    exif6, modes = [], []
    for name, page in pages.items():
        with Image.open(small / "images" / name) as im:
            modes.append((im.format, im.mode))
            if im.getexif().get(0x0112) == 6:
                exif6.append(name)
                assert im.size == (page["img_h"], page["img_w"]), "stored pixels are the page turned on its side"
            assert ImageOps.exif_transpose(im).size == (page["img_w"], page["img_h"])
    assert len(exif6) == 1
    assert ("JPEG", "L") in modes and ("PNG", "RGB") in modes and ("JPEG", "RGB") in modes


def test_words_do_not_overlap(small):
    for name, page in load(small).items():
        boxes = np.array([np.r_[np.min(w["points"], 0), np.max(w["points"], 0)] for w in page["words"].values()])
        for i, (x0, y0, x1, y1) in enumerate(boxes):
            others = np.delete(boxes, i, axis=0)
            overlap = (x0 < others[:, 2]) & (others[:, 0] < x1) & (y0 < others[:, 3]) & (others[:, 1] < y1)
            assert not overlap.any(), f"{name}: word {i} overlaps another"


def test_quads_lie_on_dark_ink(small):
    """Inside a legible word's quad the page is darker than the paper, and the ink near the word lies in
    its quad. Run on the upright page, this also checks that the EXIF-6 page is stored turned the right way."""
    checked = {"axis-aligned": 0, "rotated": 0}
    for name, page in load(small).items():
        with Image.open(small / "images" / name) as im:
            grey = np.asarray(ImageOps.exif_transpose(im).convert("L"), dtype=np.float64)
        paper = np.median(grey)
        for key, w in page["words"].items():
            quad = np.array(w["points"])
            if w["illegibility"] or len(quad) != 4 or signed_area(quad) < 50:
                continue
            inside = np.zeros(grey.shape, np.uint8)
            cv2.fillPoly(inside, [np.round(quad).astype(np.int32)], 1)
            assert grey[inside > 0].mean() < paper - 15, f"{name} word {key} is not on ink"
            x0, y0 = np.maximum(np.floor(quad.min(0)).astype(int) - 2, 0)  # words keep 3 px apart: this ink is theirs
            x1, y1 = np.ceil(quad.max(0)).astype(int) + 3
            ink = grey[y0:y1, x0:x1] < paper - 60
            near = cv2.dilate(inside, np.ones((3, 3), np.uint8))[y0:y1, x0:x1] > 0
            assert ink[near].sum() >= 0.95 * ink.sum(), f"{name} word {key}: ink outside its quad"
            aligned = quad[0, 1] == quad[1, 1] and quad[0, 0] == quad[3, 0]
            checked["axis-aligned" if aligned else "rotated"] += 1
    assert min(checked.values()) > 0, checked


@pytest.mark.parametrize("angle", [30.0, -45.0, 90.0, -90.0])
def test_rotated_word_read_through_its_quad_is_the_upright_word(angle):
    """Warping a rotated word from its quad (clockwise from the reading top-left) back to a rectangle gives
    the upright rendering: the quad follows the rotation and starts where reading starts."""
    upright = sampledata._make_word(np.random.default_rng(5), 40, 0.0)
    rotated = sampledata._make_word(np.random.default_rng(5), 40, angle)
    (x0, y0), (x1, y1) = upright.quad[0].astype(int), upright.quad[2].astype(int)
    target = np.asarray(upright.mask, np.float32)[y0:y1, x0:x1]
    corners = np.float32([[0, 0], [x1 - x0, 0], [x1 - x0, y1 - y0], [0, y1 - y0]])
    # cv2 puts pixel centres at integers, the quads at half-integers
    warp = cv2.getPerspectiveTransform(np.float32(rotated.quad - 0.5), corners - 0.5)
    back = cv2.warpPerspective(np.asarray(rotated.mask, np.float32), warp, (x1 - x0, y1 - y0))
    assert np.corrcoef(back.ravel(), target.ravel())[0, 1] > 0.95


def test_second_call_does_not_rewrite(tmp_path):
    root = write_sample_dataset(tmp_path, **SMALL)
    before = mtimes(root)
    write_sample_dataset(root, **SMALL)
    assert mtimes(root) == before
    write_sample_dataset(root, **{**SMALL, "seed": 3})  # other arguments: written again
    assert mtimes(root)[root / "ufo" / "train.json"] != before[root / "ufo" / "train.json"]


@pytest.mark.slow
def test_default_sample_has_two_splits_sharing_images(tmp_path, monkeypatch):
    monkeypatch.setattr(sampledata, "DEFAULT_SPLITS", (("train", 2), ("val", 1)))  # fewer pages: a fast test
    monkeypatch.chdir(tmp_path)
    root = ensure_default_sample()
    assert root == Path("sample_data") and (tmp_path / "sample_data" / "ufo" / "val.json").exists()
    train, val = load(root, "train"), load(root, "val")
    assert len(train) == 2 and len(val) == 1 and not set(train) & set(val)
    assert sorted(p.name for p in (root / "images").iterdir()) == sorted([*train, *val])
    before = mtimes(root)
    ensure_default_sample()
    assert mtimes(root) == before, "both splits are recorded as done"


@pytest.mark.parametrize("bad", [dict(page_size=(40, 300)), dict(n_images=0), dict(words_per_page=0)])
def test_bad_arguments_raise(tmp_path, bad):
    with pytest.raises(ValueError, match="sample pages"):
        write_sample_dataset(tmp_path, **{**SMALL, **bad})


@pytest.mark.slow
def test_a_build_without_data_says_it_generated_the_sample_set_then_that_it_uses_it(tmp_path, monkeypatch, capsys):
    """It is generated into ./sample_data by the first build without --data, not shipped: the first build says so, a
    later one that it uses what an earlier build generated."""
    from east_cache import cli
    monkeypatch.setattr(sampledata, "DEFAULT_SPLITS", (("train", 2), ("val", 1)))  # fewer pages: a fast test
    monkeypatch.chdir(tmp_path)
    assert cli.main(["build", "--image-size", "512", "--input-size", "256"]) == 0
    first = capsys.readouterr()
    assert "the synthetic sample set in sample_data/, generated now" in first.out + first.err
    assert cli.main(["build", "--image-size", "512", "--input-size", "256", "--out", "cache2"]) == 0
    again = capsys.readouterr()
    assert "generated by an earlier build without --data" in again.out + again.err
    assert "built-in" not in first.out + first.err + again.out + again.err
