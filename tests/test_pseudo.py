"""`east-cache pseudo` (east_cache/tools/pseudo.py): predictions with word scores become a UFO root of
pseudo-labels (legible, don't-care or dropped by score), marked so that the build's plan and `info` report them,
mixed with real data by --data as any root; inputs are never written over."""
from __future__ import annotations

import json
import shutil

import pytest
from helpers import TINY, cli_run, with_flags

from east_cache.config import BuildConfig
from east_cache.ingest.pseudolabels import PROVENANCE, PSEUDO_TAG, marked_files
from east_cache.ingest.ufo import load_ufo
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest
from east_cache.tools.info import describe

SCORES = (0.99, 0.9, 0.7)   # with the defaults 0.8 / 0.95: legible, don't-care, dropped


@pytest.fixture
def predicted(sample_root, tmp_path):
    """(folder of unlabelled images, predictions file): the sample set's pages renamed, their quads as predictions
    (east-predict writes quads) scored in turn by SCORES; the last image's words all below the lowest threshold."""
    folder, images = tmp_path / "unlabelled", {}
    folder.mkdir()
    truth = json.loads((sample_root / "ufo" / "train.json").read_text())["images"]
    for i, (name, entry) in enumerate(truth.items()):
        shutil.copy(sample_root / "images" / name, folder / f"u_{name}")
        images[f"u_{name}"] = {"words": {k: {"points": w["points"], "score": 0.5 if i == len(truth) - 1 else
                                             SCORES[j % 3]} for j, (k, w) in enumerate(entry["words"].items())
                                   if len(w["points"]) == 4}}
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"predicted_by": {"program": "east-predict", "epoch": 3}, "images": images}))
    return folder, pred


def test_words_are_kept_by_score_and_the_file_is_marked(predicted, tmp_path, capsys):
    folder, pred = predicted
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")
    assert status == 0, err
    text = (tmp_path / "ps" / "ufo" / "train.json").read_text()
    assert text.startswith('{"' + PROVENANCE + '"'), "the mark is the file's first member"
    written = json.loads(text)
    source = json.loads(pred.read_text())
    assert written[PROVENANCE]["predicted_by"] == source["predicted_by"]
    assert (written[PROVENANCE]["min_score"], written[PROVENANCE]["care_score"]) == (0.8, 0.95)
    assert len(written["images"]) == len(source["images"]) - 1 and "1 image(s) without a kept word" in err
    for name, entry in written["images"].items():
        assert entry["tags"] == [PSEUDO_TAG] and entry["img_w"] > 0 and entry["img_h"] > 0
        predicted_words = source["images"][name]["words"]
        assert set(entry["words"]) == {k for k, w in predicted_words.items() if w["score"] >= 0.8}
        for k, w in entry["words"].items():
            assert w["illegibility"] == (w["score"] < 0.95) and w["points"] == predicted_words[k]["points"]
        assert (tmp_path / "ps" / "images" / name).is_symlink()
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps2",
                             "--min-score", 0.95, "--care-score", 0.99, "--copy")
    written = json.loads((tmp_path / "ps2" / "ufo" / "train.json").read_text())["images"]
    assert all(not w["illegibility"] for e in written.values() for w in e["words"].values())
    assert all(w["score"] == 0.99 for e in written.values() for w in e["words"].values())
    assert not any((tmp_path / "ps2" / "images" / name).is_symlink() for name in written)


