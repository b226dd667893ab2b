"""Hostile situations past the build, kept as promises: every convert format names a malformed source's file (and
line or entry); predictions stay inside the displayed image whatever the file (EXIF-turned, CMYK, 16-bit); a
checkpoint killed while it is written, or right after its rename, leaves a latest.pt that loads and resumes;
--keep-last keeps the newest epochs with latest.pt and best.pt whole; evaluate says what a ground-truth file lacks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, epochs_of, run_args, train_run
from PIL import Image

from east_cache import cli
from east_cache.convert import FORMATS
from east_cache.train import checkpoint
from east_cache.predict import weights
from east_cache.train.config import TrainConfig
from east_cache.predict.pages import pages_from_folder
from east_cache.predict.predict import PredictConfig, predict, write_predictions
from east_cache.evaluate.scoring import PREDICTED_BY

CPU = torch.device("cpu")
SIZE = (120, 80)   # px, the displayed width and height of every test image
BAD_QUAD = "10,10,70,oops,70,30,10,30,bad"


def picture(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", SIZE, (200, 200, 200)).save(path)


def malformed_source(fmt: str, d: Path) -> tuple[Path, str, list[str]]:
    """(SRC for `convert --from fmt`, the file:line or file the error must name, more flags): a source of that format
    with one malformed annotation, beside a good image."""
    if fmt == "icdar2015":
        picture(d / "img" / "img_1.jpg")
        (d / "gt").mkdir()
        (d / "gt" / "gt_img_1.txt").write_text(f"10,10,70,10,70,30,10,30,ok\n{BAD_QUAD}\n")
        return d / "gt", "gt_img_1.txt:2", ["--images", str(d / "img")]
    if fmt in ("sroie", "icdar2013", "polygon"):
        picture(d / "a.jpg")
        name = "gt_a.txt" if fmt == "icdar2013" else "a.txt"
        line = {"sroie": BAD_QUAD, "icdar2013": '10 10 70 oops "x"', "polygon": "1,2,oops,4,5,6,####a"}[fmt]
        (d / name).write_text(line + "\n")
        return d, f"{name}:1", []
    picture(d / "a.jpg")
    if fmt == "mmocr":
        (d / "t.json").write_text('{"metainfo": {}, "data_list": [{"img_path": "a.jpg", "instances": []}]')
        return d / "t.json", "t.json: invalid JSON at line 1", []
    if fmt == "wildreceipt":
        (d / "train.txt").write_text('{"file_name": "a.jpg", "annotations": 5}\n')
        return d / "train.txt", "train.txt:1", []
    if fmt == "cord":
        picture(d / "image" / "r.png")
        (d / "json").mkdir()
        (d / "json" / "r.json").write_text('{"valid_line": [{"words": [{"quad": 3}]}]}')
        return d, "r.json: valid_line[0].words[0]", []
    if fmt == "cocotext":
        (d / "C.json").write_text(json.dumps({"imgs": {"1": {"file_name": "a.jpg", "set": "train"}},
                                              "anns": {"2": {"image_id": 1, "bbox": "x"}}, "imgToAnns": {"1": [2]}}))
        return d / "C.json", "C.json: anns[2]", []
    (d / "poly_gt_a.txt").write_text("x: [[1 2 oops]], y: [[1 2 3]], ornt: [u'c'], transcriptions: [u'a']\n")
    return d, "poly_gt_a.txt:1", []


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_convert_format_names_a_malformed_source(fmt, tmp_path, capsys):
    src, named, flags = malformed_source(fmt, tmp_path / "src")
    assert cli.main(["convert", "--from", fmt, str(src), "--out", str(tmp_path / "root"), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "root").exists(), "nothing is written"


class Everywhere:
    """A model that sees a word at every map pixel, 300 px from each edge: every quad reaches far past the image."""

    def __call__(self, x):
        h, w = x.shape[2] // 2, x.shape[3] // 2
        geo = torch.zeros(len(x), 5, h, w)
        geo[:, :4] = 300.0
        return torch.ones(len(x), 1, h, w), geo


def displayed_image(folder: Path, kind: str) -> None:
    """A SIZE image as a viewer shows it, stored as kind: a JPEG turned 90 degrees with an EXIF orientation, a CMYK
    JPEG, or a 16-bit grey PNG."""
    rgb = Image.new("RGB", SIZE, (200, 180, 160))
    if kind == "exif":
        exif = Image.Exif()
        exif[0x0112] = 6   # the viewer turns the stored (80 x 120) pixels 90 degrees clockwise
        rgb.transpose(Image.Transpose.ROTATE_90).save(folder / "page.jpg", exif=exif)
    elif kind == "cmyk":
        rgb.convert("CMYK").save(folder / "page.jpg")
    else:
        Image.fromarray(np.full(SIZE[::-1], 40000, np.uint16)).save(folder / "page.png")


@pytest.mark.parametrize("kind", ["exif", "cmyk", "16-bit"])
def test_predictions_stay_inside_the_displayed_image(kind, tmp_path):
    displayed_image(tmp_path, kind)
    pages, bad = pages_from_folder(tmp_path)
    assert not bad and [(p.width, p.height) for p in pages] == [SIZE]
    results, _ = predict(Everywhere(), pages, PredictConfig(image_size=128, map_scale=0.5), CPU, progress=False)
    quads = next(iter(results.values()))[0]
    assert len(quads) and quads.min() >= 0 and (quads[..., 0].max(), quads[..., 1].max()) <= SIZE
    assert (quads[..., 0].max(), quads[..., 1].max()) == SIZE, "clipped to the edge, not dropped"
    write_predictions(tmp_path / "p.json", results)
    written = np.array([w["points"] for w in json.loads((tmp_path / "p.json").read_text())["images"][pages[0].name]
                        ["words"].values()])
    assert written.min() >= 0 and written[..., 0].max() <= SIZE[0] and written[..., 1].max() <= SIZE[1]


def test_prune_keeps_the_newest_epochs_and_the_links(tmp_path):
    for n in range(1, 6):
        (tmp_path / f"epoch_{n}.pt").write_text(str(n))
    (tmp_path / "epoch_6_step_40.pt").write_text("cut")
    checkpoint.link_as(tmp_path / "epoch_2.pt", weights.BEST)
    checkpoint.link_as(tmp_path / "epoch_5.pt", weights.LATEST)
    removed = checkpoint.prune(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["epoch_1.pt", "epoch_2.pt", "epoch_3.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch_4.pt", "epoch_5.pt", "epoch_6_step_40.pt",
                                                         "latest.pt"]
    assert (tmp_path / "best.pt").read_text() == "2", "best.pt outlives the epoch file it was"
    assert checkpoint.prune(tmp_path, 0) == [], "0 keeps every epoch"


def test_keep_last_also_removes_a_checkpoint_saved_inside_an_epoch_once_a_later_one_is_complete(tmp_path):
    """A Ctrl-C inside epoch 2 saved epoch_2_step_7.pt; the run resumed from it finished epochs 2 and 3: the cut
    file is superseded, whichever run saved it."""
    for name in ("epoch_1.pt", "epoch_2_step_7.pt", "epoch_2.pt", "epoch_3.pt", "epoch_4_step_12.pt"):
        (tmp_path / name).write_text(name)
    removed = checkpoint.prune(tmp_path, 3)
    assert sorted(p.name for p in removed) == ["epoch_2_step_7.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_1.pt", "epoch_2.pt", "epoch_3.pt",
                                                         "epoch_4_step_12.pt"], "a cut epoch newer than any stays"


def test_the_start_up_line_promises_best_pt_only_where_validation_makes_one(tiny_cache):
    from east_cache.train.config import RunState
    from east_cache.predict.device import Runtime
    from east_cache.train.started import started_lines
    from east_cache.reader import CacheDataset
    ds = CacheDataset(tiny_cache)
    for over, promised in (({}, False), ({"val_cache": tiny_cache}, True), ({"val_data": tiny_cache}, False),
                           ({"val_data": tiny_cache, "eval_every": 1}, True)):
        line = started_lines(TrainConfig(cache=tiny_cache, workers=0, **over), Runtime(), ds, "random", RunState(), 2,
                             "disk")[-1]
        assert ("best.pt" in line) == promised, (over, line)


def test_the_command_that_goes_on_after_an_init_from_run_is_pasteable(tmp_path):
    argv = ["--cache", "c", "--init-from", "old/latest.pt", "--out", "run", "--init-from=x.pt", "--epochs", "3"]
    cmd = checkpoint.resume_command(argv, tmp_path / "run" / "latest.pt", 1)
    assert "--init-from" not in cmd
    assert cmd.endswith(f"--cache c --out run --epochs 3 --resume {tmp_path}/run/latest.pt")


def test_best_is_judged_by_hmean_with_detection_metrics_else_by_validation_loss():
    cfg = TrainConfig(eval_every=1)
    assert checkpoint.validation_score({"hmean": 0.5, "val_loss": 2.0}, cfg) == ("hmean", 0.5)
    assert checkpoint.validation_score({"val_loss": 2.0}, cfg) is None, "an epoch without metrics does not compete"
    assert checkpoint.validation_score({"val_loss": 2.0}, TrainConfig(val_cache=Path("v"))) == ("val_loss", 2.0)
    assert checkpoint.validation_score({"loss": 2.0}, TrainConfig()) is None
    best = {"metric": "hmean", "value": 0.5, "epoch": 3}
    assert checkpoint.improves(("hmean", 0.6), best) and not checkpoint.improves(("hmean", 0.4), best)
    assert checkpoint.improves(("val_loss", 1.0), {"metric": "val_loss", "value": 2.0, "epoch": 1})
    assert not checkpoint.improves(("val_loss", 3.0), {"metric": "val_loss", "value": 2.0, "epoch": 1})


@pytest.mark.slow
def test_keep_last_keeps_the_newest_epochs_and_best_is_the_best_validation(tiny_cache, tmp_path, capsys):
    log = train_run(tiny_cache, tmp_path, "--epochs", "4", "--keep-last", "2", "--val-cache", str(tiny_cache),
                    "--eval-every", "0")
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["best.pt", "epoch_3.pt", "epoch_4.pt", "latest.pt"]
    losses = {r["epoch"]: r["val_loss"] for r in epochs_of(log)}
    best = torch.load(tmp_path / "best.pt", weights_only=True)
    assert best["epoch"] == min(losses, key=losses.get) and best["best"]["value"] == min(losses.values())
    output = [line for line in capsys.readouterr().out.splitlines() if line.startswith("output: ")]
    assert "keeping the newest 2, latest.pt and best.pt; about" in output[0] and "GB free" in output[0], output


KILLED = """
import os, signal, sys, torch
from east_cache.train import checkpoint, train
saves, real_save, real_replace = [], torch.save, os.replace
def save(obj, path):   # the second checkpoint dies halfway through its write
    saves.append(path)
    if len(saves) == 2 and sys.argv[1] == "inside torch.save":
        real_save(obj, path)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    real_save(obj, path)
