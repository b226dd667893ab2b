"""No output replaces an input: every command that writes, driven against each of its inputs (the same path, a
symbolic link, a hard link, a file inside an input folder, a folder holding one), is refused in one `error:`
line naming the flag, the path and the input, before any work, and the input is left byte for byte as it was.

The inputs need not be valid (a checkpoint of a few bytes, a manifest of `{}`): the rule is checked before any
input is read, so a command that got this far without it would fail on its input instead, naming no output.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from east_cache.errors import UsageError
from east_cache.inputs import Input, refuse_overwrite
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
    link to the checkpoint), root/ufo/val1.json (a hard link to the ground truth), and two folders whose files are
    links (sym/ symbolic, hard/ hard) to an input, under the names commands write: report.json, duplicates.csv and
    manifest.json to the ground truth, log.jsonl to the cache's manifest, index.html and ufo/train.json to the
    predictions."""
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
    os.link(tmp_path / "root" / "ufo" / "train.json", tmp_path / "root" / "ufo" / "val1.json")
    links = {"report.json": "root/ufo/train.json", "duplicates.csv": "root/ufo/train.json",
             "manifest.json": "root/ufo/train.json", "log.jsonl": "cache/manifest.json", "index.html": "pred.json",
             "ufo/train.json": "pred.json", "hashes/image_hashes.json": "root/ufo/train.json"}
    for name, target in links.items():
        for kind in ("sym", "hard"):
            (tmp_path / kind / name).parent.mkdir(parents=True, exist_ok=True)
            if kind == "sym":
                (tmp_path / kind / name).symlink_to(tmp_path / target)
            else:
                os.link(tmp_path / target, tmp_path / kind / name)
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
    "build --out whose manifest.json is a link to the gt": ("cli", ["build", "--data", "{w}/root", "--out", "{w}/sym",
                                                                   "--quiet"], ("--out", "annotations of --data")),
    "build --out whose data/ is the data set": ("cli", ["build", "--data", "{w}/cache/data", "--out", "{w}/cache",
                                                       "--quiet"], ("--out", "the data set --data")),
    "build --out whose data/ holds the data set": ("cli", ["build", "--data", "{w}/cache/data/set", "--out",
                                                          "{w}/cache", "--quiet"], ("--out", "the data set --data")),
    "build --out whose image_hashes.json is a hard link to the gt": ("cli", [
        "build", "--data", "{w}/root", "--out", "{w}/hard/hashes", "--quiet"], ("--out", "annotations of --data")),
    "build --staging whose manifest.json is a hard link to the gt": ("cli", [
        "build", "--data", "{w}/root", "--out", "s3://bucket/c", "--staging", "{w}/hard", "--quiet"],
        ("--staging", "annotations of --data")),
    "convert --out over its source file": ("cli", ["convert", "--from", "mmocr", "{w}/" + GT, "--out", "{w}/root",
                                                   "--force"], ("--out", "the source SRC")),
    "train --out whose log.jsonl is a link to the cache's manifest": ("train", [
        "--cache", "{w}/cache", "--out", "{w}/sym", *TRAIN], ("--out", "the manifest of the cache")),
    "train --out over its --init-from": ("train", ["--cache", "{w}/cache", "--init-from", "{w}/run/latest.pt",
                                                   "--out", "{w}/run", *TRAIN],
                                         ("--out", "the checkpoint --init-from")),
    "train --out whose log.jsonl is a hard link to the cache's manifest": ("train", [
        "--cache", "{w}/cache", "--val-data", "{w}/root", "--out", "{w}/hard", *TRAIN],
        ("--out", "the manifest of the cache")),
    "check --out whose report.json is a link to the gt": ("cli", ["check", "--data", "{w}/root", "--out", "{w}/sym"],
                                                          ("--out", "annotations of --data")),
    "check --out whose duplicates.csv is a hard link to the gt": ("cli", [
        "check", "--data", "{w}/root", "--out", "{w}/hard"], ("--out", "annotations of --data")),
    "review --out whose index.html is a link to the predictions": ("cli", [
        "review", "--gt", "{w}/" + GT, "--pred", "{w}/pred.json", "--images", "{w}/root/images", "--out", "{w}/sym",
        "--force"], ("--out", "the predictions --pred")),
    "review --out whose index.html is a hard link to the predictions": ("cli", [
        "review", "--gt", "{w}/" + GT, "--pred", "{w}/pred.json", "--images", "{w}/root/images", "--out", "{w}/hard",
        "--force"], ("--out", "the predictions --pred")),
    "review --out whose images/ is the --images folder": ("cli", [
        "review", "--gt", "{w}/" + GT, "--pred", "{w}/pred.json", "--images", "{w}/root/images", "--out", "{w}/root",
        "--force"], ("--out", "the images --images")),
    "pseudo --out whose UFO file is a link to the predictions": ("cli", [
        "pseudo", "--pred", "{w}/pred.json", "--images", "{w}/root/images", "--out", "{w}/sym", "--force"],
        ("--out", "the predictions --pred")),
    "pseudo --out whose UFO file is a hard link to the predictions": ("cli", [
        "pseudo", "--pred", "{w}/pred.json", "--images", "{w}/root/images", "--out", "{w}/hard", "--force"],
        ("--out", "the predictions --pred")),
    "split's fold file a hard link to the split": ("cli", ["split", "--data", "{w}/root", "--folds", "2", "--force"],
                                                  ("--split", "would replace the split")),
    "train --export-onnx the checkpoint": ("train", ["--export-onnx", "{w}/ck.pt", "--checkpoint", "{w}/ck.pt"],
                                           ("--export-onnx", "the checkpoint --checkpoint")),
    "runs --plot a hard link to a run's log": ("cli", ["runs", "{w}/hard", "--plot", "{w}/cache/manifest.json"],
                                               ("--plot", "a file of run")),
}


