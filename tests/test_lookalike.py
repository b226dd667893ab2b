"""A --data folder that is no UFO root but another format that `convert` reads: the one-line error names the format
and the exact convert command, and running that command, then building from its output, works. A missing split
lists the splits there, for build as for predict and --val-data."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from PIL import Image

from east_cache.cli import main as cli_main
from east_cache.convert import FORMATS
from east_cache.ingest.lookalike import looks_like
from east_cache.train import train
from east_cache.predict import predict

W, H = 160, 120
QUAD = "10,10,70,10,70,30,10,30"
COMMAND = re.compile(r"convert it with `([^`]+)`, then pass (--[a-z-]+ .+)$")


def image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (W, H), (200, 200, 200)).save(path)


def icdar2015(root: Path) -> None:   # the download's layout: images and gt files in two folders
    image(root / "ch4_training_images" / "img_1.jpg")
    (root / "ch4_training_localization_transcription_gt").mkdir()
    (root / "ch4_training_localization_transcription_gt" / "gt_img_1.txt").write_bytes(
        b"\xef\xbb\xbf" + f"{QUAD},Hello\r\n80,40,150,40,150,70,80,70,###\r\n".encode())


def sroie(root: Path) -> None:
    image(root / "X51005.jpg")
    (root / "X51005.txt").write_text(f"{QUAD},TOTAL: 1,234.00\n")


def icdar2013(root: Path) -> None:
    image(root / "100.jpg")
    (root / "gt_100.txt").write_text('10 10 70 30 "Footpath"\n')


def mmocr(root: Path) -> None:
    image(root / "textdet_imgs" / "train" / "img_7.jpg")
    (root / "textdet_train.json").write_text(json.dumps({"metainfo": {"task_name": "textdet"}, "data_list": [
        {"img_path": "textdet_imgs/train/img_7.jpg", "height": H, "width": W,
         "instances": [{"polygon": [10, 10, 70, 10, 70, 30, 10, 30], "bbox": [10, 10, 70, 30], "ignore": False}]}]}))


def wildreceipt(root: Path) -> None:
    image(root / "image_files" / "r0.jpeg")
    (root / "train.txt").write_text(json.dumps({"file_name": "image_files/r0.jpeg", "height": H, "width": W,
                                                "annotations": [{"box": [10, 30, 70, 30, 70, 10, 10, 10],
                                                                 "text": "SAFEWAY", "label": 1}]}) + "\n")


def cord(root: Path) -> None:   # CORD's download: train/, dev/ and test/ split folders
    for split in ("dev", "train"):
        image(root / split / "image" / "receipt_00000.png")
        (root / split / "json").mkdir(parents=True)
        quad = dict(zip(("x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4"), (10, 10, 70, 10, 70, 30, 10, 30)))
        (root / split / "json" / "receipt_00000.json").write_text(json.dumps(
            {"valid_line": [{"words": [{"quad": quad, "text": "TOTAL"}]}],
             "meta": {"image_size": {"width": W, "height": H}}}))


def cocotext(root: Path) -> None:
    image(root / "train2014" / "COCO_train2014_1.jpg")
    (root / "COCO_Text.json").write_text(json.dumps({
        "anns": {"10": {"id": 10, "image_id": 1, "bbox": [10, 10, 60, 20], "legibility": "legible"}},
        "imgs": {"1": {"id": 1, "file_name": "COCO_train2014_1.jpg", "width": W, "height": H, "set": "train"}},
        "imgToAnns": {"1": [10]}}))


def totaltext(root: Path) -> None:
    image(root / "Images" / "img11.jpg")
    (root / "Groundtruth").mkdir()
    (root / "Groundtruth" / "poly_gt_img11.txt").write_text(
        "x: [[10 70 70 10]], y: [[10 10 30 30]], ornt: [u'h'], transcriptions: [u'ARC']\n")


def polygon(root: Path) -> None:
    image(root / "1001.jpg")
    (root / "1001.txt").write_text("10,30,40,12,70,12,100,30,100,50,70,32,40,32,10,50,####a, b\n")


SETS = {"icdar2015": icdar2015, "sroie": sroie, "icdar2013": icdar2013, "mmocr": mmocr, "wildreceipt": wildreceipt,
        "cord": cord, "cocotext": cocotext, "totaltext": totaltext, "polygon": polygon}


def test_every_format_convert_reads_is_recognised():
    assert set(SETS) == set(FORMATS)


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def small_build(data, out) -> list[str]:
    return ["build", "--data", str(data), "--out", str(out), "--jobs", "1", "--quiet", "--image-size", "192",
            "--input-size", "96"]


@pytest.mark.parametrize("fmt", sorted(SETS))
def test_build_from_another_format_names_it_and_the_convert_command_that_works(fmt, tmp_path, capsys, monkeypatch):
    root = tmp_path / f"my {fmt}"   # a space: the command quotes its paths
    root.mkdir()
    SETS[fmt](root)
    assert cli_main(small_build(root, tmp_path / "c")) == 2
    line = one_error_line(capsys)
    assert f"{root}: not a UFO dataset root (no ufo/train.json); it looks like " in line, line
    command, then = COMMAND.search(line).groups()
    flag, out = shlex.split(then)
    assert command.startswith(f"east-cache convert --from {fmt} ") and (flag, out) == ("--data", f"{root}-ufo")
    monkeypatch.chdir(tmp_path)
    assert cli_main(shlex.split(command)[1:] + ["--quiet"]) == 0, capsys.readouterr().err
    assert cli_main(small_build(Path(out), tmp_path / "c")) == 0, capsys.readouterr().err


def test_predict_and_val_data_name_their_own_flag(tmp_path, capsys):
    root = tmp_path / "icdar"
    root.mkdir()
    icdar2015(root)
    assert predict.main(["--checkpoint", str(tmp_path / "none.pt"), "--data", str(root),
                         "--out", str(tmp_path / "p.json")]) == 2
    assert one_error_line(capsys).endswith(f"then pass --data {root}-ufo")
    assert train.main(["--cache", str(tmp_path / "nothing"), "--out", str(tmp_path / "run"),
                       "--val-data", str(root)]) == 2
    line = one_error_line(capsys)
    assert "--from icdar2015" in line and line.endswith(f"then pass --val-data {root}-ufo"), line


def test_a_split_other_than_train_is_written_by_the_command(tmp_path):
    root = tmp_path / "CORD"
    cord(root)
    found = looks_like(root, "dev")
    assert found.src == root / "dev", "the split folder named like the split"
    assert found.command(tmp_path / "out", "dev").endswith("--split dev")


def test_a_folder_of_nothing_known_keeps_the_plain_message(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello\n")
    assert cli_main(small_build(tmp_path / "notes", tmp_path / "c")) == 2
    assert one_error_line(capsys).endswith("ufo/train.json: UFO file not found; pass the dataset root that holds "
                                           "ufo/train.json, or choose another --split")


def test_build_lists_the_splits_there(data_copy, tmp_path, capsys):
    (data_copy / "ufo" / "val.json").write_text((data_copy / "ufo" / "train.json").read_text())
    assert cli_main(small_build(data_copy, tmp_path / "c") + ["--split", "test"]) == 2
    assert one_error_line(capsys).endswith("or choose another --split; the splits there: train, val")
