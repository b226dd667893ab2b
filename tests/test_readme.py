"""Every command the README shows runs, in the order a reader meets them, on data the test makes: the set-up's
main job, the quick starts, the path to a submission, the own loop, a bucket (a local S3 server) and the inline
commands. Each command runs through its command's main() in this process, from the reader's folder (an interpreter
and torch started per command cost seconds each); the set-up's first command runs as the process a user starts
(`python -m preprocess`), and torchrun's line as torchrun. Where a command would train for long or at full size,
flags that shorten it replace the README's or are added, listed in FAST. `.ci/run` runs the set-up's
install and test lines."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import with_flags

from east_cache import cli
from east_cache.train import train
from east_cache.predict import predict
from east_cache.tools.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
ENTRY = {"east-cache": [sys.executable, "-m", "preprocess"], "east-train": [sys.executable, str(REPO / "train.py")],
         "east-predict": [sys.executable, str(REPO / "predict.py")],
         "torchrun": [sys.executable, "-m", "torch.distributed.run"]}
MAINS = {"east-cache": cli.main, "east-train": train.main, "east-predict": predict.main}
# flags that shorten a command (each replaces the README's value of the same flag, else is appended): small pages
# and crops, one training step on the CPU without a download. A batch of 1 leaves that step inside the first epoch
# of every training set here, as the CPU check run stops inside a real set's first epoch: the best.pt the README
# predicts with must exist after such a run too
FAST = {"build": ["--image-size", "160", "--input-size", "64", "--jobs", "1", "--quiet"],
        "east-train": ["--max-steps", "1", "--batch-size", "1", "--workers", "0",
                       "--backbone-weights", "random", "--device", "cpu"],
        "east-predict": ["--image-size", "160", "--device", "cpu", "--quiet"],
        "bench": ["--workers", "0", "--batch-sizes", "2", "--batches", "1"]}
FOLDS = 5   # the data-centric loop's `split --folds`: the receipts' training images, one per fold
# exit statuses a command may end with here: `check` says with 1 that it found something (the sample set's words
# stick out of their pages on purpose)
FOUND = {"check": (0, 1)}
SET_UP_ONLY = ("git ", "cd ", "pip ", "python -m pytest")   # .ci/run's part: install, then the tests


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def commands(block: str) -> list[str]:
    """A bash block's commands: comments dropped, `&&` chains split."""
    out = []
    for line in block.splitlines():
        line = line.split("   #")[0].split(" || ")[0].strip()   # `|| [ $? = 1 ]`: the statuses FOUND allows
        out += [c.strip() for c in line.split("&&") if c.strip()]
    return out


def argv(command: str, bucket: str | None = None) -> list[str]:
    """The command as this test runs it: its entry point, the README's arguments, then FAST's for its kind."""
    if bucket:
        command = command.replace("s3://bucket/", f"{bucket}/").replace("/scratch", "scratch")
    words = shlex.split(command)
    if words[0] == "torchrun":   # one process on one machine here: the flags after train.py are the README's
        at = words.index("train.py")
        return [*ENTRY["torchrun"], "--nnodes", "1", "--nproc_per_node", "1", str(REPO / "train.py"),
                *with_flags(words[at + 1:], FAST["east-train"])]
    args = words[1:]
    extra = FAST.get(args[0] if words[0] == "east-cache" else words[0], [])
    return [*ENTRY[words[0]], *with_flags(args, extra)]


def run(command: str, cwd: Path, bucket: str | None = None, process: bool = False) -> None:
    """The command from the folder cwd: through its main() in this process, or as a process of its own (process,
    and torchrun's line)."""
    args = argv(command, bucket)
    if process or command.startswith("torchrun"):
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
        return
    entry = shlex.split(command)[0]
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        mp.chdir(cwd)
        status = MAINS[entry](args[len(ENTRY[entry]):])
    assert status in FOUND.get(args[len(ENTRY[entry])] if entry == "east-cache" else entry, (0,)), \
        f"{command}\n{err.getvalue()[-2000:]}"


