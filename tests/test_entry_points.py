"""One rule at every entry point: a failure that is the user's input, environment or a killed helper process ends in
one `error: ...` line naming the thing and what to do, exit status 2 (130 on Ctrl-C); a traceback only for our own
bugs, or with --debug / EAST_CACHE_DEBUG=1. Each case of CASES runs in this process (fast); for the form a user
sees, a usage error and an error of the run of each entry point run as a process of its own (slow): `python -m
preprocess`, `python train.py`, `python predict.py`; and train.py under torchrun, and with a loader worker killed."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import INTERRUPTS, REPO, edit_ufo, first_image, make_tiny_cache, run_args, train_run

from east_cache import cli, errors
from east_cache.train import checkpoint, train
from east_cache.predict import predict
from east_cache.model.model import EAST
from east_cache.reader import CacheDataset

TIMEOUT_S = 300
COMMANDS = {"east-cache": [sys.executable, "-m", "preprocess"], "east-train": [sys.executable, str(REPO / "train.py")],
            "east-predict": [sys.executable, str(REPO / "predict.py")]}
MAINS = {"east-cache": cli.main, "east-train": train.main, "east-predict": predict.main}


def ufo(path: Path, images: dict, **top) -> Path:
    path.write_text(json.dumps({**top, "images": images}))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_data, tiny_cache) -> dict[str, str]:
    """The paths the cases name: a file of the user's, a checkpoint, caches, ground truth and predictions."""
    d = tmp_path_factory.mktemp("entry")
    (d / "notes.txt").write_text("mine")
    cfg = CacheDataset(tiny_cache).config
    base = {"model": EAST(cfg.map_scale).state_dict(), "config": cfg.to_dict(), "epoch": 1}
    torch.save(base, d / "old.pt")   # no `trained_on`: written before it was recorded
    elsewhere = {"cache": "/data/other_cache", "samples": "0" * 32, "images": 9, "input_size": cfg.input_size,
                 "map_scale": cfg.map_scale}
    torch.save({**base, "trained_on": elsewhere}, d / "other.pt")
    box = [[1, 1], [30, 1], [30, 9], [1, 9]]
    legible = {"1": {"points": box, "illegibility": False}}
    gt = ufo(d / "gt.json", {"a.jpg": {"img_w": 64, "img_h": 48, "words": legible}})
    pred = ufo(d / "pred.json", {"a.jpg": {"words": {"1": {"points": box}}}}, predicted_by={"program": "east-predict"})
    return {"dir": str(d), "notes": str(d / "notes.txt"), "old": str(d / "old.pt"), "other": str(d / "other.pt"),
            "cache": str(tiny_cache), "data": str(tiny_data), "gt": str(gt), "pred": str(pred)}


# (entry point, arguments with {name} for world's paths, what the one line says)
CASES = [
    ("east-train", "--cache {cache} --out {notes}", r"--out \S*notes\.txt: a file is there; pass the path of a folder"),
    ("east-train", "--cache {cache} --out {notes}/run", r"notes\.txt is a file, so nothing can be made inside it"),
    ("east-train", "--epochs x", r"argument --epochs: 'x': must be an integer >= 1; see `.*--help`"),
    ("east-train", "--cache {dir}/nothing --out {dir}/run", r"nothing: no finished cache here"),
    ("east-train", "--cache {cache} --out {dir}/run --resume {dir}/nope.pt",
     r"--resume \S*nope\.pt: no such checkpoint"),
    ("east-train", "--cache {cache} --out {dir}/run --resume {other} --init-from {other}", r"pass one of them"),
    ("east-train", "--cache {cache} --out {dir}/run --resume {other} --backbone-weights random",
     r"--resume \S*other\.pt: it was trained on /data/other_cache \(9 images, 64 px\), but --cache \S+ holds another "
     r"sample set \(2 images, 64 px\); resume with --cache /data/other_cache, or .* --init-from \S*other\.pt"),
    ("east-train", "--export-onnx {dir} --checkpoint {old}", r"--export-onnx \S+: a folder is there"),
    ("east-train", "--cache {dir}/nothing --out {dir}/run --val-data {data} --val-split nosuch",
     r"ufo/nosuch\.json: UFO file not found; .*; the splits there: train$"),
    ("east-predict", "--checkpoint {old} --data {data} --split train --out {dir}",
     r"--out \S+: a folder is there; pass the path of a file"),
    ("east-predict", "--checkpoint {old} --data {data} --split train --out {notes}/p.json", r"notes\.txt is a file"),
    ("east-predict", "--checkpoint {dir}/nope.pt --data {data} --split train --out {dir}/p.json",
     r"nope\.pt: no such checkpoint"),
    ("east-predict", "--checkpoint {old} --data {data} --split nosuch --out {dir}/p.json",
     r"ufo/nosuch\.json: UFO file not found; .*; the splits there: train$"),
    ("east-predict", "--checkpoint {old} --images {dir} --batch-size x", r"argument --batch-size: 'x': must be an integer >= 1"),
    ("east-cache", "evaluate --gt {pred} --pred {gt}", r"--gt \S*pred\.json: this is a predictions file .*; the order "
                                                        r"is east-cache evaluate --gt ROOT/ufo/SPLIT\.json --pred"),
    ("east-cache", "evaluate --gt {gt} --pred {gt}", r"--pred \S*gt\.json: looks like ground truth \(image 'a\.jpg', "
                                                     r"word '1' has an \"illegibility\" flag"),
    ("east-cache", "evaluate --gt {dir}/none.json --pred {pred}", r"none\.json: cannot read the file"),
    ("east-cache", "evaluate --gt {gt} --pred {pred} --per-image {dir}", r"--per-image \S+: a folder is there"),
    ("east-cache", "build --data {data} --out {dir}/c --input-size 100",
     r"--input-size 100 must be a positive multiple"),
    ("east-cache", "info {dir}/nothing", r"nothing: no finished cache here"),
    ("east-cache", "info", r"the following arguments are required: cache; see `.*info --help`"),
]
IDS = [f"{entry}-{i}" for i, (entry, _, _) in enumerate(CASES)]
# as a process of its own: a usage error and an error of the run for each entry point (every case runs in process)
AS_COMMAND = [pytest.param(*CASES[i], id=IDS[i]) for i in (2, 3, 11, 13, 15, 20)]