def run(command: str, argv: list[str]) -> int:
    if command == "cli":
        from east_cache.cli import main
        return main(argv)
    if command == "predict":
        from east_cache.predict.predict import main
        return main(argv)
    from east_cache.train.train import main
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
    # a folder output that is an input folder, where none of the files it writes is one: a cache or a run beside
    # the data set's own folders overwrites nothing
    from east_cache.ingest.ufo import dataset_inputs
    from east_cache.build.outdir import BUILD_WRITES
    refuse_overwrite("--out", world / "root", dataset_inputs(world / "root", "--data"), BUILD_WRITES)
    with pytest.raises(UsageError, match="would write .*latest.pt, which is the checkpoint"):
        refuse_overwrite("--out", world / "run", [Input("the checkpoint", world / "run" / "latest.pt")], ("latest.pt",))


# The newest outputs (issue 50), each with a symbolic and a hard link: refused where the linked file is an input the
# command declares (the recipe, a run's checkpoint), else the link replaced by the door, never written through.
RECIPE = "transform:\n  __class_fullname__: Compose\n  transforms:\n  - {__class_fullname__: GaussNoise, p: 0.5}\n"
PY_RECIPE = "import albumentations as A\npipeline = A.Compose([A.GaussNoise(p=0.5)])\n"


def link(kind: str, target: Path, at: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "sym":
        at.symlink_to(target)
    else:
        os.link(target, at)
    return at


@pytest.fixture
def recipes(world) -> Path:
    (world / "aug.yaml").write_text(RECIPE)
    (world / "rec.py").write_text(PY_RECIPE)
    return world


@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_a_run_whose_log_is_a_link_to_its_recipe_is_refused(recipes, kind, capsys):
    w = recipes
    link(kind, w / "aug.yaml", w / "R" / "log.jsonl")
    before = snapshot(w)
    assert run("train", ["--cache", f"{w}/cache", "--out", f"{w}/R", "--augment", f"{w}/aug.yaml", *TRAIN]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--out" in err and "the recipe --augment" in err, err
    assert snapshot(w) == before and (w / "aug.yaml").read_text() == RECIPE


@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_a_run_whose_log_is_a_link_to_its_split_file_is_refused(recipes, kind, capsys):
    """--split FILE.json (the images a run trains on) is an input of the run: its log never writes into it."""
    w = recipes
    pick = w / "pick.json"
    pick.write_text(json.dumps({"images": {"img_0.jpg": {"words": {}}}}))
    text = pick.read_text()
    link(kind, pick, w / "R" / "log.jsonl")
    before = snapshot(w)
    assert run("train", ["--cache", f"{w}/cache", "--out", f"{w}/R", "--split", str(pick), *TRAIN]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--out" in err and "the split file --split" in err, err
    assert snapshot(w) == before and pick.read_text() == text


@pytest.mark.parametrize("kind", ["sym", "hard"])
@pytest.mark.parametrize("recipe", ["aug.yaml", "rec.py:pipeline"])
def test_a_sheet_over_its_recipe_is_refused(recipes, kind, recipe, capsys):
    w = recipes
    out = link(kind, w / recipe.partition(":")[0], w / "sheet.png")
    before = snapshot(w)
    assert run("cli", ["show", f"{w}/cache", "0", "--augment", f"{w}/{recipe}", "--epochs", "0-1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "-o" in err and "the recipe --augment" in err, err
    assert snapshot(w) == before


@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_a_plot_over_a_runs_checkpoint_is_refused(world, kind, capsys):
    w = world
    (w / "run" / "log.jsonl").write_text('{"event": "run", "config": {}}\n')
    out = link(kind, w / "run" / "latest.pt", w / "ck.png")
    before = snapshot(w)
    assert run("cli", ["runs", f"{w}/run", "--plot", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--plot" in err and "a file of run" in err, err
    assert snapshot(w) == before


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_report_json_a_link_to_a_users_file_is_replaced_not_written_through(tiny_cache, tmp_path, kind):
    pytest.importorskip("tensorboard")
    from helpers import train_run
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    link(kind, notes, tmp_path / "R" / "report.json")
    train_run(tiny_cache, tmp_path / "R", "--max-steps", "1", "--report-to", "tensorboard")
    assert notes.read_text() == '{"mine": 1}\n'
    ids = tmp_path / "R" / "report.json"
    assert not ids.is_symlink() and ids.stat().st_nlink == 1 and '"tensorboard"' in ids.read_text()