@pytest.mark.slow
def test_the_build_and_info_report_pseudo_labels_mixed_with_real_data(sample_root, predicted, tmp_path, capsys):
    """A build of the real root and the pseudo root (--data twice) holds both; its plan and `info` say how many
    images are pseudo-labels and from where; the build reads the scored words as any UFO words."""
    folder, pred = predicted
    assert cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")[0] == 0
    ufo_file = tmp_path / "ps" / "ufo" / "train.json"
    records, summary = load_ufo(ufo_file, tmp_path / "ps" / "images", BuildConfig())
    assert summary.legible > 0 and summary.illegible > 0 and not summary.dropped_invalid
    assert marked_files(records) == [[str(ufo_file), len(records)]]
    plans = []
    build_cache(BuildConfig(**TINY), [sample_root, tmp_path / "ps"], tmp_path / "cache", jobs=1, quiet=True,
                on_plan=plans.append)
    m = Manifest.load(tmp_path / "cache")
    real = json.loads((sample_root / "ufo" / "train.json").read_text())["images"]
    assert sorted(m.images) == sorted([*real, *(r.name for r in records)])
    line = f"{len(records)} of {len(m.images)} images are pseudo-labels (from {ufo_file})"
    assert plans[0].pseudo == line
    assert f"pseudo     {line}" in describe(tmp_path / "cache")
    build_cache(BuildConfig(**TINY), [sample_root], tmp_path / "real", jobs=1, quiet=True, on_plan=plans.append)
    assert plans[1].pseudo == "" and "pseudo " not in describe(tmp_path / "real")


def test_predictions_without_scores_are_refused_with_what_to_run(sample_root, tmp_path, capsys):
    status, _, err = cli_run(capsys, "pseudo", "--pred", sample_root / "ufo" / "train.json", "--images",
                             sample_root / "images", "--out", tmp_path / "ps")
    assert status == 2 and err.count("error:") == 1 and '"score"' in err and "east-predict --checkpoint" in err
    assert not (tmp_path / "ps" / "ufo").exists()


def test_outputs_that_are_inputs_are_refused(predicted, tmp_path, capsys):
    folder, pred = predicted
    before = pred.read_bytes()
    (tmp_path / "r" / "ufo").mkdir(parents=True)
    (tmp_path / "r" / "ufo" / "p.json").symlink_to(pred)   # ROOT/ufo/p.json is the predictions file
    (tmp_path / "h" / "ufo").mkdir(parents=True)
    (tmp_path / "h" / "ufo" / "p.json").hardlink_to(pred)   # a hard link to it
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "images").symlink_to(folder)          # ROOT/images is the --images folder
    cases = [(["--out", tmp_path / "s"], "--images"),
             (["--out", tmp_path / "r", "--split", "p", "--force"], "--pred"),
             (["--out", tmp_path / "h", "--split", "p", "--force"], "--pred"),
             (["--out", pred], "is a file"), (["--out", tmp_path / "x", "--split", "../pred"], "plain name"),
             (["--min-score", 0.9, "--care-score", 0.8], "min <= care"),
             (["--min-score", "nan"], "--min-score: nan: must be a finite number in [0, 1]"),
             (["--care-score", "1.7"], "--care-score: 1.7: must be a finite number in [0, 1]")]
    for flags, said in cases:
        status, _, err = cli_run(capsys, "pseudo", *with_flags(["--pred", pred, "--images", folder, "--out",
                                                                tmp_path / "ok"], flags))
        assert status == 2 and err.count("error:") == 1 and said in err, (flags, err)
    assert pred.read_bytes() == before and not (folder / "images").exists() and not (tmp_path / "ok").exists()
    assert not (tmp_path / "r" / "images").exists() and not (tmp_path / "h" / "images").exists()
    beside = folder / "pseudo"   # a root inside the --images folder overwrites nothing there: allowed
    assert cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", beside)[0] == 0
    assert pred.read_bytes() == before and (beside / "ufo" / "train.json").is_file()
    root = tmp_path / "root"
    assert cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", root)[0] == 0
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", root)
    assert status == 2 and "--force" in err
    assert cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", root, "--force")[0] == 0


