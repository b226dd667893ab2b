"""Every number a user gives is checked for kind and range before any work starts (east_cache/bounds.py): a flag of
any command out of range is one `error:` line naming it and its range; an argument of the public API is a
TypeError or ValueError naming it and its range."""
from __future__ import annotations

import argparse
import math

import pytest
from helpers import run_args

from east_cache import CacheDataset, EpochSampler, Loader
from east_cache.bounds import FLAG_INT_LIMIT
from east_cache.errors import EXIT_USER
from east_cache.train import train
from east_cache.predict import predict
from east_cache.store.remote.space import parse_size, size_text

# (flags, words the error line holds); every train row also gets a cache, an --out and QUIET_RUN
TRAIN = [
    (["--lr", "-0.001"], "--lr: -0.001: must be a finite number > 0"),
    (["--lr", "nan"], "--lr: nan: must be a finite number > 0"),
    (["--lr", "inf"], "--lr: inf: must be a finite number > 0"),
    (["--clip-grad", "0"], "--clip-grad: 0: must be a finite number > 0"),
    (["--jitter", "-1"], "--jitter: -1: must be a finite number in [0, 1] (0: off)"),
    (["--jitter", "1.5"], "--jitter: 1.5: must be a finite number in [0, 1]"),
    (["--jitter", "nan"], "--jitter: nan: must be a finite number in [0, 1]"),
    (["--workers", "2.5"], "--workers: '2.5': must be an integer in [0, 1024]"),
    (["--workers", "-1"], "--workers: -1: must be an integer in [0, 1024]"),
    (["--workers", "100000"], "--workers: 100000: must be an integer in [0, 1024]"),
    (["--batch-size", "0"], "--batch-size: 0: must be an integer >= 1"),
    (["--accum-steps", "0"], "--accum-steps: 0: must be an integer >= 1"),
    (["--epochs", "0"], "--epochs: 0: must be an integer >= 1"),
    (["--max-steps", "-1"], "--max-steps: -1: must be an integer >= 1"),
    (["--time-limit", "0"], "--time-limit: 0: must be a finite number > 0"),
    (["--time-limit", "inf"], "--time-limit: inf: must be a finite number > 0"),
    (["--seed", "-1"], "--seed: -1: must be an integer >= 0"),
    (["--max-bad-steps", "0"], "--max-bad-steps: 0: must be an integer >= 1"),
    (["--keep-last", "-1"], "--keep-last: -1: must be an integer >= 0"),
    (["--save-every", "0"], "--save-every: 0: must be an integer >= 1"),
    (["--save-every-steps", "0"], "--save-every-steps: 0: must be an integer >= 1"),
    (["--log-every", "0"], "--log-every: 0: must be an integer >= 1"),
    (["--profile", "0"], "--profile: 0: must be an integer >= 1"),
    (["--eval-every", "-1"], "--eval-every: -1: must be an integer >= 0"),
    (["--node-share", "--nodes", "0"], "--nodes: 0: must be an integer >= 1"),
    (["--node-share", "--node-rank", "-1"], "--node-rank: -1: must be an integer >= 0"),
    (["--node-share", "--nodes", "2"], "--nodes 2: pass --node-rank too (0 to 1"),
    (["--node-share", "--nodes", "2", "--node-rank", "2"], "--node-rank 2 must lie in [0, --nodes 2)"),
    (["--local-cache-limit", "0.5"], "--local-cache-limit: '0.5' is less than a byte: give 0 for no limit"),
    (["--local-cache-limit=-1G"], "--local-cache-limit: '-1G' is not a size"),
    (["--nvjpeg", "--device", "cpu"], "--nvjpeg decodes on a CUDA device, and this run's is cpu"),
    (["--scale", "0,1"], "--scale: '0,1': must be S0,S1 with S0 <= S1, each a finite number in [0.125, 4]"),
    (["--scale", "1,0.5"], "--scale: '1,0.5': must be S0,S1 with S0 <= S1"),
    (["--scale", "nan"], "--scale: 'nan': must be S0,S1"),
    (["--perspective", "0.5"], "--perspective: 0.5: must be a finite number in [0, 0.25]"),
    (["--scale-p", "1.5"], "--scale-p: 1.5: must be a finite number in [0, 1]"),
    (["--perspective-p", "-1"], "--perspective-p: -1: must be a finite number in [0, 1]"),
    (["--max-rotation", "181"], "--max-rotation: 181: must be a finite number in [0, 180] (degrees)"),
    (["--height-jitter", "1"], "--height-jitter: 1: must be a finite number in [0, 1)"),
    (["--input-size", "100"], "--input-size 100 must be a positive multiple of 32"),
]