def argv(args: str, world: dict) -> list[str]:
    return args.format(**world).split(" ")


def assert_one_line(status: int, err: str, expect: str, want_status: int = errors.EXIT_USER) -> None:
    assert status == want_status, err
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert re.search(expect, lines[0]), (expect, lines[0])


@pytest.mark.parametrize("entry, args, expect", CASES, ids=IDS)
def test_a_failure_is_one_line_in_process(entry, args, expect, world, capsys):
    try:
        status = MAINS[entry](argv(args, world))
    except SystemExit as e:   # argparse's: a usage error is one line too
        status = e.code
    assert_one_line(status, capsys.readouterr().err, expect)


@pytest.mark.slow
@pytest.mark.parametrize("entry, args, expect", AS_COMMAND)
def test_a_failure_is_one_line_as_a_command(entry, args, expect, world):
    r = subprocess.run([*COMMANDS[entry], *argv(args, world)], cwd=world["dir"], capture_output=True, text=True,
                       timeout=TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert_one_line(r.returncode, r.stderr, expect)


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback_of_a_users_error(how, world, monkeypatch):
    flags = argv("--cache {cache} --out {notes}", world)
    if how == "flag":
        flags.append("--debug")
    else:
        monkeypatch.setenv(errors.DEBUG_ENV, "1")
    with pytest.raises(errors.UsageError, match="a file is there"):
        train.main(flags)


def test_our_own_bug_keeps_its_traceback(world, monkeypatch):
    monkeypatch.setattr(predict, "pages_from_split", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        predict.main(argv("--checkpoint {old} --data {data} --split train --out {dir}/p.json", world))


@INTERRUPTS
@pytest.mark.parametrize("entry", sorted(MAINS))
def test_ctrl_c_is_status_130_and_one_line(entry, interrupt, world, monkeypatch, capsys):
    module, name, flags = {"east-cache": (cli, "cmd_info", "info {cache}"),
                           "east-train": (train, "train", "--cache {cache} --out {dir}/run --backbone-weights random"),
                           "east-predict": (predict, "predict_passes", "--checkpoint {old} --data {data} --split train "
                                                                "--out {dir}/p.json")}[entry]
    monkeypatch.setattr(module, name, interrupt)
    assert MAINS[entry](argv(flags, world)) == errors.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err, err


def test_an_error_over_an_interrupt_of_its_own_line_says_that_line(capsys):
    """A cleanup failing as the build's Ctrl-C after its commit unwinds: the line says the new cache is complete,
    not the command's generic line (for a build: that the previous cache is intact)."""
    def body():
        try:
            raise errors.BuildInterrupted()
        finally:
            raise OSError(5, "Input/output error")
    assert errors.run_command(body, [], interrupted="interrupted: the previous cache is intact") == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted after the new cache was committed: it is complete") and err.count("\n") == 1


def test_each_line_is_one_write_so_that_ranks_sharing_stderr_never_mix_lines(monkeypatch):
    """Under torchrun every rank writes its line to one stderr; where the stream is unbuffered (PYTHONUNBUFFERED,
    python -u), print() writes a line and its newline apart, and two ranks' lines then ran together."""
    writes = []

    class Stream:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    def fails():
        raise errors.UsageError("--out x: a file is there")

    def stopped():
        raise KeyboardInterrupt
    monkeypatch.setattr(sys, "stderr", Stream())
    assert errors.run_command(fails, []) == errors.EXIT_USER
    assert errors.run_command(stopped, []) == errors.EXIT_INTERRUPTED
    with pytest.raises(SystemExit):
        cli.get_parser().parse_args(["info"])   # a usage error
    assert len(writes) == 3 and all(w.endswith("\n") and w.count("\n") == 1 for w in writes), writes
    assert writes[0] == "error: --out x: a file is there\n" and writes[1] == "interrupted\n", writes


def test_a_killed_build_worker_is_one_line(world, monkeypatch, capsys):
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    def killed(*a, **k):
        raise TerminatedWorkerError("A worker process managed by the executor was unexpectedly terminated. ...\n\n"
                                    "The exit codes of the workers are {SIGKILL(-9)}")
    monkeypatch.setattr("east_cache.build.run.build_cache", killed)
    status = cli.main(argv("build --data {data} --out {dir}/c2 --quiet", world))
    assert_one_line(status, capsys.readouterr().err, r"a worker process of the build died \(exit codes "
                                                     r"\{SIGKILL\(-9\)\}\); .* fewer --jobs")


def test_an_old_checkpoint_resumes_with_a_warning(world):
    """A checkpoint written before `trained_on` was recorded cannot be checked: it is resumed as before, saying so."""
    said = []
    ds = CacheDataset(world["cache"])
    checkpoint.check_same_samples(torch.load(world["old"], weights_only=True), Path(world["old"]), ds,
                                  lambda msg, **k: said.append(msg))
    assert len(said) == 1 and re.search(r"old\.pt does not record the cache it was trained on .*unchecked", said[0])
    ck = {**torch.load(world["other"], weights_only=True), "trained_on": checkpoint.sample_set(ds)}
    checkpoint.check_same_samples(ck, Path(world["other"]), ds, lambda msg, **k: said.append(msg))
    assert len(said) == 1, "the same sample set: nothing to say"


@pytest.mark.slow
def test_resume_on_another_cache_is_refused_and_init_from_goes_on_there(tiny_data, tiny_cache, tmp_path):
    """The issue's case: a run stopped inside epoch 1 on cache A, resumed with --cache B (other images, same
    options); --init-from takes its weights to B with a fresh optimiser and schedule."""
    train_run(tiny_cache, tmp_path / "a", "--epochs", "2", "--batch-size", "1", "--max-steps", "1")
    ck = tmp_path / "a" / "latest.pt"
    assert torch.load(ck, weights_only=True)["trained_on"]["images"] == 2
    data_b = Path(shutil.copytree(tiny_data, tmp_path / "b_data"))
    edit_ufo(data_b, lambda images: images.pop(first_image(images)))
    cache_b = make_tiny_cache(data_b, tmp_path / "b")
    with pytest.raises(errors.UsageError, match=rf"trained on {re.escape(str(tiny_cache))} \(2 images.*--cache "
                                                rf"{re.escape(str(cache_b))} holds another sample set \(1 images"):
        train_run(cache_b, tmp_path / "r", "--resume", str(ck), "--max-steps", "2")
    log = train_run(cache_b, tmp_path / "r", "--init-from", str(ck), "--max-steps", "1", "--epochs", "1")
    assert log[0]["weights"].startswith(f"weights of {ck} (epoch 1, trained on {tiny_cache})")
    assert [r["step"] for r in log if r["event"] == "step"] == [1], "steps, epochs and schedule start afresh"


def children(pid: int) -> list[int]:
    """The processes pid forked that run its own command line (its loader workers)."""
    mine = Path(f"/proc/{pid}/cmdline").read_bytes()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if int(text[text.rindex(")") + 2:].split()[1]) == pid and (stat.parent / "cmdline").read_bytes() == mine:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.slow
def test_a_killed_loader_worker_ends_the_run_in_one_line(tiny_data, tmp_path):
    cache = make_tiny_cache(tiny_data, tmp_path / "c")
    out = tmp_path / "run"
    proc = subprocess.Popen([*COMMANDS["east-train"], *run_args(cache, out, "--workers", "2", "--batch-size", "1",
                                                                   "--epochs", "100000")], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + TIMEOUT_S
        while not (out / "log.jsonl").exists() or '"event": "step"' not in (out / "log.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < end, proc.stderr.read() if proc.poll() else "no step"
            time.sleep(0.1)
        workers = children(proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_one_line(proc.returncode, "\n".join(line for line in err.splitlines() if not line.startswith("  epoch")),
                    rf"loader worker east-loader-\d \(pid {workers[0]}\) was killed by signal 9 .*--workers 0")


@pytest.mark.slow
def test_each_torchrun_rank_ends_in_one_line(world):
    """Every rank says it once (rank 0 plainly, the others naming their rank); torchrun's own failure report follows,
    without a frame of our code."""
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(REPO / "train.py"), *argv("--cache {cache} --out {notes}", world)], cwd=world["dir"],
                       capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    ours = sorted(line for line in r.stderr.splitlines() if line.startswith("error: "))
    assert r.returncode != 0 and len(ours) == 2, r.stderr
    assert re.fullmatch(r"error: --out \S+notes\.txt: a file is there.*", ours[0]), ours
    assert re.fullmatch(r"error: rank 1: --out \S+notes\.txt: a file is there.*", ours[1]), ours
    assert "east_cache" not in r.stderr.replace(str(REPO), ""), r.stderr