def test_an_empty_result_is_said_by_pseudo_and_by_the_build_that_mixes_it_in(sample_root, predicted, tmp_path,
                                                                              capsys):
    """pseudo keeping no image says why (no predicted word, or none scored at least --min-score) and what to run;
    the build given that empty root beside the real one says the root adds nothing and why, not only that the
    cache is up to date."""
    folder, pred = predicted
    predicted_words = sum(len(e["words"]) for e in json.loads(pred.read_text())["images"].values())
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "high",
                             "--min-score", "0.999", "--care-score", "1")
    (line,) = [x for x in err.splitlines() if x.startswith("warning:")]
    assert status == 0 and "0 images of pseudo-labels" in line, err
    assert f"none of its {predicted_words} predicted word(s) scored at least --min-score 0.999" in line, line
    none = tmp_path / "none.json"
    none.write_text(json.dumps({"images": {name: {"words": {}} for name in json.loads(pred.read_text())["images"]}}))
    status, _, err = cli_run(capsys, "pseudo", "--pred", none, "--images", folder, "--out", tmp_path / "ps",
                             "--quiet")
    assert status == 0 and err.startswith(f"warning: {tmp_path / 'ps' / 'ufo' / 'train.json'}: 0 images"), err
    assert "holds no predicted word" in err and "--score-thresh" in err, err

    build = ["build", "--image-size", "96", "--input-size", "64", "--jobs", "1", "--out", tmp_path / "cache"]
    assert cli_run(capsys, *build, "--data", sample_root)[0] == 0
    status, _, err = cli_run(capsys, *build, "--data", sample_root, "--data", tmp_path / "ps")
    assert status == 0 and "up to date" in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("warning:")]
    assert f"--data {tmp_path / 'ps'}: " in line and "lists no image" in line and "pseudo-labels" in line, line
    assert "--min-score" in line and "--score-thresh" in line, line
    status, _, err = cli_run(capsys, *build, "--data", sample_root)
    assert status == 0 and "warning" not in err, err


@pytest.mark.parametrize("word, said, polygon", [
    ({"points": [[1, 1], [20, 1], [20, 9], [1, 9]], "score": 1.7},
     '"score" must be a finite number in [0, 1], not 1.7', False),
    ({"points": [[1, 1], [20, 1], [20, 9], [1, 9]], "score": -0.5}, "not -0.5", False),
    ({"points": [[1, 1], [20, 1], [20, 9], [1, 9]], "score": "0.9"}, "not '0.9'", False),
    ({"points": [[1, 1], [20, 1], [20, 9], [1, "nan"]], "score": 0.99}, '"points" must be a list of at least 3', False),
    ({"points": [[1, 1], [20, 1], [20, 9], [1, float("nan")]], "score": 0.99},
     '"points" must be a list of at least 3', False),
    ({"points": [[1, 1], [20, 1]], "score": 0.99}, '"points" must be a list of at least 3', False),
    ({"points": "1,1,20,1,20,9,1,9", "score": 0.99}, "at least 3", False),
])
def test_a_bad_prediction_stops_pseudo_and_evaluate_alike_naming_the_image_and_word(predicted, tmp_path, capsys,
                                                                                     word, said, polygon):
    """pseudo reads predictions with evaluate's reader (ufofile.predicted_word): the same refusals, each naming the
    image and the word; nothing is written."""
    folder, pred = predicted
    doc = json.loads(pred.read_text())
    name = sorted(doc["images"])[0]
    doc["images"][name]["words"]["bad"] = word
    pred.write_text(json.dumps(doc))   # json writes NaN as NaN, as a careless writer would
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")
    assert status == 2 and err.count("error:") == 1 and said in err, err
    assert f"image {name!r}, word 'bad'" in err and not (tmp_path / "ps").exists()
    if polygon:
        return
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"images": {n: {"words": {}} for n in doc["images"]}}))
    status, _, err = cli_run(capsys, "evaluate", "--gt", gt, "--pred", pred)
    assert status == 2 and f"image {name!r}, word 'bad'" in err, err