# east-cache's subcommands: (arguments, words); {data}, {out} and {cache} are filled in, {out} must stay absent
REVIEW = ["review", "--gt", "{data}/ufo/train.json", "--pred", "{data}/ufo/train.json", "--images", "{data}/images",
          "--out", "{out}"]
PSEUDO = ["pseudo", "--pred", "{data}/ufo/train.json", "--images", "{data}/images", "--out", "{out}"]
CACHE_CMD = [
    (["build", "--variants", "0"], "--variants: 0: must be an integer >= 1"),
    (["build", "--chunk-size", "0"], "--chunk-size: 0: must be an integer >= 1"),
    (["build", "--batch-size", "0"], "--batch-size: 0: must be an integer >= 1"),
    (["build", "--image-size", "0"], "--image-size: 0: must be an integer >= 1"),
    (["build", "--input-size", "16"], "--input-size: 16: must be an integer >= 32 (a multiple of 32"),
    (["build", "--input-size", "100"], "--input-size 100 must be a positive multiple of 32"),
    (["build", "--seed", "-1"], "--seed: -1: must be an integer >= 0"),
    (["build", "--height-jitter", "1"], "--height-jitter: 1: must be a finite number in [0, 1)"),
    (["build", "--height-jitter", "nan"], "--height-jitter: nan: must be a finite number in [0, 1)"),
    (["build", "--max-rotation", "-1"], "--max-rotation: -1: must be a finite number in [0, 180] (degrees)"),
    (["build", "--max-rotation", "inf"], "--max-rotation: inf: must be a finite number in [0, 180]"),
    (["build", "--image-quality", "101"], "--image-quality: 101: must be an integer in [1, 100]"),
    (["build", "--crop-tries", "0"], "--crop-tries: 0: must be an integer >= 1"),
    (["build", "--min-area", "-1"], "--min-area: -1: must be a finite number >= 0"),
    (["build", "--drop-area", "nan"], "--drop-area: nan: must be a finite number >= 0"),
    (["build", "--jobs", "-2"], "--jobs: -2: must be an integer in [-1, 1024] (-1: every core)"),
    (["build", "--jobs", "5000"], "--jobs: 5000: must be an integer in [-1, 1024] (-1: every core)"),
    (["build", "--jobs", "0"], "--jobs 0: give -1 (every core) or a number of worker processes >= 1"),
    (["build", "--map-scale", "nan"], "--map-scale: invalid choice"),
    (["info", "{cache}", "--epochs", "0"], "--epochs: 0: must be an integer >= 1"),
    (["bench", "{cache}", "--batches", "0"], "--batches: 0: must be an integer >= 1"),
    (["bench", "{cache}", "--batch-sizes", "0"], "--batch-sizes: '0': give one or more integers as A,B,... or A-B"),
    (["bench", "{cache}", "--workers", "-1"], "--workers: '-1': give one or more integers as A,B,... or A-B (A <= "
                                               "B), at most 64, each an integer in [0, 1024]"),
    (["show", "{cache}", "0", "--epochs", "3-1"], "--epochs: '3-1': give one or more integers as A,B,... or A-B"),
    (["show", "{cache}", "0", "--epochs", "0-64"], "at most 64, each an integer >= 0"),
    (["show", "{cache}", "0", "--variant", "-1"], "--variant: -1: must be an integer >= 0"),
    (["show", "--source", "{data}", "--name", "x", "--input-size", "0"], "--input-size: 0: must be an integer >= 32"),
    (["show", "--source", "{data}", "--name", "x", "--seed", "-1"], "--seed: -1: must be an integer >= 0"),
    (["verify", "{cache}", "--local-cache-limit", "0.5"], "--local-cache-limit: '0.5' is less than a byte"),
    (["evaluate", "--gt", "g.json", "--pred", "p.json", "--min-area", "nan"], "--min-area: nan: must be a finite"),
    (["evaluate", "--gt", "g.json", "--pred", "p.json", "--drop-area", "-1"], "--drop-area: -1: must be a finite"),
    (["split", "--data", "{data}", "--seed", "-1"], "--seed: -1: must be an integer >= 0"),
    (["split", "--data", "{data}", "--folds", "1"], "--folds: 1: must be an integer >= 2"),
    (["split", "--data", "{data}", "--seed", str(2**40)], f"--seed: {2**40}: must be an integer >= 0, at most"),
    (["check", "--data", "{data}", "--distance", "-1"], "--distance: -1: must be an integer in [0, 63]"),
    ([*REVIEW, "--jobs", "-3"], "--jobs: -3: must be an integer in [0, 1024] (0: one per core)"),
    ([*REVIEW, "--size", "0"], "--size: 0: must be an integer >= 1 (px)"),
    ([*REVIEW, "--min-area", "nan"], "--min-area: nan: must be a finite number >= 0"),
    ([*PSEUDO, "--min-score", "-0.5"], "--min-score: -0.5: must be a finite number in [0, 1]"),
    ([*PSEUDO, "--care-score", "1.7"], "--care-score: 1.7: must be a finite number in [0, 1]"),
    (["ensemble", "--pred", "p.json", "--out", "f.json", "--iou", "0"], "--iou: 0: must be a finite number in (0, 1)"),
    (["ensemble", "--pred", "p.json", "--out", "f.json", "--votes", "0"], "--votes: 0: must be an integer >= 1"),
    (["ensemble", "--pred", "p.json", "--out", "f.json", "--weights", "1,nan"], "--weights: nan: must be a finite"),
]

