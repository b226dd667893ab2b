"""No clash with a user's folder: the BoostCamp baseline keeps its own dataset.py beside its train.py, and users
have files named east.py or preprocess.py. Every `python -m preprocess` subcommand works from a folder holding a
dataset.py and an east.py; the installed commands and the own-loop import (`import east_cache`) work beside a
preprocess.py too, and the user's own modules stay theirs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What a hostile module does when imported: the baseline's dataset.py fails without albumentations.
HOSTILE = "raise ImportError('this is the user\\'s own {name}, not east-cache\\'s')\n"


def hostile_folder(path: Path, names=("dataset", "east")) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / f"{name}.py").write_text(HOSTILE.format(name=f"{name}.py"))
    return path


def run(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}   # this checkout, as an install would make it importable
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def console_script(bin_dir: Path, name: str) -> Path:
    """A launcher like pip's for [project.scripts] entry `name`: a file in its own folder, so that (as for an
    installed command) the working directory is not on the import path."""
    module, _, func = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][name].partition(":")
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(f"import sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    return script


@pytest.mark.slow
def test_every_module_subcommand_works_beside_a_users_dataset_and_east(tmp_path, tiny_data):
    here = hostile_folder(tmp_path / "user")
    preprocess = [sys.executable, "-m", "preprocess"]
    out = tmp_path / "cache"
    r = run([*preprocess, "build", "--data", tiny_data, "--out", out, "--image-size", "96", "--input-size", "64",
             "--jobs", "1", "--quiet"], here)
    assert r.returncode == 0, r.stderr
    for args in (["info", out], ["verify", out], ["bench", out, "--workers", "0", "--batch-sizes", "2",
                                                   "--batches", "1"],
                 ["show", out, "0", "--out", tmp_path / "show.png"]):
        r = run([*preprocess, *args], here)
        assert r.returncode == 0, (args[0], r.stderr)
        assert "user's own" not in r.stderr
    gt = tiny_data / "ufo" / "train.json"
    pred = tmp_path / "pred.json"   # the ground truth's words as predictions: points only (no legibility flags)
    images = json.loads(gt.read_text())["images"]
    pred.write_text(json.dumps({"images": {name: {"words": {k: {"points": w["points"]} for k, w in e["words"].items()}}
                                           for name, e in images.items()}}))
    r = run([*preprocess, "evaluate", "--gt", gt, "--pred", pred], here)
    assert r.returncode == 0 and "user's own" not in r.stderr, r.stderr
    r = run([*preprocess, "convert", "--help"], here)   # the one subcommand not run above (one parser holds all)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_installed_commands_work_beside_a_users_preprocess_dataset_and_east(tmp_path):
    here = hostile_folder(tmp_path / "user", ("dataset", "east", "preprocess"))
    for name in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]:
        r = run([sys.executable, console_script(tmp_path / "bin", name), "--help"], here)
        assert r.returncode == 0 and r.stdout.startswith("usage:"), (name, r.stderr)


@pytest.mark.slow
def test_an_own_loop_imports_east_cache_beside_the_baselines_files(tmp_path, tiny_cache):
    """A user's train.py in the baseline's folder reads a cache through `east_cache`, and its own `dataset` (and
    east, preprocess) modules are still the user's."""
    here = tmp_path / "user"
    here.mkdir()
    for name in ("dataset", "east", "preprocess"):
        (here / f"{name}.py").write_text(f"WHOSE = 'user'\n")
    (here / "train.py").write_text(
        "import dataset, east, preprocess\n"
        "from east_cache import CacheDataset, Loader\n"
        f"item = CacheDataset({str(tiny_cache)!r})[0]\n"
        f"for img, gt_score_map, gt_geo_map, roi_mask in Loader({str(tiny_cache)!r}, batch_size=2):\n"
        "    print(tuple(img.shape), tuple(gt_geo_map.shape))\n"
        "assert (dataset.WHOSE, east.WHOSE, preprocess.WHOSE) == ('user',) * 3\n"
        "print(sorted(item))\n")
    r = run([sys.executable, "train.py"], here)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["(2, 3, 64, 64) (2, 5, 32, 32)", "['geo', 'image', 'roi', 'score']"], r.stdout
