"""The command line as a user meets it: console scripts, help, rebuilds that keep their options, the plan, messages."""
from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import cli_run, edit_ufo, nudge_first_word

from east_cache import errors, progress
from east_cache.build.request import plan_lines
from east_cache.cli import get_parser
from east_cache.errors import skipped_reason
from east_cache.progress import Progress
from east_cache.build.announce import BuildPlan
from east_cache.store.manifest import Manifest

REPO = Path(__file__).resolve().parents[1]
SMALL_FLAGS = ["--image-size", "192", "--input-size", "96", "--crop-tries", "50", "--jobs", "1"]


def run_cli(*args, cwd: Path, **kw) -> subprocess.CompletedProcess:
    """`python -m preprocess ARGS` in a fresh process, from cwd, with this checkout importable: for the tests whose
    point is the process (its start from another folder, a closed pipe); the others run it in this one (cli_run)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "preprocess", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, text=True, check=False, **{"capture_output": True, **kw})


@pytest.mark.slow
def test_every_console_script_runs_from_another_folder_and_names_itself(tmp_path):
    """What pip's launcher does for each [project.scripts] entry: import the target, call it with argv[0] its path."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "east-cache" in scripts
    for name, target in scripts.items():
        module, _, func = target.partition(":")
        assert callable(getattr(importlib.import_module(module), func)), f"{name} -> {target}"
        launcher = f"import sys; sys.argv[0] = '/venv/bin/{name}'; from {module} import {func}; sys.exit({func}())"
        r = subprocess.run([sys.executable, "-c", launcher, "--help"], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {name} "), (name, r.stderr)


@pytest.mark.slow
def test_module_help_works_from_another_folder_and_opens_with_a_user_sentence(tmp_path):
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m preprocess ")
    description = r.stdout.split("\n\n")[1]
    assert description.startswith("Build a cache of ready-made EAST training samples")
    assert "BuildConfig" not in r.stdout and "torch" not in r.stdout


def test_console_script_names_itself_in_usage(monkeypatch, capsys):
    from east_cache.cli import main
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/east-cache", "build", "--help"])   # as pip's launcher calls it
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: east-cache build ")
    assert "every option not given keeps the value the cache was built with" in " ".join(out.split())


def _options(parser: argparse.ArgumentParser, where: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{where} {name}")
        elif action.option_strings and action.help is not argparse.SUPPRESS:
            yield where, action


def test_every_flag_help_states_its_default():
    silent = [f"{where} {a.option_strings[-1]}" for where, a in _options(get_parser())
              if not isinstance(a, (argparse._HelpAction, argparse._StoreTrueAction)) and not a.required
              and "default" not in (a.help or "").lower()]
    assert silent == []


@pytest.fixture
def build(capsys, monkeypatch):
    """`python -m preprocess build ARGS` in this process, from the folder cwd: its stderr, once it succeeded."""
    def run(cwd: Path, *args) -> str:
        monkeypatch.chdir(cwd)
        status, _, err = cli_run(capsys, "build", *args)
        assert status == 0, err
        return err
    return run


def test_the_plan_comes_first_and_the_summary_names_the_cache(sample_root, tmp_path, build):
    out = tmp_path / "c"
    err = build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS)
    lines = err.splitlines()
    assert lines[0] == f"cache {out}: a new cache"
    assert any(line.startswith("  strategy whole, npy files: auto: the cache") for line in lines[:4])
    assert any("5 images x 1 variant(s) = 5 samples" in line for line in lines[:5])
    assert any(line.startswith("  estimated size on disk: ") for line in lines[:5])
    assert lines[-2].startswith(f"cache {out}: 5 images, 5 samples: computed 5")
    assert lines[-1].startswith("coverage: legible words seen whole in a training crop: ")
    assert "\r" not in err, "off a terminal the progress is whole lines"


def test_a_rebuild_without_flags_keeps_every_recorded_option(sample_root, tmp_path, build):
    out = tmp_path / "c"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS, "--variants", "2", "--geometry", "build",
          "--strategy", "batch", "--batch-size", "2", "--seed", "3", "--fit-polygons", "--skip-bad", "--ignore-tags", "stamp")
    built = Manifest.load(out)
    err = build(tmp_path / "c", "--out", ".", "--jobs", "1")   # from another folder, with no option at all
    assert "up to date" in err and "sample_data" not in err
    assert Manifest.load(out).config == built.config and Manifest.load(out).source == built.source


