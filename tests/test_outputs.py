"""No output replaces an input: every command that writes, driven against each of its inputs (the same path, a
symbolic link, a hard link, a file inside an input folder, a folder holding one), is refused in one `error:`
line naming the flag, the path and the input, before any work, and the input is left byte for byte as it was.

The inputs need not be valid (a checkpoint of a few bytes, a manifest of `{}`): the rule is checked before any
input is read, so a command that got this far without it would fail on its input instead, naming no output.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from east_cache.errors import Input, UsageError, refuse_overwrite
from east_cache.tools.sampledata import write_sample_dataset

IMAGE = "img_0000.jpg"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("outputs") / "root", n_images=1, words_per_page=2,
                                page_size=(96, 96))


@pytest.fixture
def world(dataset, tmp_path) -> Path:
    """tmp_path holding: root/ (a data set), cache/ (manifest.json, data/f.npy, data/set/ufo/train.json), ck.pt,
    pred.json, run/latest.pt, and links: gt-hard.json (a hard link to the ground truth), ck-link.pt (a symbolic
    link to the checkpoint)."""
    import shutil
    shutil.copytree(dataset, tmp_path / "root")
    (tmp_path / "cache" / "data").mkdir(parents=True)
    (tmp_path / "cache" / "manifest.json").write_text("{}")
    (tmp_path / "cache" / "data" / "set" / "ufo").mkdir(parents=True)
    (tmp_path / "cache" / "data" / "set" / "ufo" / "train.json").write_text('{"images": {}}')
    (tmp_path / "cache" / "data" / "f.npy").write_bytes(b"\x93NUMPY not really")
    (tmp_path / "ck.pt").write_bytes(b"a checkpoint")
    (tmp_path / "pred.json").write_text('{"images": {}}')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "latest.pt").write_bytes(b"the last run's checkpoint")
    os.link(tmp_path / "root" / "ufo" / "train.json", tmp_path / "gt-hard.json")
    (tmp_path / "ck-link.pt").symlink_to(tmp_path / "ck.pt")
    return tmp_path


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def image_name(w: Path) -> str:
    return sorted((w / "root" / "images").iterdir())[0].name


GT, IMG = "root/ufo/train.json", "root/images/{image}"
TRAIN = ["--device", "cpu", "--workers", "0"]
# case -> (command, arguments with {w} for the world and {image} for the data set's image, what the error names)
CASES = {
    "predict --out the checkpoint": ("predict", ["--checkpoint", "{w}/ck.pt", "--data", "{w}/root", "--split",
                                                 "train", "--out", "{w}/ck.pt"], ("--out", "the checkpoint")),
    "predict --out a link to the checkpoint": ("predict", ["--checkpoint", "{w}/ck.pt", "--data", "{w}/root",
                                                           "--split", "train", "--out", "{w}/ck-link.pt"],
                                               ("--out", "the checkpoint")),
    "predict --out the ground truth": ("predict", ["--checkpoint", "{w}/ck.pt", "--data", "{w}/root", "--split",
                                                   "train", "--out", "{w}/" + GT], ("--out", "annotations of --data")),
    "predict --out a hard link to the ground truth": ("predict", ["--checkpoint", "{w}/ck.pt", "--data", "{w}/root",
                                                                  "--split", "train", "--out", "{w}/gt-hard.json"],
                                                      ("--out", "annotations of --data")),
    "predict --out an image of --images": ("predict", ["--checkpoint", "{w}/ck.pt", "--images", "{w}/root/images",
                                                       "--out", "{w}/" + IMG], ("--out", "the images --images")),
    "evaluate --per-image the ground truth": ("cli", ["evaluate", "--gt", "{w}/" + GT, "--pred", "{w}/pred.json",
                                                      "--per-image", "{w}/" + GT], ("--per-image", "ground truth")),
    "evaluate --per-image the predictions": ("cli", ["evaluate", "--gt", "{w}/" + GT, "--pred", "{w}/pred.json",
                                                     "--per-image", "{w}/pred.json"], ("--per-image", "predictions")),
    "evaluate --per-image a hard link to the gt": ("cli", ["evaluate", "--gt", "{w}/" + GT, "--pred",
                                                           "{w}/pred.json", "--per-image", "{w}/gt-hard.json"],
                                                   ("--per-image", "ground truth")),
    "show -o the source photo": ("cli", ["show", "--source", "{w}/root", "--name", "{image}", "-o", "{w}/" + IMG],
                                 ("-o", "the images of --source")),
    "show -o the cache's manifest": ("cli", ["show", "{w}/cache", "0", "-o", "{w}/cache/manifest.json"],
                                     ("-o", "the manifest of the cache")),
    "show -o a cache data file": ("cli", ["show", "{w}/cache", "0", "-o", "{w}/cache/data/f.npy"],
                                  ("-o", "the data of the cache")),
    "build --out the data set": ("cli", ["build", "--data", "{w}/root", "--out", "{w}/root", "--quiet"],
                                 ("--out", "the data set --data")),
    "build --out whose data/ is the data set": ("cli", ["build", "--data", "{w}/cache/data", "--out", "{w}/cache",
                                                       "--quiet"], ("--out", "the data set --data")),
    "build --out whose data/ holds the data set": ("cli", ["build", "--data", "{w}/cache/data/set", "--out",
                                                          "{w}/cache", "--quiet"], ("--out", "the data set --data")),
    "build --staging the data set": ("cli", ["build", "--data", "{w}/root", "--out", "s3://bucket/c", "--staging",
                                             "{w}/root", "--quiet"], ("--staging", "the data set --data")),
    "convert --out over its source file": ("cli", ["convert", "--from", "mmocr", "{w}/" + GT, "--out", "{w}/root",
                                                   "--force"], ("--out", "the source SRC")),
    "convert --out the --images folder": ("cli", ["convert", "--from", "icdar2015", "{w}/root/ufo", "--images",
                                                  "{w}/root/images", "--out", "{w}/root/images"],
                                          ("--out", "the images --images")),
    "train --out the cache": ("train", ["--cache", "{w}/cache", "--out", "{w}/cache", *TRAIN],
                              ("--out", "the cache --cache")),
    "train --out over its --init-from": ("train", ["--cache", "{w}/cache", "--init-from", "{w}/run/latest.pt",
                                                   "--out", "{w}/run", *TRAIN],
                                         ("--out", "the checkpoint --init-from")),
    "train --out the --val-data set": ("train", ["--cache", "{w}/cache", "--val-data", "{w}/root", "--out",
                                                 "{w}/root", *TRAIN], ("--out", "the data set --val-data")),
    "train --export-onnx the checkpoint": ("train", ["--export-onnx", "{w}/ck.pt", "--checkpoint", "{w}/ck.pt"],
                                           ("--export-onnx", "the checkpoint --checkpoint")),
}


def run(command: str, argv: list[str]) -> int:
    if command == "cli":
        from east_cache.cli import main
        return main(argv)
    if command == "predict":
        from east_cache.model.predict import main
        return main(argv)
    from east_cache.model.train import main
    return main(argv)


@pytest.mark.parametrize("case", CASES)
def test_no_command_writes_over_one_of_its_inputs(case, world, capsys):
    command, args, names = CASES[case]
    argv = [a.format(w=world, image=image_name(world)) for a in args]
    before = snapshot(world)
    status = run(command, argv)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(n in lines[0] for n in names), lines[0]
    assert snapshot(world) == before, "an input changed"


def test_a_new_file_beside_the_inputs_is_fine_and_the_resumed_run_may_write_its_folder(world):
    refuse_overwrite("--out", world / "root" / "predictions.json",
                     [Input("the annotations", world / "root" / "ufo", tree=True),
                      Input("the checkpoint", world / "ck.pt")])
    refuse_overwrite("--out", world / "run", [Input("the cache", world / "cache")], ("latest.pt", "epoch_*.pt"))
    with pytest.raises(UsageError, match="would write .*latest.pt, which is the checkpoint"):
        refuse_overwrite("--out", world / "run", [Input("the checkpoint", world / "run" / "latest.pt")], ("latest.pt",))
