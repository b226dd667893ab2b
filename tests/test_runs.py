"""`east-cache runs`: run folders side by side from their logs alone. Three generated folders (finished, stopped by a
signal, still running) and real runs of east-train that differ in one option."""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest
from helpers import REPO, train_run

from east_cache import cli
from east_cache.tools import runs

HOST = socket.gethostname()


def header(lr: float, max_rotation: float, time: str, pid: int, **config) -> dict:
    """A `run` record as east-train writes it (its options flattened by tools/run_recipe.py)."""
    return {"event": "run", "time": time, "argv": ["--lr", str(lr)], "device": "cpu", "world": 1,
            "config": {"cache": "cache/train", "out": "runs/x", "epochs": 3, "lr": lr, "jitter": 0.5, "seed": 0,
                       "augment": {"scale": [0.5, 2.0]}, **config},
            "cache_fingerprint": "f" * 32, "cache_config": {"input_size": 512, "max_rotation": max_rotation},
            "val_cache_fingerprint": None, "code_version": {"package": "0.1.0", "east": "c" * 16},
            "host": HOST, "pid": pid}


def epoch(n: int, hmean: float, loss: float, step: int, time: str) -> dict:
    return {"event": "epoch", "epoch": n, "complete": True, "step": step, "lr": 0.001, "loss": loss,
            "val_loss": loss + 1, "precision": hmean, "recall": hmean, "hmean": hmean, "samples_per_s": 40.0 + n,
            "data_wait": 0.1, "time": time}


def write_log(folder, recs) -> None:
    folder.mkdir(parents=True)
    (folder / runs.LOG).write_text("".join(json.dumps(r) + "\n" for r in recs))


def gone_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def three(tmp_path):
    """a: finished, best hmean 0.7 at epoch 2; b: lr 0.01, stopped by a signal, best at epoch 1, resumed once (its
    wall time is both starts'); c: rotation 20, still running (this process)."""
    t = "2026-01-01T10:{:02d}:00+00:00".format
    write_log(tmp_path / "a", [header(0.001, 10, t(0), gone_pid()), epoch(1, 0.5, 0.9, 10, t(1)),
                               epoch(2, 0.7, 0.8, 20, t(2)), epoch(3, 0.6, 0.7, 30, t(3)),
                               {"event": "end", "reason": "finished", "epoch": 3, "step": 30, "time": t(3)}])
    write_log(tmp_path / "b", [header(0.01, 10, t(0), gone_pid()), epoch(1, 0.8, 0.9, 10, t(2)),
                               {"event": "interrupted", "signal": 2, "epoch": 1, "step": 10, "time": t(3)},
                               header(0.01, 10, t(10), gone_pid(), resume="runs/b/latest.pt"),
                               epoch(2, 0.75, 0.85, 20, t(14)),
                               {"event": "interrupted", "signal": 15, "epoch": 2, "step": 20, "time": t(15)}])
    write_log(tmp_path / "c", [header(0.001, 20, t(0), os.getpid()), epoch(1, 0.2, 1.5, 10, t(1)),
                               {"event": "step", "epoch": 2, "step": 12, "loss": 1.25, "lr": 0.001}])
    return tmp_path


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_runs_shows_the_options_they_differ_in_and_the_best_epoch(three, capsys):
    folders = [str(three / n) for n in "abc"]
    assert cli.main(["runs", *folders]) == 0
    head, *table = rows(capsys.readouterr().out)
    assert head == ["run", "lr", "cache.max_rotation", "best", "hmean", "epoch", "last", "loss", "samples/s", "wall",
                    "state"], "only lr and the rotation differ (resume, out, the pids and times are no options)"
    by_run = {r[0].rsplit("/", 1)[1]: r[1:] for r in table}
    assert [r[0].rsplit("/", 1)[1] for r in table] == ["b", "a", "c"], "best hmean first"
    assert by_run["a"][:6] == ["0.001", "10", "0.7000", "2", "0.7000", "42"]
    assert by_run["a"][6:] == ["0:03:00", "finished"]
    assert by_run["b"][:5] == ["0.01", "10", "0.8000", "1", "0.8500"]
    assert by_run["b"][6:] == ["0:08:00", "stopped", "(signal)"], "3 + 5 minutes: the time between the starts is out"
    assert by_run["c"][:5] == ["0.001", "20", "0.2000", "1", "1.2500"] and by_run["c"][-1] == "running"


def test_a_run_whose_process_is_gone_without_an_end_record_is_stopped(three, capsys):
    log = three / "c" / runs.LOG
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    recs[0]["pid"] = gone_pid()
    log.write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"event": "st')   # killed while writing a line
    assert runs.read_run(three / "c").state == "stopped (no end record)"
    recs[0]["host"] = "another-host"   # a shared folder: the log's last write tells
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert runs.read_run(three / "c").state == "running (on another-host)"
    os.utime(log, (0, 0))
    assert runs.read_run(three / "c").state == "stopped (no end record)"


def test_folders_without_a_log_are_left_out_and_none_is_an_error(three, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert cli.main(["runs", str(three / "a"), str(tmp_path / "notes.txt")]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "notes.txt: no log.jsonl, not a run folder of east-train" in err
    assert cli.main(["runs", str(tmp_path / "notes.txt")]) == 2
    assert capsys.readouterr().err.startswith("error: none of ")


def test_eval_only_figures_count_where_training_had_none(tmp_path):
    write_log(tmp_path / "r", [header(0.001, 10, "2026-01-01T10:00:00+00:00", gone_pid()),
                               {"event": "epoch", "epoch": 1, "step": 5, "loss": 1.0, "samples_per_s": 9.0}])
    (tmp_path / "r" / runs.EVAL_LOG).write_text(json.dumps({"event": "eval", "epoch": 1, "hmean": 0.4}) + "\n")
    assert runs.read_run(tmp_path / "r").best("hmean") == (0.4, 1)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_plot_writes_the_curves_and_refuses_to_replace_a_log(three, tmp_path, capsys):
    png = tmp_path / "runs.png"
    assert cli.main(["runs", *(str(three / n) for n in "abc"), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["runs", str(three / "a"), "--plot", str(three / "a" / runs.LOG)]) == 2
    assert "--plot" in capsys.readouterr().err and (three / "a" / runs.LOG).read_text().startswith("{")
    assert cli.main(["runs", str(three / "a"), "--plot", str(tmp_path / "runs.txt")]) == 2
    assert capsys.readouterr().err.startswith("error: --plot ") and not (tmp_path / "runs.txt").exists()


@pytest.mark.slow
def test_runs_reads_the_folders_without_torch(three):
    code = ("import sys; from east_cache import cli; status = cli.main(['runs', *sys.argv[1:]]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, *(str(three / n) for n in "abc")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cache.max_rotation" in done.stdout


@pytest.mark.slow
def test_two_real_runs_differing_in_one_option_show_that_option_alone(tiny_cache, tmp_path, capsys):
    for name, lr in (("a", "0.001"), ("b", "0.0005")):
        train_run(tiny_cache, tmp_path / name, "--epochs", "1", "--lr", lr)
    capsys.readouterr()
    assert cli.main(["runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    head, *table = rows(capsys.readouterr().out)
    assert head[:2] == ["run", "lr"] and head[2:4] == ["best", "loss"], head
    assert sorted(r[1] for r in table) == ["0.0005", "0.001"] and all(r[-1] == "finished" for r in table)