PREDICT = [
    (["--batch-size", "0"], "--batch-size: 0: must be an integer >= 1"),
    (["--batch-size", "x"], "--batch-size: 'x': must be an integer >= 1"),
    (["--image-size", "16"], "--image-size: 16: must be an integer in [32, 16384] (px)"),
    (["--scales", "1024,16"], "--scales: 16: must be an integer in [32, 16384] (px)"),
    (["--votes", "0"], "--votes: 0: must be an integer >= 1"),
    (["--score-thresh", "1"], "--score-thresh: 1: must be a finite number in (0, 1)"),
    (["--score-thresh", "nan"], "--score-thresh: nan: must be a finite number in (0, 1)"),
    (["--nms-thresh", "0"], "--nms-thresh: 0: must be a finite number in (0, 1)"),
]


def every_parser():
    """(command, parser) of every command: east-cache's subcommands, east-train, east-predict."""
    from east_cache.cli import get_parser

    def walk(name, parser):
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    yield from walk(f"{name} {sub}", p)
    yield from walk("east-cache", get_parser())
    yield "east-train", train.get_args_parser()
    yield "east-predict", predict.get_parser()


def numeric_options(parser) -> list[argparse.Action]:
    """The options of parser that take a number (or numbers): a bounds.flag_number type, a list or size parser,
    a bare int or float, or a numeric default."""
    def numeric(a):
        default = a.default if not isinstance(a.default, bool) else None
        return (a.type in (int, float) or hasattr(a.type, "bound") or a.type in LIST_TYPES
                or isinstance(default, (int, float)))
    return [a for a in parser._actions if a.option_strings and a.nargs != 0 and numeric(a)]


def dummy_argv(parser) -> list[str]:
    """Values that parse for every required argument and positional of parser (none of them numeric)."""
    argv = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            continue
        value = str(next(iter(a.choices))) if a.choices else "x"
        if not a.option_strings:
            argv.append(value)
        elif a.required:
            argv += [a.option_strings[0], value]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            argv += [group._group_actions[0].option_strings[0], "x"]
    return argv


LIST_TYPES = (size_text,)   # besides bounds.flag_number and flag_numbers, which carry their bound
HOSTILE = ("-3", "0.5", "nan", "1e300", str(10**40))


