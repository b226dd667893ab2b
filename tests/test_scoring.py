"""`python -m preprocess evaluate`: UFO ground truth and predictions in, DetEval totals out. Don't-care words
follow the build's rules; missing predictions count as none; unknown images are an error. And the full-page
check: the ground-truth maps of whole sample pages, decoded, score (nearly) perfectly, and shifted maps do not."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers import decode_page, page_maps

from east_cache.evaluate.scoring import Words, load_ground_truth, score
from east_cache.cli import main
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import CARE, load_ufo
from east_cache.tools.sampledata import write_sample_dataset


def box(x0, y0, x1, y1):
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def word(points, **extra):
    return {"points": points, **extra}


def write_ufo(path: Path, images: dict) -> Path:
    path.write_text(json.dumps({"images": {name: {"img_w": 640, "img_h": 480, "words": words}
                                           for name, words in images.items()}}))
    return path


@pytest.fixture
def files(tmp_path):
    """a.jpg: one legible word and one of each don't-care kind, plus a degenerate word (dropped). b.jpg: no
    words. c.jpg: one legible word, no predictions. Predictions: a hit and one detection on each don't-care
    word in a.jpg, plus a false positive; a false positive in b.jpg."""
    gt = write_ufo(tmp_path / "gt.json", {
        "a.jpg": {"1": word(box(10, 10, 109, 29)), "2": word(box(10, 50, 109, 69), illegibility=True),
                  "3": word(box(10, 90, 109, 109), tags=["masked"]),
                  "4": word([[200, 10], [260, 10], [280, 20], [260, 30], [200, 30]]),
                  "5": word(box(300, 300, 302, 302)), "6": word(box(400, 400, 400.5, 400.5))},
        "b.jpg": {}, "c.jpg": {"1": word(box(5, 5, 104, 24))}})
    dets = [box(10, 10, 109, 29), box(12, 52, 107, 67), box(10, 90, 109, 109), box(200, 10, 280, 30),
            box(300, 300, 302, 302), box(500, 500, 599, 519)]
    pred = write_ufo(tmp_path / "pred.json", {"a.jpg": {str(k + 1): word(d) for k, d in enumerate(dets)},
                                              "b.jpg": {"1": word(box(0, 0, 50, 20))}})
    return gt, pred


def evaluate(capsys, *flags) -> tuple[int, str, str]:
    rc = main(["evaluate", *map(str, flags)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_totals_over_images_with_build_rules(files, capsys):
    """Counted: 2 legible words (a, c), detections: the hit and the false positive in a, one in b (the other 4
    lie on don't-care words). Recall 1 / 2, precision 1 / 3, hmean 0.4."""
    rc, out, _ = evaluate(capsys, "--gt", files[0], "--pred", files[1], "--json")
    r = json.loads(out)
    assert rc == 0
    assert (r["precision"], r["recall"], r["hmean"]) == pytest.approx((1 / 3, 1 / 2, 0.4))
    assert (r["gt_care"], r["gt_dont_care"], r["det_care"], r["detections"], r["images"]) == (2, 4, 3, 7, 3)


def test_ignore_tags_flag_changes_the_dont_care_words(files, capsys):
    """With no ignore tags, the masked word counts and its detection finds it: recall 2 / 3, precision 2 / 4."""
    _, out, _ = evaluate(capsys, "--gt", files[0], "--pred", files[1], "--json", "--ignore-tags", "")
    r = json.loads(out)
    assert (r["precision"], r["recall"]) == pytest.approx((0.5, 2 / 3))


def test_console_report_and_per_image_csv(files, tmp_path, capsys):
    out_csv = tmp_path / "per_image.csv"
    rc, out, _ = evaluate(capsys, "--gt", files[0], "--pred", files[1], "--per-image", out_csv)
    assert rc == 0
    assert "rect DetEval over 3 images: precision 0.3333  recall 0.5000  hmean 0.4000" in out
    assert "1 one-to-one, 0 splits, 0 merges" in out
    rows = {r["image"]: r for r in csv.DictReader(out_csv.open())}
    assert [(rows[n]["gt_care"], rows[n]["det_counted"], rows[n]["hmean"]) for n in ("a.jpg", "b.jpg", "c.jpg")] == \
        [("1", "2", "0.6667"), ("0", "1", "0.0000"), ("1", "0", "0.0000")]


def test_poly_metric(files, capsys):
    rc, out, _ = evaluate(capsys, "--gt", files[0], "--pred", files[1], "--metric", "poly", "--json")
    assert rc == 0 and json.loads(out)["metric"] == "poly"


def test_prediction_for_an_unknown_image_is_an_error_naming_it(files, tmp_path, capsys):
    pred = write_ufo(tmp_path / "other.json", {"a.jpg": {}, "zz_unknown.png": {"1": word(box(0, 0, 9, 9))}})
    rc, out, err = evaluate(capsys, "--gt", files[0], "--pred", pred)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and "'zz_unknown.png'" in err and err.count("\n") == 1


def test_malformed_detection_is_an_error_naming_it(files, tmp_path, capsys):
    pred = write_ufo(tmp_path / "bad.json", {"a.jpg": {"7": word([[0, 0], [5, "x"], [5, 5]])}})
    rc, _, err = evaluate(capsys, "--gt", files[0], "--pred", pred)
    assert rc == 2 and "'a.jpg', word '7'" in err


def test_images_with_nothing_add_nothing(tmp_path):
    gt = {"empty.jpg": Words.from_quads([]), "one.jpg": Words.from_quads([box(0, 0, 9, 9)])}
    alone = score({"one.jpg": gt["one.jpg"]}, {"one.jpg": Words.from_quads([box(0, 0, 9, 9)])})
    both = score(gt, {"one.jpg": Words.from_quads([box(0, 0, 9, 9)])})
    assert alone["hmean"] == both["hmean"] == 1
    assert score({"empty.jpg": gt["empty.jpg"]}, {})["hmean"] == 0


def test_dont_care_words_are_the_builds(sample_root):
    """Same words, same points, same care flags as the build's ingest reads from the sample set."""
    cfg = BuildConfig()
    records, _ = load_ufo(sample_root / "ufo" / "train.json", sample_root / "images", cfg)
    gt = load_ground_truth(sample_root / "ufo" / "train.json", cfg)
    assert sorted(gt) == [r.name for r in records]
    for r in records:
        w = gt[r.name]
        assert w.points.astype("float32").tolist() == r.points.tolist() and w.offsets.tolist() == r.offsets.tolist()
        assert w.care.tolist() == (r.reason == CARE).tolist()
    assert 0 < sum(int(w.care.sum()) for w in gt.values()) < sum(len(w.care) for w in gt.values())


@pytest.fixture(scope="module")
def full_pages(tmp_path_factory):
    """Sample validation pages at their full size (1200 x 1600, 40 words each)."""
    root = write_sample_dataset(tmp_path_factory.mktemp("full"), n_images=4, split="val")
    sizes = {n: (e["img_w"], e["img_h"]) for n, e in json.loads((root / "ufo" / "val.json").read_text())["images"].items()}
    return load_ground_truth(root / "ufo" / "val.json", BuildConfig()), sizes


@pytest.mark.slow
@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_ground_truth_maps_of_full_pages_score_high_and_shifted_maps_lower(full_pages, map_scale):
    gt, sizes = full_pages
    results = {}
    for shift in (0, 2):
        pred = {}
        for name, w in gt.items():
            score_map, geo, scale = page_maps(w.points, w.offsets, w.care, *sizes[name], 1024, map_scale)
            pred[name] = Words.from_quads(decode_page(score_map, geo, scale, map_scale, shift))
        results[shift] = score(gt, pred)
    assert results[0]["gt_care"] >= 100
    assert results[0]["hmean"] >= 0.95, results[0]
    assert results[2]["hmean"] < results[0]["hmean"] - 0.3, results[2]


def test_a_word_far_outside_its_stated_frame_is_dropped_as_the_build_drops_it(tmp_path):
    """A gt point 1e30 px away (a corrupt annotation) must not count as a word the model had to find."""
    gt = write_ufo(tmp_path / "gt.json", {"a.jpg": {"1": word(box(10, 10, 109, 29)),
                                                    "2": word(box(10, 50, 1e30, 69))}})
    words = load_ground_truth(gt, BuildConfig())["a.jpg"]
    assert len(words.care) == 1 and words.care.all()
