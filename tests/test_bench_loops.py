"""`east-cache bench` sets train.py's reading beside a loop of your own through east_cache.Loader, in the same
run: one row per setting with both figures and their ratio (printed, never asserted against a time)."""
from __future__ import annotations

import pytest
import torch
from helpers import small_config

from east_cache.cli import main
from east_cache.train.train import training_loader
from east_cache.reader import Loader
from east_cache.inspect.bench_loops import compare
from east_cache.build.run import build_cache

HEADER = ["workers", "batch", "train.py crops/s", "own loop crops/s", "own / train.py"]


@pytest.fixture(scope="module")
def cache(sample_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_loops") / "c"
    build_cache(small_config(), [sample_root], out, jobs=1, quiet=True)
    return out


def loop_table(out: str) -> list[list[str]]:
    """The rows of the table under the header HEADER."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| ")]
    start = rows.index(HEADER)
    return [r for r in rows[start + 1:] if r[0].isdigit()]


@pytest.mark.slow
def test_bench_prints_train_py_and_an_own_loop_side_by_side(cache, capsys):
    assert main(["bench", str(cache), "--workers", "0", "--batch-sizes", "2", "--batches", "2",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "train.py's reading beside your own loop, device cpu" in out
    assert "east_cache.Loader(CACHE, batch_size=B, workers=W, device=\"cpu\", jitter=J)" in out
    [row] = loop_table(out)
    ours, yours, ratio = map(float, row[2:])
    assert row[:2] == ["0", "2"] and ours > 0 and yours > 0
    assert ratio == pytest.approx(yours / ours, abs=0.01)


def test_train_py_s_loader_is_the_public_loader_as_train_py_sets_it(cache):
    loader = training_loader(cache, 2, 0, "cpu")
    try:
        assert isinstance(loader, Loader) and loader.jitter > 0 and len(loader) == 2
        image, score, geo, roi = next(iter(loader))
        assert image.shape[0] == 2 and image.dtype.is_floating_point
    finally:
        loader.close()


def test_each_loop_is_timed_over_its_own_passes(cache, monkeypatch):
    """Both loaders are read, each over two timed passes of `batches` after a first epoch, in turns."""
    read = []

    def counting(name):
        class Counting(Loader):
            def __iter__(self):
                for batch in super().__iter__():
                    read.append(name)
                    yield batch
        return Counting

    monkeypatch.setattr("east_cache.inspect.bench_loops.Loader", counting("own"))
    ours = lambda cache, batch, workers, device: counting("train.py")(cache, batch, workers=workers,  # noqa: E731
                                                                      device=device, jitter=0.5)
    rates = compare(cache, 0, 2, 3, torch.device("cpu"), ours)
    assert read == ["train.py"] * 2 + ["own"] * 2 + ["train.py"] * 3 + ["own"] * 6 + ["train.py"] * 3
    assert all(r > 0 for r in rates)
