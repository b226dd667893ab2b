"""The GPU benchmarks' CPU fallback: bench_gpu.py and bench_time_to_accuracy.py run end to end with --device cpu at
tiny sizes (every arm: reading, steady state, prediction; cache, on the fly, baseline), so that the scripts a GPU
session runs keep working where CI has no GPU; and their table arithmetic."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import common  # noqa: E402
from tta import ratio_rows, same_hmean_rows  # noqa: E402


@pytest.fixture
def bench_data(tmp_path, monkeypatch):
    """The benchmarks' generated data under tmp_path, not the shared /tmp/east-bench."""
    monkeypatch.setattr(common, "BENCH_DATA", tmp_path)
    return tmp_path


def point(samples, seconds, hmean):
    return {"samples": samples, "seconds": seconds, "hmean": hmean, "precision": hmean, "recall": hmean, "loss": 1.0}


def test_ratio_rows_compare_the_arms_at_the_cache_arms_sample_counts():
    curves = {"cache": [point(10, 2.0, 0.1), point(20, 4.0, 0.3)],
              "fly": [point(10, 6.0, 0.12), point(20, 12.0, 0.31), point(30, 18.0, 0.4)],
              "baseline": [point(10, 50.0, 0.11)]}
    assert ratio_rows(curves) == [["10", "0.100", "0.120", "0.110", "2.0 (1.00x)", "6.0 (3.00x)", "50.0 (25.00x)"],
                                  ["20", "0.300", "0.310", "-", "4.0 (1.00x)", "12.0 (3.00x)", "-"]]
    del curves["cache"]   # no reference arm: every arm's counts, no ratio
    assert ratio_rows(curves) == [["10", "0.120", "0.110", "6.0", "50.0"], ["20", "0.310", "-", "12.0", "-"],
                                  ["30", "0.400", "-", "18.0", "-"]]


def test_time_to_the_same_hmean_is_each_arms_first_point_at_the_best_hmean_every_arm_reached():
    curves = {"cache": [point(10, 2.0, 0.1), point(20, 4.0, 0.5), point(30, 6.0, 0.6)],
              "fly": [point(10, 6.0, 0.2), point(20, 12.0, 0.45), point(30, 18.0, 0.55)]}
    target, rows = same_hmean_rows(curves)
    assert target == 0.55   # the fly arm's best: the highest hmean both reached
    assert rows == [["cache", "0.600", "30", "6.0", "1.00x"], ["fly", "0.550", "30", "18.0", "3.00x"]]
    assert same_hmean_rows({"cache": [point(10, 2.0, 0.0)], "fly": [point(10, 3.0, 0.4)]}) == (None, [])
    assert same_hmean_rows({"cache": [point(10, 2.0, 0.3)], "fly": []}) == (None, [])


def test_repeated_pages_are_one_set_of_distinct_names_over_few_files(bench_data):
    root = common.repeated_pages(5, 2, words_per_page=3, page_size=(120, 160))
    names = sorted(p.name for p in (root / "images").iterdir())
    assert len(names) == 5 and len(set(names)) == 5
    inodes = {(root / "images" / n).stat().st_ino for n in names}
    assert len(inodes) == 2   # hard links to the two generated pages
    assert common.repeated_pages(5, 2, words_per_page=3, page_size=(120, 160)) == root   # made once


def test_process_tree_cpu_seconds_counts_a_busy_child():
    """The loader workers' CPU time counts toward the busy cores: a child that burns 0.2 s of CPU (however long
    the shared machine takes to give it that) and then waits shows up in the tree's total."""
    before = common.process_tree_cpu_seconds()
    if before is None:
        pytest.skip("no /proc here")
    burn = "import time, sys\nwhile time.process_time() < 0.2: pass\nprint('done', flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        assert common.process_tree_cpu_seconds() - before >= 0.15
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_bench_gpu_runs_every_arm_on_a_cpu(bench_data, capsys):
    import bench_gpu
    t0 = time.perf_counter()
    assert bench_gpu.main(["--quick", "--device", "cpu", "--images", "2", "--distinct", "1", "--batch-size", "1",
                           "--jobs", "1", "--predict-pages", "1", "--predict-batch", "1"]) == 0
    out = capsys.readouterr().out
    tables = common_tables(out)
    read, per_epoch, where, ops, summary, stages = tables
    assert [r[0] for r in read[:2]] == ["raw pages", "jpeg, decoded by the workers"]
    assert read[-1][0].endswith("decoded by nvJPEG") and read[-1][1] == "skipped: no CUDA" and float(read[0][1]) > 0
    assert [(r[0], r[1]) for r in per_epoch] == [("raw", "1 (start-up)"), ("raw", "2"), ("jpeg", "1 (start-up)"),
                                                 ("jpeg", "2")]
    assert all(r[3].endswith("%") for r in per_epoch) and len(where) == 2 and ops
    assert summary[0][0] == "1" and float(summary[0][1]) > 0
    assert any(r[0].startswith("NMS") for r in stages) and stages[-1][0] == "map decoding + NMS, before / now"
    print(f"bench_gpu quick: {time.perf_counter() - t0:.0f} s", file=sys.stderr)


@pytest.mark.slow
def test_bench_time_to_accuracy_runs_every_arm_on_a_cpu(bench_data, capsys):
    import bench_time_to_accuracy
    assert bench_time_to_accuracy.main(["--quick", "--device", "cpu", "--train-images", "2", "--distinct", "1",
                                        "--val-images", "1", "--batch-size", "1", "--epochs", "1", "--jobs", "1",
                                        "--workers", "1"]) == 0
    curve, ratios = common_tables(capsys.readouterr().out)
    assert [r[:2] for r in curve] == [["cache", "2"], ["fly", "2"], ["baseline", "2"]]
    assert all(0 <= float(r[2]) <= 1 for r in curve)
    assert ratios[0][0] == "2" and ratios[0][4] == f"{curve[0][6]} (1.00x)"


def common_tables(text: str) -> list[list[list[str]]]:
    """The rows of every markdown table in text (run_all.py's parser)."""
    from run_all import parse_tables
    return [t["rows"] for t in parse_tables(text)]


def test_without_cuda_the_gpu_scripts_measure_nothing(capsys):
    """--device cuda (their default) on a machine without CUDA: a note, status 0, no data made."""
    import bench_gpu
    import bench_time_to_accuracy
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert bench_gpu.main([]) == 0 and bench_time_to_accuracy.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("No CUDA device here") == 2 and "|" not in out


def test_gpu_session_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_session.sh")], env={**os.environ}).returncode == 0