def replace(src, dst):   # the second checkpoint dies right after latest.pt is renamed into place
    real_replace(src, dst)
    if len(saves) == 2 and str(dst).endswith("latest.pt") and sys.argv[1] == "after the rename":
        os.kill(os.getpid(), signal.SIGKILL)
torch.save, checkpoint.os.replace = save, replace
train.run(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["inside torch.save", "after the rename"])
def test_latest_loads_and_resumes_after_a_kill_while_saving(moment, tiny_cache, tmp_path):
    out = tmp_path / "run"
    flags = run_args(tiny_cache, out, "--epochs", "3", "--batch-size", "1")
    r = subprocess.run([sys.executable, "-c", KILLED, moment, *flags], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == -9, r.stderr
    latest = weights.load_checkpoint(out / "latest.pt")
    assert latest["epoch"] == (1 if moment == "inside torch.save" else 2)
    assert not list(out.glob("*.tmp")) or moment == "inside torch.save", "a finished save leaves no temp file"
    log = train_run(tiny_cache, out, "--epochs", "3", "--batch-size", "1", "--resume", str(out / "latest.pt"))
    assert epochs_of(log)[-1]["epoch"] == 3


def test_evaluate_says_what_the_ground_truth_lacks(tmp_path, capsys):
    box = [[1, 1], [30, 1], [30, 9], [1, 9]]
    (tmp_path / "gt.json").write_text(json.dumps({"images": {"a.jpg": {"words": {"1": {"points": box}}},
                                                            "b.jpg": {"img_w": 9, "img_h": 9, "words": {}}}}))
    predicted = {"a.jpg": {"words": {"1": {"points": box}}}}
    (tmp_path / "p.json").write_text(json.dumps({PREDICTED_BY: {}, "images": predicted}))
    assert cli.main(["evaluate", "--gt", str(tmp_path / "gt.json"), "--pred", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("warning: --gt ") for line in err), err
    assert "1 of 2 images state no img_w / img_h" in err[0] and "no image has a word with an \"illegibility\"" in err[1]


def test_predict_scales_are_bounded_before_any_allocation(tmp_path, capsys):
    """--scales 1000000000 allocated 1.73 EiB (numpy's _ArrayMemoryError): the sizes are bounded where they are
    parsed (bounds.MAX_IMAGE_SIDE), before a checkpoint or an image is read."""
    from east_cache.bounds import MAX_IMAGE_SIDE
    from east_cache.predict.predict import main as predict_main
    for flags in (["--scales", "1000000000"], ["--scales", f"64,{MAX_IMAGE_SIDE + 32}"], ["--image-size", "10**9"],
                  ["--image-size", str(2 * MAX_IMAGE_SIDE)]):
        with pytest.raises(SystemExit) as e:   # a usage error: one line, exit status 2
            predict_main(["--checkpoint", str(tmp_path / "none.pt"), "--images", str(tmp_path), "--out",
                          str(tmp_path / "p.json"), *flags])
        rc = e.value.code
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and flags[0] in err and str(MAX_IMAGE_SIDE) in err, err


@pytest.mark.slow
def test_a_checkpoint_recording_a_huge_image_size_is_named_before_any_image_is_sized(tmp_path, capsys):
    from east_cache.model.model import EAST
    from east_cache.predict.predict import main as predict_main
    (tmp_path / "images").mkdir()
    displayed_image(tmp_path / "images", "16-bit")
    ck = tmp_path / "ck.pt"
    torch.save({"model": EAST(0.5).state_dict(), "epoch": 1,
                "config": {"image_size": 10**9, "input_size": 64, "map_scale": 0.5}}, ck)
    rc = predict_main(["--checkpoint", str(ck), "--images", str(tmp_path / "images"), "--out", str(tmp_path / "p.json"),
                       "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and str(ck) in err and "image_size 1000000000" in err, err
