"""UFO ingest: one test per rule, each on a tiny hand-made UFO file. Image files are empty: ingest must not read pixels."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from east_cache.config import DEFAULT_IGNORE_TAGS, BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.ufo import (
    CARE,
    IGNORE_TAG,
    ILLEGIBLE,
    NOT_QUAD,
    SMALL,
    IngestSummary,
    find_split,
    load_splits,
)

QUAD = [[10, 10], [50, 10], [50, 30], [10, 30]]          # clockwise on screen, area 800
PENTAGON = [[10, 10], [30, 5], [50, 10], [50, 30], [10, 30]]


def word(points=QUAD, **extra) -> dict:
    return {"points": points, "transcription": "x", "illegibility": False, "tags": [], **extra}


def write_set(root: Path, words=None, images=None, split="train", layout="images") -> Path:
    """A dataset root with ufo/{split}.json and one empty file per image."""
    images = images if images is not None else {"a.jpg": {"img_w": 100, "img_h": 80, "words": words or {}}}
    (root / "ufo").mkdir(parents=True, exist_ok=True)
    (root / "ufo" / f"{split}.json").write_text(json.dumps({"images": images}))
    folder = root / "images" if layout == "images" else root / "img" / split
    folder.mkdir(parents=True, exist_ok=True)
    for name in images:
        (folder / name).touch()
    return root


def ingest(root: Path, cfg: BuildConfig | None = None, **kw):
    return load_splits([root], "train", cfg or BuildConfig(), **kw)


def reasons(words: dict, cfg: BuildConfig | None = None, tmp: Path = None):
    records, summary = ingest(write_set(tmp, words), cfg)
    return records[0].reason.tolist(), summary


def test_legible_quad_becomes_a_care_record(tmp_path):
    records, s = ingest(write_set(tmp_path, {"1": word()}))
    r = records[0]
    assert (r.name, r.width, r.height, r.n_words) == ("a.jpg", 100, 80, 1)
    assert r.path == str(tmp_path / "images" / "a.jpg") and r.source == str(tmp_path / "ufo" / "train.json")
    assert r.points.dtype == np.float32 and r.points.tolist() == QUAD
    assert r.offsets.dtype == np.int64 and r.offsets.tolist() == [0, 4]
    assert r.reason.dtype == np.uint8 and r.reason.tolist() == [CARE]
    assert (s.images, s.words, s.legible) == (1, 1, 1)


def test_illegible_word_is_kept_as_dont_care(tmp_path):
    got, s = reasons({"1": word(illegibility=True), "2": word()}, tmp=tmp_path)
    assert got == [ILLEGIBLE, CARE] and (s.illegible, s.legible) == (1, 1)


@pytest.mark.parametrize("tag", DEFAULT_IGNORE_TAGS)
def test_each_default_ignore_tag_is_dont_care_not_dropped(tmp_path, tag):
    got, s = reasons({"1": word(tags=["occlusion", tag])}, tmp=tmp_path)
    assert got == [IGNORE_TAG] and s.ignore_tag == 1 and s.words == 1


def test_custom_ignore_tags_replace_the_defaults(tmp_path):
    words = {"1": word(tags=["stamp"]), "2": word(tags=["inferred"])}
    got, _ = reasons(words, BuildConfig(ignore_tags=("inferred",)), tmp=tmp_path)
    assert got == [CARE, IGNORE_TAG]


def test_missing_optional_keys_are_tolerated(tmp_path):
    words = {"1": {"points": QUAD}, "2": {"points": QUAD, "tags": None, "transcription": None},
             "3": {"points": QUAD, "tags": "masked", "transcription": 7}}
    got, _ = reasons(words, tmp=tmp_path)
    assert got == [CARE, CARE, IGNORE_TAG]


def test_five_point_polygon_is_not_quad_by_default(tmp_path):
    records, s = ingest(write_set(tmp_path, {"1": word(PENTAGON)}))
    assert records[0].reason.tolist() == [NOT_QUAD] and s.not_quad == 1 and s.fitted == 0
    assert records[0].points.tolist() == PENTAGON, "a don't-care polygon keeps its points"


def test_five_point_polygon_is_fitted_to_its_minimum_rectangle(tmp_path):
    start_bottom_right = PENTAGON[3:] + PENTAGON[:3]
    records, s = ingest(write_set(tmp_path, {"1": word(start_bottom_right)}), BuildConfig(fit_polygons=True))
    r = records[0]
    assert r.reason.tolist() == [CARE] and s.fitted == 1 and s.legible == 1 and r.offsets.tolist() == [0, 4]
    box = r.points.round(3).tolist()
    assert box == [[50, 30], [10, 30], [10, 5], [50, 5]], "clockwise from the corner nearest the first point"


def test_fitting_only_touches_otherwise_legible_words(tmp_path):
    words = {"1": word(PENTAGON, illegibility=True), "2": word(PENTAGON[:3])}
    records, s = ingest(write_set(tmp_path, words), BuildConfig(fit_polygons=True))
    assert records[0].reason.tolist() == [ILLEGIBLE, NOT_QUAD] and s.fitted == 0
    assert records[0].offsets.tolist() == [0, 5, 8]


def test_small_and_degenerate_words_with_custom_thresholds(tmp_path):
    def square(side):
        return [[0, 0], [side, 0], [side, side], [0, side]]
    cfg = BuildConfig(min_area=30.0, drop_area=5.0)
    words = {"1": word(square(2)), "2": word(square(3)), "3": word(square(5)), "4": word(square(6))}
    got, s = reasons(words, cfg, tmp=tmp_path)   # areas 4, 9, 25, 36
    assert got == [SMALL, SMALL, CARE]
    assert (s.dropped_degenerate, s.small, s.legible, s.words) == (1, 2, 1, 3)


def test_fewer_than_three_points_are_dropped(tmp_path):
    words = {"1": word([[0, 0], [9, 9]]), "2": word([]), "3": word()}
    got, s = reasons(words, tmp=tmp_path)
    assert got == [CARE] and s.dropped_degenerate == 2


@pytest.mark.parametrize("points", [
    [[10, 10], [50, float("nan")], [50, 30], [10, 30]],
    [[10, 10], [50, float("inf")], [50, 30], [10, 30]],
    [[10, 10], ["50", 10], [50, 30], [10, 30]],
    [[10, 10], [50, None], [50, 30], [10, 30]],
    [[10, 10], [True, 10], [50, 30], [10, 30]],
    [[10, 10], [50], [50, 30, 1], [10, 30]],
    [[10, 10], 50, [50, 30], [10, 30]],
    [[10, 10], [10 ** 400, 10], [50, 30], [10, 30]],
    "10,10,50,10",
    None,
], ids=["nan", "inf", "string", "null", "bool", "ragged", "flat", "huge", "not-a-list", "none"])
def test_invalid_coordinates_drop_the_word_without_crashing(tmp_path, points):
    records, s = ingest(write_set(tmp_path, {"1": word(points), "2": word()}))
    assert records[0].reason.tolist() == [CARE] and s.dropped_invalid == 1 and s.words == 1
    assert any("word '1'" in w and "a.jpg" in w for w in s.warnings)


def test_word_without_points_or_not_an_object_is_invalid(tmp_path):
    got, s = reasons({"1": {"transcription": "x"}, "2": "oops", "3": word()}, tmp=tmp_path)
    assert got == [CARE] and s.dropped_invalid == 2


def test_page_without_words_is_valid(tmp_path):
    records, s = ingest(write_set(tmp_path, {}))
    r = records[0]
    assert r.n_words == 0 and r.points.shape == (0, 2) and r.offsets.tolist() == [0] and s.images == 1


def test_precedence_illegible_then_tag_then_not_quad_then_small(tmp_path):
    tiny_pentagon = [[0, 0], [1, 0], [2, 0], [2, 2], [0, 2]]   # area 4: small, not degenerate
    tiny_quad = [[0, 0], [2, 0], [2, 2], [0, 2]]
    words = {"1": word(tiny_pentagon, illegibility=True, tags=["masked"]),
             "2": word(tiny_pentagon, tags=["masked"]),
             "3": word(tiny_pentagon),
             "4": word(tiny_quad)}
    got, _ = reasons(words, tmp=tmp_path)
    assert got == [ILLEGIBLE, IGNORE_TAG, NOT_QUAD, SMALL]


def test_fitted_polygon_can_still_be_small(tmp_path):
    tiny_pentagon = [[0, 0], [1, 0], [2, 0], [2, 2], [0, 2]]
    records, s = ingest(write_set(tmp_path, {"1": word(tiny_pentagon)}), BuildConfig(fit_polygons=True))
    assert records[0].reason.tolist() == [SMALL] and s.fitted == 1


def test_counter_clockwise_polygon_is_reversed_keeping_its_first_vertex(tmp_path):
    ccw = [[10, 10], [10, 30], [50, 30], [50, 10]]
    records, _ = ingest(write_set(tmp_path, {"1": word(ccw)}))
    assert records[0].points.tolist() == [[10, 10], [50, 10], [50, 30], [10, 30]]


def test_points_outside_the_image_are_kept_as_given(tmp_path):
    outside = [[-3, -2], [104, -2], [104, 85], [-3, 85]]
    records, _ = ingest(write_set(tmp_path, {"1": word(outside)}))
    assert records[0].points.tolist() == outside and records[0].reason.tolist() == [CARE]


def test_words_are_ordered_by_id_not_by_json_key_order(tmp_path):
    words = {"10": word(illegibility=True), "2": word(), "b": word(tags=["stamp"])}
    got, _ = reasons(words, tmp=tmp_path)
    assert got == [CARE, ILLEGIBLE, IGNORE_TAG]


def test_malformed_json_names_the_file_line_and_column(tmp_path):
    root = write_set(tmp_path, {})
    (root / "ufo" / "train.json").write_text('{"images": {\n  "a.jpg": {"img_w": 10,,}}}')
    with pytest.raises(DataError, match=r"train\.json.*line 2, column 25"):
        ingest(root)


@pytest.mark.parametrize("content", ['{"imgs": {}}', '{"images": []}', "[1, 2]"])
def test_json_without_an_images_object_names_the_file(tmp_path, content):
    root = write_set(tmp_path, {})
    (root / "ufo" / "train.json").write_text(content)
    with pytest.raises(DataError, match=r'train\.json: no "images" object'):
        ingest(root)


def test_missing_image_file_names_image_json_and_path(tmp_path):
    root = write_set(tmp_path, {"1": word()})
    (root / "images" / "a.jpg").unlink()
    with pytest.raises(DataError) as e:
        ingest(root)
    msg = str(e.value)
    assert "'a.jpg'" in msg and "train.json" in msg and str(root / "images" / "a.jpg") in msg and "--skip-bad" in msg


def test_skip_bad_leaves_the_image_out_and_records_it(tmp_path):
    images = {n: {"img_w": 100, "img_h": 80, "words": {"1": word()}} for n in ("a.jpg", "b.jpg", "c.jpg")}
    root = write_set(tmp_path, images=images)
    (root / "images" / "b.jpg").unlink()
    records, s = ingest(root, skip_bad=True)
    assert [r.name for r in records] == ["a.jpg", "c.jpg"] and s.images == 2 and s.words == 2
    assert [b[0] for b in s.bad] == ["b.jpg"] and "not found" in s.bad[0][1]


def test_bad_frame_size_is_an_error(tmp_path):
    root = write_set(tmp_path, images={"a.jpg": {"img_w": "wide", "img_h": 80, "words": {}}})
    with pytest.raises(DataError, match=r"'a\.jpg'.*img_w/img_h"):
        ingest(root)


def test_missing_frame_size_is_read_from_the_exif_oriented_header(tmp_path):
    root = write_set(tmp_path, images={"a.jpg": {"words": {"1": word()}}})
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (40, 20)).save(root / "images" / "a.jpg", exif=exif)
    records, s = ingest(root)
    assert (records[0].width, records[0].height) == (20, 40) and s.exif_applied == 1 and s.warnings


def test_ingest_does_not_decode_images(tmp_path, monkeypatch):
    root = write_set(tmp_path, {"1": word()})

    def refuse(*a, **k):
        raise AssertionError("ingest opened an image")
    monkeypatch.setattr(Image, "open", refuse)
    assert ingest(root)[0][0].n_words == 1


def test_load_splits_merges_data_dirs_sorted_by_name(tmp_path):
    one = write_set(tmp_path / "one", images={"b.jpg": {"img_w": 9, "img_h": 9, "words": {}}})
    two = write_set(tmp_path / "two", images={"a.jpg": {"img_w": 60, "img_h": 40, "words": {"1": word()}}},
                    layout="img")
    records, s = load_splits([one, two], "train", BuildConfig())
    assert [r.name for r in records] == ["a.jpg", "b.jpg"] and (s.images, s.words) == (2, 1)
    assert records[0].path == str(two / "img" / "train" / "a.jpg")


def test_same_image_name_in_two_json_files_is_an_error(tmp_path):
    one, two = write_set(tmp_path / "one", {}), write_set(tmp_path / "two", {})
    with pytest.raises(DataError) as e:
        load_splits([one, two], "train", BuildConfig())
    msg = str(e.value)
    assert "'a.jpg'" in msg and str(one / "ufo" / "train.json") in msg and str(two / "ufo" / "train.json") in msg


def test_find_split_prefers_images_then_img_split(tmp_path):
    root = write_set(tmp_path / "a", {}, split="val", layout="img")
    assert find_split(root, "val") == (root / "ufo" / "val.json", root / "img" / "val")
    (root / "images").mkdir()
    assert find_split(root, "val") == (root / "ufo" / "val.json", root / "images")


def test_find_split_names_the_paths_tried(tmp_path):
    with pytest.raises(DataError, match=r"ufo/train\.json"):
        find_split(tmp_path, "train")
    (tmp_path / "ufo").mkdir()
    (tmp_path / "ufo" / "train.json").write_text('{"images": {}}')
    with pytest.raises(DataError, match=r"images.*img/train"):
        find_split(tmp_path, "train")


def test_fingerprint_ignores_key_order_and_sees_edits(tmp_path):
    entry = {"img_w": 100, "img_h": 80, "words": {"1": word(), "2": word(illegibility=True)}}
    reordered = {"words": {"2": dict(reversed(list(word(illegibility=True).items()))), "1": word()},
                 "img_h": 80, "img_w": 100}
    edited = json.loads(json.dumps(entry))
    edited["words"]["1"]["points"][0][0] += 1
    prints = [ingest(write_set(tmp_path / str(i), images={"a.jpg": e}))[0][0].fingerprint
              for i, e in enumerate([entry, reordered, edited])]
    assert prints[0] == prints[1] != prints[2] and len(prints[0]) == 32


def test_summary_merge_and_to_dict_round_trip_through_json():
    a = IngestSummary(images=1, words=3, legible=2, small=1, bad=[("x.jpg", "missing")], warnings=["w"])
    b = IngestSummary(images=2, words=1, illegible=1, fitted=1, exif_applied=1)
    d = a.merge(b).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert (d["images"], d["words"], d["legible"], d["illegible"], d["fitted"]) == (3, 4, 2, 1, 1)
    assert d["bad"] == [["x.jpg", "missing"]] and d["warnings"] == ["w"]