def test_every_numeric_flag_of_every_command_goes_through_the_bounds(capsys):
    """Every numeric option of every command's parser, given a negative, a fraction, nan and huge values: either
    argparse's one `error:` line naming the flag, or a value its bound accepts (finite, in range, an integer that C
    can hold); none is a bare int or float (which takes -3 and nan without a word)."""
    seen = 0
    for command, parser in every_parser():
        base = dummy_argv(parser)
        for action in numeric_options(parser):
            flag = action.option_strings[-1]
            assert action.type not in (int, float) or action.choices, f"{command} {flag}: a bare {action.type}"
            assert action.type is not None, f"{command} {flag}: a number read as text"
            seen += 1
            for text in HOSTILE:
                try:
                    ns = parser.parse_args([*base, f"{flag}={text}"])
                except SystemExit as e:
                    err = capsys.readouterr().err
                    assert e.code == 2 and err.startswith("error: ") and err.count("\n") == 1, (command, flag, err)
                    assert flag in err or "invalid choice" in err, (command, flag, err)
                    continue
                value = getattr(ns, action.dest)
                values = value if isinstance(value, list) else [parse_size(value) if action.type is size_text
                                                                else value]
                for v in values:
                    assert math.isfinite(v), (command, flag, text, v)
                    if hasattr(action.type, "bound"):
                        assert action.type.bound.contains(v), (command, flag, text, v)
                    if isinstance(v, int) and action.type is not size_text:
                        assert abs(v) <= FLAG_INT_LIMIT, (command, flag, text, v)
    assert seen >= 50, f"only {seen} numeric options found: is the walk still finding them?"


def one_error_line(status, err: str, words: str) -> None:
    assert status == EXIT_USER, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert words in err, err


