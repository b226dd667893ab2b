"""Messages and help texts name the command the user ran: `east-cache ...` when run as east-cache, `python -m
preprocess ...` when run that way (errors.cache_command, the one place they get it from); train.py's help names
east-train or python train.py as started, and the cache tool as installed or not."""
from __future__ import annotations

import json
import sys

import pytest
from helpers import cli_run

from east_cache.errors import REPAIR, cache_command, cache_command_named

RUN_AS = ["east-cache", "python -m preprocess"]


def other(prog: str) -> str:
    return RUN_AS[1 - RUN_AS.index(prog)]


@pytest.mark.parametrize("prog", RUN_AS)
def test_a_missing_cache_s_hint_names_the_command_as_run(prog, tmp_path, capsys):
    status, _, err = cli_run(capsys, "info", tmp_path, prog=prog)
    assert status == 2 and f"Build one with: {prog} build --data DIR --out {tmp_path}" in err, err
    assert other(prog) not in err, err


@pytest.mark.parametrize("prog", RUN_AS)
def test_evaluate_s_order_hint_names_the_command_as_run(prog, tmp_path, capsys):
    gt = tmp_path / "p.json"
    gt.write_text(json.dumps({"predicted_by": {"program": "east-predict"}, "images": {}}))
    status, _, err = cli_run(capsys, "evaluate", "--gt", gt, "--pred", gt, prog=prog)
    assert status == 2 and f"the order is {prog} evaluate --gt" in err and other(prog) not in err, err


@pytest.mark.parametrize("prog", RUN_AS)
def test_a_constant_hint_is_made_when_the_message_is(prog):
    with cache_command_named(prog):
        assert f"{REPAIR}" == f"run `{prog} verify CACHE`, then the build command it prints"
        assert cache_command("build") == f"{prog} build"


@pytest.mark.parametrize("argv0, cache, train", [("/venv/bin/east-train", "east-cache", "east-train"),
                                                  ("train.py", "python -m preprocess", "python train.py")])
def test_train_s_help_names_the_commands_as_started(argv0, cache, train, monkeypatch):
    from east_cache.train.config import get_args_parser
    monkeypatch.setattr(sys, "argv", [argv0])
    text = " ".join(get_args_parser().format_help().split())   # argparse wraps the help's lines
    assert f"built by `{cache} build`" in text and f"`{cache} bench CACHE`" in text, text
    assert f" {train} --cache cache/train --resume runs/east/latest.pt" in text, text
    assert f"`{other(cache)} " not in text   # (~/.cache/east-cache, a folder, may be named)
