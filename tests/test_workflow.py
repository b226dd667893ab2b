"""The whole way from annotations to a scored submission file, on the sample set and on an ICDAR 2015-style
photo set (per-image text files, converted first): build a cache, train a few steps, predict on the full
images, evaluate. The model is barely trained, so the figures are not checked here, only that every stage
runs and hands the next what it needs (test_predict and test_scoring check the figures)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from east_cache.train.train import main as train_main
from east_cache.predict.predict import main as predict_main
from east_cache.cli import main as preprocess_main

SIZES = ["--image-size", "192", "--input-size", "96"]   # tiny crops: a CPU trains a step in seconds


def icdar2015_photos(sample_root: Path, src: Path) -> Path:
    """The sample pages as ICDAR 2015 photos: img_N.jpg (the EXIF-rotated one kept byte for byte) and
    gt_img_N.txt, one quad per line with its transcription, ### for an illegible word."""
    (src / "img").mkdir(parents=True)
    (src / "gt").mkdir()
    images = json.loads((sample_root / "ufo" / "train.json").read_text())["images"]
    for k, (name, entry) in enumerate(sorted(images.items()), start=1):
        with Image.open(sample_root / "images" / name) as im:
            if im.format == "JPEG":
                shutil.copyfile(sample_root / "images" / name, src / "img" / f"img_{k}.jpg")
            else:
                im.convert("RGB").save(src / "img" / f"img_{k}.jpg", quality=90)
        lines = [",".join(str(round(v)) for xy in w["points"] for v in xy) + ","
                 + ("###" if w["illegibility"] else w["transcription"])
                 for w in entry["words"].values() if len(w["points"]) == 4]
        (src / "gt" / f"gt_img_{k}.txt").write_text("\n".join(lines) + "\n")
    return src


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sample", "icdar2015"])
def test_annotations_to_scored_submission(kind, sample_root, tmp_path, capsys):
    root = sample_root
    if kind == "icdar2015":
        src = icdar2015_photos(sample_root, tmp_path / "icdar")
        root = tmp_path / "root"
        assert preprocess_main(["convert", "--from", "icdar2015", str(src / "gt"), "--images", str(src / "img"),
                                "--out", str(root), "--quiet"]) == 0
    cache, run, pred = tmp_path / "cache", tmp_path / "run", tmp_path / "predictions.json"
    assert preprocess_main(["build", "--data", str(root), "--out", str(cache), "--jobs", "1", "--quiet", *SIZES]) == 0
    assert train_main(["--cache", str(cache), "--out", str(run), "--epochs", "1", "--max-steps", "1",
                       "--batch-size", "2", "--backbone-weights", "random", "--device", "cpu"]) == 0
    assert predict_main(["--checkpoint", str(run / "latest.pt"), "--data", str(root), "--split", "train",
                         "--out", str(pred), "--device", "cpu", "--quiet"]) == 0
    names = set(json.loads((root / "ufo" / "train.json").read_text())["images"])
    assert set(json.loads(pred.read_text())["images"]) == names
    capsys.readouterr()
    assert preprocess_main(["evaluate", "--gt", str(root / "ufo" / "train.json"), "--pred", str(pred), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["images"] == len(names) and result["gt_care"] > 0 and 0 <= result["hmean"] <= 1
