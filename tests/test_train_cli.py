"""The training command as a user meets it, in a subprocess started from another folder: help with every
default, the lines that state what will run, plain progress lines in a log, Ctrl-C that saves and prints how
to go on; and, in this process (train.main, the same one line), a resume with nothing left and a cache that is not
one yet."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from helpers import REPO, read_log, run_args, train_run

from east_cache.reader import CacheDataset
from east_cache.train.config import get_args_parser
from east_cache.train.train import INTERRUPTED
from east_cache.train.train import main as train_main
from east_cache.build.run import build_lock

TRAIN = [sys.executable, str(REPO / "train.py")]
MODES = ("--eval-only", "--export-onnx", "--help")  # choices of what to do: no default to show


def train_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*TRAIN, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_help_from_another_folder_shows_every_default(tmp_path):
    r = train_cmd("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    flags = [a for a in get_args_parser()._actions if a.option_strings[-1] not in MODES]
    assert all("(default: " in a.help for a in flags), [a.dest for a in flags if "(default: " not in a.help]
    assert r.stdout.count("(default:") == len(flags)
    assert "(default: imagenet)" in r.stdout and "Ctrl-C" in r.stdout


@pytest.mark.slow
def test_a_run_says_what_it_runs_and_max_steps_changes_nothing_else(tiny_cache, tmp_path):
    out = tmp_path / "run"
    r = train_cmd("--cache", str(tiny_cache), "--out", str(out), "--backbone-weights", "random", "--max-steps", "1",
                  cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "device cpu (1 process); batch 1 per process, 1 per step; input 64 px, maps at x0.5; amp off"
    assert lines[1].startswith(f"cache {tiny_cache}: 2 images, augmentation: each epoch height x U[0.8, 1.2], "
                               f"rotation U[-10, 10] deg, 64 px crop")
    assert lines[2] == "weights: random initialisation"
    assert lines[3] == "length: 50 epoch(s) of 2 step(s), stopping at step 1", "no time budget, no check run"
    assert re.fullmatch(rf"output: {re.escape(str(out))} \(log\.jsonl, a checkpoint every 1 epoch\(s\), keeping the "
                        rf"newest 3, latest\.pt; about \d+ MB a checkpoint; {re.escape(str(out))} holds 0 "
                        rf"MB, [\d.]+ GB free\)", lines[4]), lines[4]
    assert re.fullmatch(rf"done: 1 steps, .*; stopped at --max-steps 1; to go on: python \S+train\.py .*--resume "
                        rf"{re.escape(str(out / 'epoch_1_step_1.pt'))} --max-steps N \(N > 1\)", lines[-1])
    assert "epoch 1/50: 1/2 steps" in r.stderr and "\r" not in r.stderr, "plain progress lines off a terminal"
    header = read_log(out)[0]
    assert header["event"] == "run" and header["argv"][-2:] == ["--max-steps", "1"]
    assert header["cache_fingerprint"] == CacheDataset(tiny_cache).fingerprint
    assert re.fullmatch(r"[0-9a-f]{32}", header["code_version"]["east"]) and header["time"].endswith("+00:00")


@pytest.mark.slow
def test_on_a_terminal_progress_is_a_bar(tiny_cache, tmp_path):
    """stderr on a pseudo-terminal: tqdm redraws its bar with carriage returns instead of printing lines."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    proc = subprocess.Popen([*TRAIN, *run_args(tiny_cache, tmp_path, "--epochs", "1")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:  # read as it comes: a full pty buffer would block the run
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the run closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "epoch 1/1" in text and "\r" in text and "1/1 steps (" not in text, text


def wait_for_a_step(log: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if log.exists() and '"event": "step"' in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"no step logged within {timeout} s (exit status {proc.poll()})")


@pytest.mark.slow
def test_ctrl_c_saves_and_prints_the_command_that_goes_on(tiny_cache, tmp_path):
    out = tmp_path / "run"
    args = run_args(tiny_cache, out, "--batch-size", "1", "--epochs", "1000", "--save-every", "1000",
                    "--save-every-steps", "1")
    proc = subprocess.Popen([*TRAIN, *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_a_step(out / "log.jsonl", proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == INTERRUPTED, stderr
    assert "SIGINT: stopping after this step and saving a checkpoint" in stderr and "Traceback" not in stderr
    last = stdout.splitlines()[-1]
    m = re.fullmatch(r"stopped by a signal at step (\d+), (?:inside|after) epoch (\d+); saved (\S+); to continue: (.+)",
                     last)
    assert m, last
    step, saved, command = int(m[1]), Path(m[3]), shlex.split(m[4])
    assert saved.is_file() and command[:2] == ["python", str(REPO / "train.py")] and command[-2:] == ["--resume", str(saved)]
    assert json.loads((out / "log.jsonl").read_text().splitlines()[-1])["event"] == "interrupted"
    assert [p.name for p in out.glob("epoch_*.pt")] == [saved.name], "each mid-epoch save replaced the one before"
    # the printed command goes on from there (one more step here)
    r = subprocess.run([sys.executable, *command[1:], "--max-steps", str(step + 1)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert [x["step"] for x in read_log(out) if x["event"] == "step"][-1] == step + 1


@pytest.mark.slow
def test_a_resume_with_nothing_left_is_one_line_that_says_how_to_go_on(tiny_cache, tmp_path, capsys):
    train_run(tiny_cache, tmp_path, "--epochs", "1")
    capsys.readouterr()
    status = train_main(["--cache", str(tiny_cache), "--out", str(tmp_path), "--epochs", "1", "--resume",
                         str(tmp_path / "latest.pt")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert re.match(r"error: .*latest\.pt has 1 epoch\(s\) done and --epochs is 1: nothing left to train\. To train "
                    r"on, pass a larger --epochs, e\.g\. --epochs 2", err)


@pytest.mark.parametrize("case", ["data set", "being built"])
def test_a_folder_that_is_not_a_cache_yet_says_what_it_is(case, tiny_data, tmp_path, capsys):
    folder, lock = tiny_data, contextlib.nullcontext()
    expect = (f"error: {tiny_data} is a data set (it holds ufo/), not a cache; build a cache from it first: "
              f"python -m preprocess build --data {tiny_data} --out cache")
    if case == "being built":
        folder = tmp_path / "cache"
        folder.mkdir()
        lock = build_lock(folder)  # held by this process, as by a build that has not finished
        expect = f"error: {folder}: a build (pid {os.getpid()}) is still writing this cache; run again when"
    with lock:
        status = train_main(["--cache", str(folder), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(expect), err