@pytest.mark.slow
def test_levels_round_trip_through_a_rebuild_and_info_says_so(sample_root, tmp_path, build, capsys):
    """--levels is recorded like every option: `build --out CACHE` alone keeps it (nothing to do), --no-levels
    rebuilds without the level; info says which the cache holds."""
    out = tmp_path / "c"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS, "--levels")
    m = Manifest.load(out)
    assert m.config.levels and m.spec.kind.half_level
    assert "half level stored beside it (--levels)" in cli_run(capsys, "info", out)[1]
    assert "up to date" in build(tmp_path / "c", "--out", ".", "--jobs", "1")
    assert Manifest.load(out).config == m.config
    err = build(tmp_path, "--out", out, "--no-levels", "--jobs", "1")
    assert "full rebuild: the build configuration changed (levels: True -> False)" in err
    m = Manifest.load(out)
    assert not m.config.levels and not m.spec.kind.half_level
    assert "no half level stored" in cli_run(capsys, "info", out)[1]
    assert json.loads(cli_run(capsys, "info", "--json", out)[1])["half_level"] is False


def test_a_changed_option_is_listed_before_the_full_rebuild(sample_root, tmp_path, build):
    out = tmp_path / "c"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS, "--strategy", "batch", "--batch-size", "2")
    lines = build(tmp_path, "--out", out, "--image-size", "160", "--no-skip-bad", "--jobs", "1").splitlines()
    assert lines[:3] == [f"cache {out}: update of the existing cache",
                         "  full rebuild: the build configuration changed (image_size: 192 -> 160)",
                         "  strategy batch, npy files: chosen with --strategy"]
    m = Manifest.load(out)
    assert (m.config.image_size, m.config.input_size, m.config.strategy, m.config.batch_size) == (160, 96, "batch", 2)
    assert m.source.data_dirs == [str(sample_root.resolve())]


@pytest.mark.slow
def test_source_option_changes_are_listed(data_copy, tmp_path, build):
    out = tmp_path / "c"
    build(tmp_path, "--data", data_copy, "--out", out, *SMALL_FLAGS)
    lines = build(tmp_path, "--out", out, "--skip-bad", "--check-content", "--jobs", "1").splitlines()
    assert lines[1] == "  changed: skip_bad: False -> True; check_content: False -> True"
    assert Manifest.load(out).source.skip_bad and Manifest.load(out).config.image_size == 192
    edit_ufo(data_copy, nudge_first_word)
    lines = build(tmp_path, "--out", out, "--jobs", "1").splitlines()
    assert lines[1].startswith("  source: 1 changed image(s) since the build")


def test_skip_bad_summary_names_the_image_without_advising_skip_bad(data_copy, tmp_path, build, capsys):
    victim = sorted((data_copy / "images").iterdir())[0]
    victim.unlink()
    out = tmp_path / "c"
    err = build(tmp_path, "--data", data_copy, "--out", out, *SMALL_FLAGS, "--skip-bad")
    assert victim.name in err and "image file not found" in err and "--skip-bad" not in err
    assert f"`python -m preprocess info {out}` lists them" in err
    _, info, _ = cli_run(capsys, "info", out)
    assert victim.name in info and "--skip-bad" not in info


def test_skipped_reason_drops_only_the_advice():
    why = ("ufo/train.json: image 'a.jpg': image file not found at x; fix the file name, or pass --skip-bad to leave "
           "the image out")
    assert skipped_reason(why) == "ufo/train.json: image 'a.jpg': image file not found at x; fix the file name"
    assert skipped_reason('"words" is not an object; fix it, or pass --skip-bad') == '"words" is not an object; fix it'


def test_jobs_zero_is_our_own_one_line_error(sample_root, tmp_path, capsys):
    status, _, err = cli_run(capsys, "build", "--data", sample_root, "--out", tmp_path / "c", "--jobs", "0")
    assert status == 2
    assert err.startswith("error: --jobs 0: give -1 (every core) or a number of worker processes >= 1")
    assert len(err.splitlines()) == 1 and "n_jobs" not in err