def test_a_polygon_word_is_kept_as_the_build_takes_it(predicted, tmp_path, capsys):
    """A model other than EAST predicts polygons: a 6-point word (and a 5-point one, clipped to the image) becomes a
    pseudo-label as it is, which the build takes as any UFO polygon (don't-care, or fitted with --fit-polygons)."""
    folder, pred = predicted
    doc = json.loads(pred.read_text())
    name = sorted(doc["images"])[0]
    six = [[5, 20], [20, 18], [35, 20], [35, 30], [20, 32], [5, 30]]
    doc["images"][name]["words"] = {"six": {"points": six, "score": 0.99},
                                    "five": {"points": [[-5, 40], [30, 40], [30, 50], [15, 52], [-5, 50]],
                                             "score": 0.9}}
    pred.write_text(json.dumps(doc))
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")
    assert status == 0, err
    words = json.loads((tmp_path / "ps" / "ufo" / "train.json").read_text())["images"][name]["words"]
    assert words["six"]["points"] == six and not words["six"]["illegibility"]
    assert words["five"]["points"][0] == [0, 40] and words["five"]["illegibility"] and "1 word(s) clipped" in err
    for fit in (False, True):
        out = tmp_path / f"cache{fit}"
        build_cache(BuildConfig(**{**TINY, "fit_polygons": fit}), [tmp_path / "ps"], out, jobs=1, quiet=True)
        ingest = Manifest.load(out).ingest
        assert ingest["images"] == len(json.loads((tmp_path / "ps" / "ufo" / "train.json").read_text())["images"])
        assert (ingest["fitted"], ingest["not_quad"]) == ((1, 0) if fit else (0, 1)), ingest   # the legible six


def test_points_outside_the_image_are_clipped_and_degenerate_words_dropped_with_counts(predicted, tmp_path, capsys):
    folder, pred = predicted
    doc = json.loads(pred.read_text())
    name = sorted(doc["images"])[0]
    doc["images"][name]["words"] = {
        "out": {"points": [[-50, 2], [10**6, 2], [10**6, 12], [-50, 12]], "score": 0.99},   # wider than the image
        "flat": {"points": [[5, 5], [30, 5], [30, 5], [5, 5]], "score": 0.99},             # no area
        "gone": {"points": [[-90, -90], [-60, -90], [-60, -70], [-90, -70]], "score": 0.99},   # nothing inside
        "ok": {"points": [[5, 20], [30, 20], [30, 30], [5, 30]], "score": 0.99}}
    pred.write_text(json.dumps(doc))
    status, _, err = cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")
    assert status == 0, err
    assert "1 word(s) clipped to their image, 2 degenerate word(s)" in err, err
    words = json.loads((tmp_path / "ps" / "ufo" / "train.json").read_text())["images"][name]["words"]
    width = json.loads((tmp_path / "ps" / "ufo" / "train.json").read_text())["images"][name]["img_w"]
    assert sorted(words) == ["ok", "out"] and words["ok"]["points"] == [[5, 20], [30, 20], [30, 30], [5, 30]]
    assert words["out"]["points"] == [[0, 2], [width, 2], [width, 12], [0, 12]]


@pytest.mark.parametrize("where", ["first", "last", "tags only", "member only, last"])
def test_evaluate_refuses_pseudo_labels_as_ground_truth_wherever_the_mark_sits(predicted, tmp_path, capsys, where):
    """Scored against the pseudo-labels made of them, predictions would get hmean 1: the file's member (first, as
    pseudo writes it, or moved after "images") or an image's pseudo tag alone makes evaluate and review refuse it."""
    folder, pred = predicted
    assert cli_run(capsys, "pseudo", "--pred", pred, "--images", folder, "--out", tmp_path / "ps")[0] == 0
    ufo_file = tmp_path / "ps" / "ufo" / "train.json"
    doc = json.loads(ufo_file.read_text())
    mark = doc.pop(PROVENANCE)
    if where != "tags only":
        doc[PROVENANCE] = mark    # after "images" unless first
        if where == "first":
            doc = {PROVENANCE: mark, "images": doc["images"]}
    if where == "member only, last":
        for entry in doc["images"].values():
            entry["tags"] = []
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(doc))
    status, _, err = cli_run(capsys, "evaluate", "--gt", gt, "--pred", pred)
    assert status == 2 and err.count("error:") == 1 and "pseudo-labels" in err and "not ground truth" in err, err
    status, _, err = cli_run(capsys, "review", "--gt", gt, "--pred", pred, "--images", folder, "--out",
                             tmp_path / "review", "--quiet")
    assert status == 2 and "pseudo-labels" in err, err