def make_data(here: Path) -> None:
    """What the quick starts' commands read: data/receipts (train, of FOLDS images for the loop's split, val,
    test), data/ic15 (train, val), an ICDAR 2015 set (ic15_gt/gt_NAME.txt beside ic15_images/NAME.jpg) and the
    loop's unlabelled images, data/unlabelled (copies of the receipts' test images under other names)."""
    for root, splits in (("receipts", ("train", "val", "test")), ("ic15", ("train", "val"))):
        for split in splits:
            n = FOLDS if (root, split) == ("receipts", "train") else 2
            write_sample_dataset(here / "data" / root, n_images=n, words_per_page=6, page_size=(200, 150),
                                 seed=len(split), split=split)
    (here / "data" / "unlabelled").mkdir()
    for name in json.loads((here / "data" / "receipts" / "ufo" / "test.json").read_text())["images"]:
        (here / "data" / "unlabelled" / f"new_{name}").write_bytes((here / "data" / "receipts" / "images" / name)
                                                                 .read_bytes())
    (here / "ic15_gt").mkdir()
    (here / "ic15_images").mkdir()
    for name, entry in json.loads((here / "data" / "ic15" / "ufo" / "train.json").read_text())["images"].items():
        (here / "ic15_images" / name).write_bytes((here / "data" / "ic15" / "images" / name).read_bytes())
        lines = [",".join(str(round(v)) for p in w["points"][:4] for v in p) + "," + (w.get("transcription") or "x")
                 for w in entry["words"].values() if len(w["points"]) == 4]
        (here / "ic15_gt" / f"gt_{Path(name).stem}.txt").write_text("\n".join(lines) + "\n")


def bash_blocks_with(word: str) -> list[str]:
    return [b for b in blocks("bash") if word in b]


@pytest.mark.slow
def test_the_set_up_and_every_quick_start_command_runs(tmp_path):
    here = tmp_path / "user"
    here.mkdir()
    set_up = [c for c in commands(bash_blocks_with("pip install")[0]) if not c.startswith(SET_UP_ONLY)]
    assert set_up[0].startswith("east-cache build") and set_up[1].startswith("east-train")
    run(set_up[0], here, process=True)   # the built-in sample set into cache/, as the process a user starts
    run(set_up[1], here)
    assert (here / "cache" / "manifest.json").is_file() and (here / "runs" / "east" / "latest.pt").is_file()

    make_data(here)
    (recipe,) = blocks("yaml")   # the own-transforms section's aug.yaml
    (here / "aug.yaml").write_text(recipe)
    quick = [c for b in blocks("bash") if not any(w in b for w in ("pip install", "s3://", LOOP))
             for c in commands(b)]
    assert any("convert --from icdar2015" in c for c in quick) and any(c.startswith("east-predict") for c in quick)
    for command in quick:
        run(command, here)
    assert json.loads((here / "predictions.json").read_text())["images"]
    assert (here / "sheet.png").is_file() and (here / "runs" / "augment" / "latest.pt").is_file()
    inline = sorted(set(re.findall(r"`(east-cache (?:info|show|verify|bench) CACHE[^`]*)`", README)))
    assert len(inline) == 4, inline
    for command in inline:
        run(command.replace("CACHE", "cache/receipts"), here)
    assert (here / "crop.png").is_file()


# the BoostCamp baseline's own top-level modules, beside which the README's loop must run unchanged
BASELINE_FILES = {"dataset.py": "class SceneTextDataset:\n    pass\n", "model.py": "class EAST:\n    pass\n",
                  "loss.py": "class EASTLoss:\n    pass\n"}
OWN_LOOP_EPOCHS = "range(50)"   # the README's epoch count, which the test replaces by 2