def test_show_into_a_missing_folder_names_the_file_and_no_cache(sample_root, tmp_path, capsys):
    target = tmp_path / "nonexist" / "a.png"
    name = sorted((sample_root / "images").iterdir())[0].name
    status, _, err = cli_run(capsys, "show", "--source", sample_root, "--name", name, "--input-size", "96",
                             "-o", target)
    assert status == 2 and err.startswith(f"error: cannot write {target}: No such file or directory")
    assert "cache" not in err and "Traceback" not in err


@pytest.mark.slow
def test_info_into_a_closed_pipe_exits_quietly(sample_root, tmp_path, build):
    """A process of its own: what a closed pipe does to it (SIGPIPE's exit status) is the point."""
    out = tmp_path / "c"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS)
    read_end, write_end = os.pipe()
    os.close(read_end)   # the reader is gone before the first line, as `info | head -0` leaves it
    try:
        r = run_cli("info", "--json", out, cwd=tmp_path, stdout=write_end, capture_output=False,
                    stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert r.stderr == "" and r.returncode == 141


class Clock:
    """time.perf_counter for east_cache.progress, moved on by the test."""
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def progress_lines(monkeypatch, total, seconds_each: float, n: int, **kw) -> list[str]:
    """The plain lines of n updates of a Progress of `total`, each `seconds_each` after the one before."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    stream = io.StringIO()
    with Progress(total, "items", stream=stream, desc="work", **kw) as p:
        for _ in range(n):
            clock.now += seconds_each
            p.update(1)
    assert "\r" not in stream.getvalue()
    return stream.getvalue().splitlines()


def test_progress_off_a_terminal_prints_whole_lines_every_tenth(monkeypatch):
    lines = progress_lines(monkeypatch, 20, 6.0, 20)   # 2 minutes of work: a line per tenth
    assert len(lines) == 10 and lines[-1].startswith("  work: 20/20 items (")
    lines = progress_lines(monkeypatch, 20, 6.0, 10, initial=10)   # a resumed run: lines from where it stands
    assert lines[0].startswith("  work: 12/20 items (") and lines[-1].startswith("  work: 20/20 items")


def test_progress_off_a_terminal_is_one_line_for_short_work(monkeypatch):
    """Hashing 16 images in a second, on every build and check: one line, where it ended (not 10)."""
    assert [line.split(" (")[0] for line in progress_lines(monkeypatch, 16, 0.06, 16)] == ["  work: 16/16 items"]
    lines = progress_lines(monkeypatch, 100, 0.2, 100)   # 20 s: a tenth every 2 s, a line at most every 5 s
    assert 3 <= len(lines) <= 5 and lines[-1].startswith("  work: 100/100 items"), lines
    lines = progress_lines(monkeypatch, None, 1.0, 70)   # no total: a line every 30 s, and the end
    assert [line.split(" (")[0] for line in lines] == ["  work: 30 items", "  work: 60 items", "  work: 70 items"]


def test_progress_without_a_total_prints_by_time_with_its_figures(monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    stream = io.StringIO()
    p = Progress(None, "steps", stream=stream, desc="epoch 1")
    p.set_note(loss="0.5000", skipped=0)
    p.update(3)
    p.close()
    line = stream.getvalue()
    assert line.startswith("  epoch 1: 3 steps (") and line.endswith("; loss 0.5000, skipped 0\n")


def test_progress_on_a_terminal_is_a_tqdm_bar():
    leader, follower = os.openpty()
    with open(follower, "w") as tty, open(leader, "rb", buffering=0):
        p = Progress(4, "samples", stream=tty)
        assert p.bar is not None
        p.update(4)
        p.close()
    quiet = Progress(4, "samples", quiet=True, stream=io.StringIO())
    assert quiet.bar is None


@pytest.mark.parametrize("argv0, shown", [("/usr/bin/east-cache", "east-cache"),
                                          ("/x/preprocess/__main__.py", "python -m preprocess")])
def test_the_usage_follows_how_it_was_invoked(argv0, shown):
    from east_cache.cli import invoked_as
    assert invoked_as(argv0) == shown
    assert get_parser(shown).format_usage().startswith(f"usage: {shown} ")


def test_an_unreadable_manifest_without_data_is_not_rebuilt_from_guesses(sample_root, tmp_path, build, capsys):
    out = tmp_path / "c"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS)
    (out / "manifest.json").write_text('{"format_version": ')
    status, _, err = cli_run(capsys, "build", "--out", out, "--jobs", "1")
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {out / 'manifest.json'}: unreadable manifest") and "--data DIR" in err
    assert not (tmp_path / "sample_data").exists(), "no sample set was built in its place"
    build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS)
    assert Manifest.load(out).config.image_size == 192


@pytest.mark.parametrize("crop", ["build", "read"])
def test_the_estimated_size_is_the_size_built(sample_root, tmp_path, crop, build, capsys):
    """Crop records are exact; pages are estimated from their augmentation draw alone, an upper bound (the
    widest interpolation fringe) a few per cent over."""
    out = tmp_path / "c"
    err = build(tmp_path, "--data", sample_root, "--out", out, *SMALL_FLAGS, "--variants", "2", "--geometry", "build",
                "--crop", crop)
    estimate = float(err.split("estimated size on disk: ")[1].split(" MiB")[0])
    built = json.loads(cli_run(capsys, "info", "--json", out)[1])["data_bytes"] / 2**20
    if crop == "build":
        assert estimate == pytest.approx(built, abs=0.01)
    else:
        assert built - 0.01 <= estimate <= 1.1 * built


def test_plan_warnings_come_after_the_plan():
    plan = BuildPlan(Path("c"), True, "whole", "auto: fits", "npy", 3, 1, 1, 1, 3, 0, 2**20, "", "",
                     warnings=["--image-size 2048 enlarges 100% of the images by more than 1.25x"])
    lines = plan_lines(plan)
    assert lines[0] == "cache c: a new cache" and lines[-2] == "  estimated size on disk: 1.00 MiB"
    assert lines[-1] == "warning: --image-size 2048 enlarges 100% of the images by more than 1.25x"


def accepted(action: argparse.Action) -> str:
    """A value the option's type takes (a number in its range)."""
    for text in ("1", "64", "0.5", "0", "a", "a=1"):   # a=1: --repeat's SOURCE=R
        try:
            (action.type or str)(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return text
    raise AssertionError(f"{action.option_strings}: no value found")


def test_an_option_that_holds_one_value_given_twice_is_refused(capsys):
    """Every option of every command (east-cache's subcommands, east-train, east-predict) that keeps one value is
    refused when given twice, naming both values, before any work: argparse alone keeps the last one silently
    (`evaluate --pred A --pred B` would score B only). Options whose occurrences add up (append, count) repeat."""
    from east_cache.predict import predict
    from east_cache.train.config import get_args_parser
    parsers = {"east-cache": get_parser(), "east-train": get_args_parser(), "east-predict": predict.get_parser()}
    checked, repeatable = 0, []
    for command, parser in parsers.items():
        for where, action in _options(parser):
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            flag, takes = action.option_strings[-1], action.nargs != 0
            value = [str(next(iter(action.choices))) if action.choices else accepted(action)] if takes else []
            argv = [*where.split(), flag, *value, flag, *value]
            sub = parser._subparsers._group_actions[0].choices[where.split()[0]] if where else parser
            if isinstance(action, errors.REPEATABLE):
                repeatable.append(flag)
                sub._given = {}
                sub._get_values(action, value)
                sub._get_values(action, value)   # no error
                continue
            with pytest.raises(SystemExit) as e:
                parser.parse_args(argv)
            err = capsys.readouterr().err
            assert e.value.code == errors.EXIT_USER and f"{flag}: given twice" in err, (command, argv, err)
            assert err.count("\n") == 1 and (not takes or f"({value[0]} and {value[0]})" in err), err
            checked += 1
    assert checked > 100 and "--data" in repeatable, (checked, repeatable)
    with pytest.raises(SystemExit):
        get_parser().parse_args(["evaluate", "--gt", "A", "--pred", "p.json", "--gt=B"])
    assert "--gt: given twice (A and B)" in capsys.readouterr().err
    again = get_parser()
    assert str(again.parse_args(["evaluate", "--gt", "A", "--pred", "p.json"]).gt) == "A"
    assert str(again.parse_args(["evaluate", "--gt", "B", "--pred", "p.json"]).gt) == "B", "each parse counts anew"
    assert [str(p) for p in again.parse_args(["evaluate", "--gt", "g", "--pred", "A", "--pred=B"]).pred] == ["A", "B"]