def exit_status(main, argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:   # argparse's usage errors
        return e.code


@pytest.mark.parametrize("flags, words", TRAIN, ids=[" ".join(f) for f, _ in TRAIN])
def test_train_flags_out_of_range_are_one_line(flags, words, tiny_cache, tmp_path, capsys, monkeypatch):
    for launcher in ("GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(launcher, raising=False)
    out = tmp_path / "run"
    status = exit_status(train.main, run_args(tiny_cache, out, *flags))
    one_error_line(status, capsys.readouterr().err, words)
    assert not out.exists(), "work started"


@pytest.mark.parametrize("args, words", CACHE_CMD, ids=[" ".join(a) for a, _ in CACHE_CMD])
def test_east_cache_flags_out_of_range_are_one_line(args, words, tiny_data, tiny_cache, tmp_path, capsys):
    from east_cache.cli import main
    out = tmp_path / "out"
    argv = [a.format(data=tiny_data, cache=tiny_cache, out=out) for a in args]
    argv += {"build": ["--data", str(tiny_data), "--out", str(out), "--quiet"], "show": ["-o", str(out)],
             "evaluate": ["--per-image", str(out)]}.get(args[0], [])
    one_error_line(exit_status(main, argv), capsys.readouterr().err, words)
    assert not out.exists(), "work started"


@pytest.mark.parametrize("flags, words", PREDICT, ids=[" ".join(f) for f, _ in PREDICT])
def test_predict_flags_out_of_range_are_one_line(flags, words, tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["--checkpoint", str(tmp_path / "none.pt"), "--images", str(tmp_path), "--out", str(out), *flags]
    one_error_line(exit_status(predict.main, argv), capsys.readouterr().err, words)
    assert not out.exists(), "work started"


# (keyword arguments of Loader, exception, words); the cache is not there: the check must come before opening it
LOADER = [
    (dict(batch_size="2"), TypeError, "batch_size='2': must be an integer >= 1"),
    (dict(batch_size=0), ValueError, "batch_size=0: must be an integer >= 1"),
    (dict(batch_size=True), TypeError, "batch_size=True: must be an integer >= 1"),
    (dict(workers=2.5), TypeError, "workers=2.5: must be an integer >= 0 or None"),
    (dict(workers=-1), ValueError, "workers=-1: must be an integer >= 0"),
    (dict(jitter="0.5"), TypeError, "jitter='0.5': must be a finite number in [0, 1] (0: off)"),
    (dict(jitter=math.inf), ValueError, "jitter=inf: must be a finite number in [0, 1]"),
    (dict(jitter=math.nan), ValueError, "jitter=nan: must be a finite number in [0, 1]"),
    (dict(jitter=-0.1), ValueError, "jitter=-0.1: must be a finite number in [0, 1]"),
    (dict(world=0), ValueError, "world=0: must be an integer >= 1"),
    (dict(world=2, rank=2), ValueError, "rank=2: must be an integer in [0, world) = [0, 2)"),
    (dict(rank=-1), ValueError, "rank=-1: must be an integer >= 0"),
    (dict(seed=-1), ValueError, "seed=-1: must be an integer >= 0"),
    (dict(seed=1.0), TypeError, "seed=1.0: must be an integer >= 0"),
    (dict(local_cache_limit=0.5), ValueError, "local_cache_limit=0.5 is less than a byte"),
    (dict(local_cache_limit="ten"), ValueError, "local_cache_limit='ten' is not a size"),
]


@pytest.mark.parametrize("kwargs, error, words", LOADER, ids=[str(k) for k, _, _ in LOADER])
def test_loader_arguments_out_of_range_name_the_argument(kwargs, error, words, tmp_path):
    with pytest.raises(error) as e:
        Loader(tmp_path / "no-cache", **{"batch_size": 1, **kwargs})
    assert words in str(e.value)


@pytest.mark.parametrize("call, error, words", [
    (lambda ds: ds.set_epoch(-1), ValueError, "epoch=-1: must be an integer >= 0"),
    (lambda ds: ds.set_epoch(1.5), TypeError, "epoch=1.5: must be an integer >= 0"),
    (lambda ds: ds.set_epoch(True), TypeError, "epoch=True"),
    (lambda ds: ds[2], IndexError, "CacheDataset index 2: out of range for its 2 items"),
    (lambda ds: ds[-3], IndexError, "CacheDataset index -3: out of range for its 2 items"),
    (lambda ds: ds["0"], TypeError, "CacheDataset index '0': must be an integer"),
    (lambda ds: ds[1.0], TypeError, "CacheDataset index 1.0: must be an integer"),
    (lambda ds: ds.quads(2), IndexError, "CacheDataset index 2: out of range for its 2 items"),
    (lambda ds: ds.quads(0, 1), ValueError, "variant=1: must be an integer in [0, 1) (the cache's variants)"),
    (lambda ds: ds.quads(0, 0.0), TypeError, "variant=0.0: must be an integer in [0, 1)"),
    (lambda ds: EpochSampler(range(2)).set_epoch(-2), ValueError, "epoch=-2: must be an integer >= 0"),
    (lambda ds: EpochSampler(range(2)).set_epoch(0, skip=1.5), TypeError, "skip=1.5: must be an integer >= 0"),
    (lambda ds: CacheDataset(ds.cache_dir, local_cache_limit=0.5), ValueError, "local_cache_limit=0.5"),
], ids=["set_epoch-1", "set_epoch1.5", "set_epoch-bool", "index-len", "index-past-start", "index-str",
        "index-float", "quads-index", "quads-variant", "quads-variant-float", "sampler-epoch", "sampler-skip", "limit"])
def test_dataset_arguments_out_of_range_name_the_argument(call, error, words, tiny_cache):
    ds = CacheDataset(tiny_cache)
    with pytest.raises(error) as e:
        call(ds)
    assert words in str(e.value)
    assert ds.epoch == 0, "a refused epoch was taken"


def test_loader_set_epoch_refuses_before_taking_it(tiny_cache):
    loader = Loader(tiny_cache, batch_size=1, workers=0)
    with pytest.raises(ValueError, match=r"skip=-1: must be an integer >= 0"):
        loader.set_epoch(1, skip=-1)
    assert loader.epoch == 0


def test_negative_indices_count_from_the_end_as_in_a_sequence(tiny_cache):
    ds = CacheDataset(tiny_cache)
    for i in (-1, -2):
        assert all((ds[i][k] == ds[len(ds) + i][k]).all() for k in ds.fields)
    assert len(list(ds)) == len(ds), "iterating a Dataset by index ends at its length (an IndexError)"