@pytest.mark.slow
def test_the_own_loop_runs_as_pasted_beside_the_baseline(tmp_path):
    """The README's loop pasted into a file of a folder like the baseline's (its own dataset.py, model.py,
    loss.py) and run there as a script: two epochs, then its loss is finite."""
    here = tmp_path / "baseline"
    here.mkdir()
    make_data(here)
    run("east-cache build --data data/receipts --split train --out cache/receipts", here)
    for name, text in BASELINE_FILES.items():
        (here / name).write_text(text)
    (code,) = blocks("python")
    assert code.count(OWN_LOOP_EPOCHS) == 1
    check = "\nassert epoch == 1 and torch.isfinite(loss), loss\nprint('trained', epoch + 1, 'epochs')\n"
    (here / "own_loop.py").write_text(code.replace(OWN_LOOP_EPOCHS, "range(2)") + check)
    done = subprocess.run([sys.executable, "own_loop.py"], cwd=here, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "trained 2 epochs" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_the_bucket_commands_run_against_a_local_s3_server(s3, tmp_path):
    here = tmp_path / "user"
    here.mkdir()
    make_data(here)
    s3.fs().put(str(here / "data" / "receipts"), s3.url("receipts"), recursive=True)
    (block,) = bash_blocks_with("s3://")
    for command in commands(block):
        run(command, here, bucket=s3.url())
    assert s3.fs().exists(s3.url("cache", "receipts", "manifest.json"))


LOOP = "for k in 0 1 2 3 4; do"   # the data-centric loop's block: run by bash as pasted


@pytest.mark.slow
def test_the_data_centric_loop_pastes_end_to_end_under_set_e(tmp_path):
    """The README's loop as pasted, under `set -e`, by bash (its for loop over the folds, brace expansions), on a
    root with ufo/train.json and ufo/val.json and a folder of unlabelled images: each command through its main() in
    a process of its own (tests/readme_entry.py: FAST's flags in place of the README's), the block's text as it is.
    One build serves the five folds' runs and the mixed one; `split` then the build computes nothing."""
    here = tmp_path / "user"
    here.mkdir()
    make_data(here)
    (block,) = bash_blocks_with(LOOP)
    entry = REPO / "tests" / "readme_entry.py"
    shims = "".join(f'{name}() {{ "{sys.executable}" "{entry}" {name} "$@"; }}\n'
                    for name in ("east-cache", "east-train", "east-predict"))
    done = subprocess.run(["bash", "-c", "set -e\n" + shims + block], cwd=here, capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}",
                                             "EAST_README_FAST": json.dumps(FAST)})
    assert done.returncode == 0, done.stderr[-3000:]
    for k in range(FOLDS):
        assert (here / "runs" / f"fold{k}" / "best.pt").is_file() and (here / f"val_fold{k}.json").is_file()
        header = json.loads((here / "runs" / f"fold{k}" / "log.jsonl").read_text().splitlines()[0])
        assert header["selection"]["split"] == f"train{k}"
    mixed = json.loads((here / "runs" / "mix" / "log.jsonl").read_text().splitlines()[0])["selection"]
    assert mixed["repeat"] == {"pseudo": 0.5} and set(mixed["sources"]) == {"receipts", "pseudo"}   # (a model of
    # one step labels no word: the root's images are left out, and the build says so)
    assert json.loads((here / "val_fused.json").read_text())["predicted_by"]["program"] == "east-cache ensemble"
    assert json.loads((here / "val_models.json").read_text())["images"]
    assert "pseudo_labels" in json.loads((here / "data" / "pseudo" / "ufo" / "train.json").read_text())
    assert json.loads((here / "check" / "report.json").read_text())["images"]
    assert (here / "review" / "index.html").is_file()   # the loop's review of fold 0's validation images


@pytest.mark.slow
def test_the_loops_check_line_pastes_under_set_e(sample_root, tmp_path):
    """The data-centric loop pasted into a script under `set -e`: `check` on a set with anomalies (the sample set's,
    made on purpose) exits 1 and the script goes on; a mistake (no such root, status 2) still stops it."""
    (line,) = [c for c in bash_blocks_with("east-cache check")[0].splitlines() if c.startswith("east-cache check")]
    line = line.split("   #")[0]
    shim = f'set -e\neast-cache() {{ "{sys.executable}" -m preprocess "$@"; }}\n'
    for root, goes_on in ((sample_root, True), (tmp_path / "nowhere", False)):
        script = shim + line.replace("data/receipts", str(root)) + "\necho went on\n"
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert ("went on" in done.stdout) == goes_on and (done.returncode == 0) == goes_on, done.stderr[-2000:]
    assert json.loads((tmp_path / "check" / "report.json").read_text())["anomalies"], "the sample set's, found"


def test_the_readme_says_the_sample_set_is_generated_and_ignored_by_git():
    """`sample_data/` is no file of the repository: the first build without --data writes it (cli.py, `no --data
    given`), and git ignores it; the README said `built-in`."""
    text = " ".join(README.split())
    assert "built-in" not in text.split("## Quick start")[0], "the set-up calls the generated set built-in"
    assert "generates into `sample_data/` the first time (git ignores it)" in text
    assert "sample_data/" in (REPO / ".gitignore").read_text().split()
    from east_cache.tools.sampledata import DEFAULT_SAMPLE_DIR
    assert str(DEFAULT_SAMPLE_DIR) == "sample_data"


def test_the_readme_states_the_check_runs_limits_as_train_keeps_them():
    """A check run of at most 20 steps or 120 s of training: it stops before a step that would pass 120 s (it ran
    126 s, stopping after the step that crossed; tests/test_train.py checks the stop)."""
    from east_cache.train.config import CPU_BUDGET_SECONDS, CPU_BUDGET_STEPS
    text = " ".join(README.split())
    assert (f"a check run of at most {CPU_BUDGET_STEPS} steps or {CPU_BUDGET_SECONDS:g} s of training (it stops before "
            f"a step that would pass {CPU_BUDGET_SECONDS:g} s)") in text


def test_the_readme_states_the_measured_time_of_the_fast_tests():
    """`python -m pytest` took 125 s of pytest time and 2m13s of wall time on two cores beside another process,
    where the README promised under two minutes: it states the measured figures (CPU time, and the wall time on two
    shared cores) in the Tests section, which the set-up points to."""
    text = " ".join(README.split())
    assert "under two minutes" not in text
    assert "runs about 1,500 fast tests in about a minute (65 s of CPU time, 63-72 s of wall time on two cores)" in text
