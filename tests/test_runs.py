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
    assert head == ["run", "lr", "max_rotation", "best", "hmean", "epoch", "last", "loss", "samples/s", "wall",
                    "state"], "only lr and the rotation differ (resume, out, the pids and times are no options)"
    by_run = {r[0]: r[1:] for r in table}
    assert [r[0] for r in table] == ["b", "a", "c"], "best hmean first, each run by its folder's name"
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
    assert "max_rotation" in done.stdout


@pytest.mark.slow
def test_two_real_runs_differing_in_one_option_show_that_option_alone(tiny_cache, tmp_path, capsys):
    for name, lr in (("a", "0.001"), ("b", "0.0005")):
        train_run(tiny_cache, tmp_path / name, "--epochs", "1", "--lr", lr)
    capsys.readouterr()
    assert cli.main(["runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    head, *table = rows(capsys.readouterr().out)
    assert head[:2] == ["run", "lr"] and head[2:4] == ["best", "loss"], head
    assert sorted(r[1] for r in table) == ["0.0005", "0.001"] and all(r[-1] == "finished" for r in table)


def sweep_header(folder: str, **options) -> dict:
    """A `run` record as east-train writes it for a sweep's point: the augmentation flags given in config (None where
    not given) and their effective values in `augment` (the flags over the cache's), a check run's bookkeeping."""
    flags = {k: options.get(k) for k in ("height_jitter", "max_rotation", "input_size", "scale", "perspective",
                                         "scale_p", "perspective_p")}
    used = {"height_jitter": 0.2, "max_rotation": 10.0, "input_size": 512, "scale": [1.0, 1.0], "perspective": 0.0,
            "scale_p": 1.0, "perspective_p": 1.0, **{k: v for k, v in flags.items() if v is not None}}
    config = {"cache": "cache/receipts", "out": folder, "epochs": 30, "lr": options.get("lr", 0.001), "jitter": 0.5,
              "seed": 0, "batch_size": 8, "augment": None, **flags, "max_steps": options.get("max_steps"),
              "time_limit": None, "check_run": options.get("check_run", False),
              "eval_every": options.get("eval_every", 1), "val_data": options.get("val_data", "data/receipts"),
              "keep_last": 3, "log_every": 20, "workers": None}
    return {"event": "run", "time": "2026-01-01T10:00:00+00:00", "argv": [], "device": "cuda", "world": 1,
            "config": config, "cache_fingerprint": "f" * 32,
            "cache_config": {"image_size": 2048, "input_size": 512, "max_rotation": 10.0, "height_jitter": 0.2},
            "val_cache_fingerprint": None, "code_version": {"package": "0.1.0", "east": "c" * 16},
            "host": HOST, "pid": gone_pid(), "augment": used, "transform": None}


def write_sweep(root, points: dict) -> list[str]:
    folders = []
    for name, options in points.items():
        folder = root / "runs" / name
        write_log(folder, [sweep_header(str(folder), **options), epoch(1, 0.5, 0.9, 10, "2026-01-01T10:01:00+00:00"),
                           {"event": "end", "reason": "finished", "epoch": 1, "step": 10,
                            "time": "2026-01-01T10:02:00+00:00"}])
        folders.append(str(folder))
    return folders


def test_an_option_is_one_column_holding_the_value_the_run_used(tmp_path, capsys):
    """--max-rotation given in one run and left at the cache's in the other: one column, 15 and 10 (not the flag's
    `-` beside augment.max_rotation's 10)."""
    folders = write_sweep(tmp_path, {"rot15": {"max_rotation": 15.0}, "base": {}})
    assert cli.main(["runs", *folders]) == 0
    head, *table = rows(capsys.readouterr().out)
    assert head[:2] == ["run", "max_rotation"] and head[2:4] == ["best", "hmean"], head
    assert sorted((r[0], r[1]) for r in table) == [("base", "10"), ("rot15", "15")]


def test_length_and_bookkeeping_options_are_apart_unless_all(tmp_path, capsys):
    folders = write_sweep(tmp_path, {"check": {"check_run": True, "max_steps": 20, "eval_every": 0, "val_data": None},
                                     "long": {"lr": 0.0003}})
    assert cli.main(["runs", *folders]) == 0
    head = rows(capsys.readouterr().out)[0]
    assert head[:2] == ["run", "lr"] and head[2] == "best", "the length and the checking are no difference"
    assert cli.main(["runs", *folders, "--all"]) == 0
    out = capsys.readouterr().out
    assert all(k in out for k in ("check_run", "max_steps", "eval_every", "val_data")), out


def test_four_runs_of_a_sweep_fit_100_columns_and_the_rest_fold(tmp_path, capsys):
    """The README's sweep and a default run: the table within 100 characters, the options that do not fit under it
    as `option: value`, every option once."""
    folders = write_sweep(tmp_path, {"rot15": {"max_rotation": 15.0}, "scale": {"scale": [0.5, 1.0],
                                     "perspective": 0.05}, "crop256": {"input_size": 256}, "east": {}})
    assert cli.main(["runs", *folders]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= runs.WIDTH, out
    head = lines[0].split()
    assert head[0] == "run" and [r.split()[0] for r in lines[1:5]] == ["rot15", "scale", "crop256", "east"], out
    for option, values in (("max_rotation", "15"), ("input_size", "256"), ("scale", "0.5,1"), ("perspective", "0.05")):
        assert option in head or f"{option}: {values}" in out, f"{option} neither a column nor folded: {out}"
    assert "augment." not in out and "cache." not in out and "lr" not in head


def test_runs_are_named_by_the_shortest_tail_of_their_folder():
    assert runs.short_names([runs.Path("runs/rot15"), runs.Path("runs/sweep/scale")]) == ["rot15", "scale"]
    assert runs.short_names([runs.Path("a/east"), runs.Path("b/east"), runs.Path("c")]) == ["a/east", "b/east", "c"]
    assert runs.short_names([runs.Path("/x/runs/east"), runs.Path("runs/east")]) == ["x/runs/east", "runs/east"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_the_plot_names_each_run_by_its_folder_and_tables_the_options(tmp_path, capsys):
    """8 runs of one epoch: a panel of the loss per logged step (a short run still draws a line), one of hmean per
    epoch, and a table of the runs by their short names and the options they differ in, no legend of full paths."""
    import matplotlib
    points = {f"rot{r}": {"max_rotation": float(r)} for r in (0, 5, 15, 20)}
    points.update({"scale": {"scale": [0.5, 1.0], "perspective": 0.05}, "crop256": {"input_size": 256},
                   "lr3e-4": {"lr": 0.0003}, "east": {}})
    folders = write_sweep(tmp_path, points)
    for f in folders:   # the steps a run logs before its epoch record
        with open(runs.Path(f) / runs.LOG, "a") as log:
            log.writelines(json.dumps({"event": "step", "epoch": 1, "step": s, "loss": 2.0 / s}) + "\n"
                           for s in (2, 4, 6, 8))
    svg = tmp_path / "runs.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):   # the texts as text, to be read back
        assert cli.main(["runs", *folders, "--plot", str(svg)]) == 0
    text = svg.read_text()
    assert "training loss per logged step" in text and "hmean per epoch" in text
    assert all(f">{name}<" in text for name in points), "every run by its folder's name"
    assert str(tmp_path) not in text and "augment." not in text and "cache." not in text
    for option in ("max_rotation", "scale", "perspective", "input_size", "lr"):
        assert f">{option}<" in text, option
    assert runs.read_run(runs.Path(folders[0])).losses == {2: 1.0, 4: 0.5, 6: 2 / 6, 8: 0.25}


# Hostile and careless logs (issue 50): a damaged header, huge numbers, values holding newlines; and which epoch is
# best when a run has only a validation loss.

@pytest.mark.parametrize("config", ["x", None, 5, ["a"]])
def test_a_header_whose_config_is_damaged_is_a_row_that_says_so(tmp_path, capsys, config):
    t = "2026-01-01T10:{:02d}:00+00:00".format
    write_log(tmp_path / "a", [{**header(0.001, 10, t(0), gone_pid()), "config": config},
                               epoch(1, 0.5, 0.9, 10, t(1))])
    assert cli.main(["runs", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert not err and "config unreadable" in out and "0.5000" in out, out


def test_huge_numbers_in_a_log_are_a_row_not_a_traceback(tmp_path, capsys):
    t = "2026-01-01T10:{:02d}:00+00:00".format
    big = "9" * 400
    lines = [json.dumps(header(0.001, 10, t(0), gone_pid())).replace(f'"pid": ', f'"pid": {big}, "x": '),
             json.dumps(epoch(1, 0.5, 0.9, 10, t(1))).replace('"loss": 0.9', f'"loss": {big}'),
             json.dumps(epoch(2, 0.6, 0.8, 20, t(2))).replace('"hmean": 0.6', f'"hmean": {big}'),
             json.dumps({"event": "step", "epoch": 3, "step": 22, "loss": 1.5}).replace('"loss": 1.5', f'"loss": -{big}')]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / runs.LOG).write_text("\n".join(lines) + "\n")
    assert cli.main(["runs", str(tmp_path / "a")]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert row.split()[:4] == ["a", "0.5000", "1", "-inf"], row   # the huge hmean is no figure; the loss is -inf


def test_a_value_holding_newlines_keeps_its_run_on_one_line(tmp_path, capsys):
    t = "2026-01-01T10:{:02d}:00+00:00".format
    recipe = {"recipe": "aug.yaml", "format": "yaml", "text": "transform:\n  a: 1\n", "name": None}
    write_log(tmp_path / "a", [header(0.001, 10, t(0), gone_pid()), epoch(1, 0.5, 0.9, 10, t(1))])
    write_log(tmp_path / "b", [{**header(0.001, 10, t(0), gone_pid()), "transform": recipe},
                               epoch(1, 0.6, 0.9, 10, t(1)),
                               {"event": "end", "reason": "failed", "error": "Bad\nError", "time": t(2)}])
    assert cli.main(["runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert [x.split()[0] for x in lines[:3]] == ["run", "b", "a"] and "Bad\\nError" in lines[1], lines
    assert "transform:\\n  a: 1\\n" in out and not any(x.startswith("  a: 1") for x in lines), out


def test_best_is_the_lowest_validation_loss_and_the_highest_hmean(tmp_path, capsys):
    t = "2026-01-01T10:{:02d}:00+00:00".format

    def val_only(n: int, val_loss: float) -> dict:
        return {"event": "epoch", "epoch": n, "complete": True, "step": 10 * n, "loss": 1.0, "val_loss": val_loss,
                "time": t(n)}
    write_log(tmp_path / "a", [header(0.001, 10, t(0), gone_pid()), val_only(1, 0.9), val_only(2, 0.4),
                               val_only(3, 0.7)])
    write_log(tmp_path / "b", [header(0.01, 10, t(0), gone_pid()), val_only(1, 0.5), val_only(2, 0.6)])
    assert cli.main(["runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    head, *table = rows(capsys.readouterr().out)
    assert head[2:5] == ["best", "val_loss", "epoch"]
    assert [(r[0], r[2], r[3]) for r in table] == [("a", "0.4000", "2"), ("b", "0.5000", "1")], table
    found = [runs.read_run(tmp_path / n) for n in "ab"]
    assert [r.best("val_loss") for r in found] == [(0.4, 2), (0.5, 1)]
    hmeans = runs.Run(tmp_path, {}, epochs={1: {"hmean": 0.3}, 2: {"hmean": 0.8}, 3: {"hmean": 0.5}})
    assert hmeans.best("hmean") == (0.8, 2)
