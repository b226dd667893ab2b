"""The GPU benchmarks' CPU fallback: bench_gpu.py, bench_gpu_augment.py, bench_time_to_accuracy.py and bench_fusion.py
run end to end with --device cpu at tiny sizes (every arm: reading, steady state, prediction; each augmentation; cache,
on the fly, baseline; two fold models and their fusions), so that the scripts a GPU session runs keep working where
CI has no GPU; their table arithmetic; and the report lines (README, docs/performance.md, the session's summary) read
from their tables."""
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

GPU_MACHINE = "NVIDIA H200 device, x86_64, 16 cores, Python 3.12.3, torch 2.11.0+cu130"


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


@pytest.mark.slow
def test_bench_gpu_augment_runs_every_arm_on_a_cpu(bench_data, capsys):
    import bench_gpu_augment
    assert bench_gpu_augment.main(["--quick", "--device", "cpu", "--images", "2", "--distinct", "1",
                                   "--batch-size", "1", "--recipe-workers", "1"]) == 0
    per_epoch, summary = common_tables(capsys.readouterr().out)
    arms = ["baseline", "all-on", "recipe", "recipe, 1 workers"]
    assert [(r[0], r[1]) for r in summary] == [(arm, codec) for arm in arms for codec in ("raw", "jpeg")]
    assert [r[5] for r in summary] == ["< 2%"] * 4 + ["reported"] * 4
    assert len(per_epoch) == 2 * len(summary) and all(float(r[3]) > 0 for r in summary)
    assert summary[-1][2] == "1 worker(s)" and summary[0][2] == "0 worker(s)"   # a CPU run reads in this process


@pytest.mark.slow
def test_bench_fusion_runs_every_step_on_a_cpu(bench_data, capsys):
    import bench_fusion
    assert bench_fusion.main(["--quick", "--device", "cpu", "--train-images", "4", "--val-images", "1"]) == 0
    out = capsys.readouterr().out
    (rows,) = common_tables(out)
    assert [r[0] for r in rows] == ["fold 0", "fold 1", "folds 0 + 1, maps averaged", "folds 0 + 1, quads fused",
                                    "folds 0 + 1, quads fused, either", "ensemble of the fold files",
                                    "ensemble of the fold files, either"]
    assert all(0 <= float(r[4]) <= 1 and float(r[6]) > 0 for r in rows)
    assert out.rstrip().splitlines()[-1].startswith("Fusion: ")
    assert not list(bench_data.glob("fusion-*")), "the folds, caches and runs are removed"


def test_the_augment_summary_marks_the_goal_for_the_first_two_arms_only():
    import bench_gpu_augment
    epochs = [{"samples_per_s": 50.0, "data_wait": 0.5, "seconds": 8.0, "loss": 3.0},
              {"samples_per_s": 100.0, "data_wait": 0.01, "seconds": 3.0, "loss": 2.0},
              {"samples_per_s": 120.0, "data_wait": 0.03, "seconds": 1.0, "loss": 1.9}]
    run = {"epochs": epochs, "workers": "4 worker(s)", "cores": 2.5, "step_alone": 130.0, "loader_alone": 260.0}
    per_epoch, summary = bench_gpu_augment.tables({("baseline", "raw"): run, ("all-on", "jpeg"): {
        **run, "epochs": epochs[:2]}, ("recipe", "raw"): run, ("recipe", "jpeg"): {"skipped": "no albumentations"}})
    assert [r[2] for r in per_epoch[:3]] == ["1 (start-up)", "2", "3"] and len(per_epoch) == 8
    # epochs 2 and 3: 420 samples in 4 s, the wait 0.03 + 0.03 s of it
    assert summary[0] == ["baseline", "raw", "4 worker(s)", "105.0", "1.50%", "< 2%", "yes", "2.5", "130.0", "260.0",
                          "2.00"]
    assert summary[1][4:7] == ["1.00%", "< 2%", "yes"]
    assert summary[2][5:7] == ["reported", ""]
    assert summary[3][3] == "skipped: no albumentations"


def recorded(name: str, output: str, machine: str = GPU_MACHINE) -> dict:
    """A result as run_all.py --record writes it, of this printed output."""
    from run_all import parse_tables
    return {"name": name, "command": f"python benchmarks/bench_{name}.py", "mode": "recorded", "machine": machine,
            "date": "2026-12-05 10:00 UTC", "seconds": 0.0, "returncode": 0, "output": output,
            "tables": parse_tables(output)}


AUGMENT_HEADER = ("arm", "codec", "reading", "samples/s", "waiting", "goal", "met", "busy CPU cores",
                  "step alone samples/s", "loader alone samples/s", "loader / step")
AUGMENT_OUTPUT = "Machine: x86_64\n\n| " + " | ".join(AUGMENT_HEADER) + " |\n" + "|---" * 11 + "|\n" + """\
| baseline | raw | 4 worker(s) | 118.2 | 0.4% | < 2% | yes | 2.1 | 121.0 | 400.0 | 3.31 |
| baseline | jpeg | 4 worker(s) | 117.5 | 1.1% | < 2% | yes | 3.0 | 121.0 | 250.0 | 2.07 |
| all-on | raw | 4 worker(s) | 117.9 | 0.6% | < 2% | yes | 2.2 | 121.0 | 380.0 | 3.14 |
| recipe | raw | 4 worker(s) | 80.1 | 31.0% | reported |  | 4.8 | 121.0 | 82.0 | 0.68 |
| recipe, 12 workers | raw | 12 worker(s) | 119.0 | 0.9% | reported |  | 6.1 | 121.0 | 240.0 | 1.98 |
"""


def test_the_readme_gpu_row_reads_the_default_geometry_figure_with_its_date_and_machine():
    import report
    old = recorded("gpu", "| codec | samples/s | time waiting for data |\n|---|---|---|\n| raw | 116.0 | 11.5% |\n")
    assert "not re-measured" in report.gpu_row({"gpu": old})   # before bench_gpu_augment ran: the old figure, said so
    results = {"gpu": old, "gpu_augment": recorded("gpu_augment", AUGMENT_OUTPUT)}
    row = report.gpu_row(results)
    assert row.startswith("raw pages 118.2 samples/s, 0.4% waiting; jpeg pages 117.5 samples/s, 1.1% waiting "
                          "(4 worker(s), pages stored resized: the default); everything on")
    assert "a six-transform albumentations recipe: raw 80.1/s, 31.0% waiting" in row
    assert row.endswith(f"recorded 2026-12-05 10:00 UTC ({GPU_MACHINE})") and "not re-measured" not in row
    goal = report.augment_wait(results)
    assert "baseline: raw pages: 118.2 samples/s, 0.4% waiting (met)" in goal and "all-on: raw" in goal
    assert "recipe, 12 workers: raw pages: 119.0 samples/s" in report.recipe_wait(results)
    cpu = recorded("gpu_augment", AUGMENT_OUTPUT, machine="no GPU, x86_64, 2 cores")
    assert report.gpu_row({"gpu_augment": cpu}).startswith("CPU only, not a GPU figure: ")


def test_the_report_says_which_fusion_scored_higher_and_the_time_to_the_same_hmean():
    import report
    from gpu_summary import lines
    fusion = recorded("fusion", "| predictions | command | precision | recall | hmean | detections | s per image |\n"
                                "|---|---|---|---|---|---|---|\n| fold 0 | x | 0.5 | 0.5 | 0.5000 | 9 | 0.1 |\n"
                                "| folds 0 + 1, maps averaged | x | 0.6 | 0.6 | 0.6000 | 9 | 0.1 |\n"
                                "| folds 0 + 1, quads fused | x | 0.7 | 0.4 | 0.5091 | 9 | 0.1 |\n\n"
                                "Fusion: --fuse maps scored the higher hmean: maps 0.6000, quads 0.5091\n")
    line = report.fusion_line({"fusion": fusion})
    assert line.startswith("--fuse maps scored the higher hmean: maps 0.6000, quads 0.5091 (fold 0 0.5000;")
    tta = recorded("time_to_accuracy", "Time to the same hmean: the first evaluation of each arm at or above 0.412, "
                                       "the highest\n\n| arm | hmean | samples seen | seconds | x cache |\n"
                                       "|---|---|---|---|---|\n| cache | 0.430 | 3840 | 12.0 | 1.00x |\n"
                                       "| fly | 0.412 | 3840 | 30.0 | 2.50x |\n")
    assert report.accuracy_line({"time_to_accuracy": tta}).startswith(
        "to an hmean of 0.412 (the best every arm reached): cache 12.0 s (1.00x, 3840 samples), fly 30.0 s (2.50x")
    summary = lines({"gpu_augment": recorded("gpu_augment", AUGMENT_OUTPUT), "fusion": fusion,
                     "time_to_accuracy": tta})
    assert summary[1] == ("  baseline, raw, 4 worker(s): 118.2 samples/s, 0.4% waiting (goal met), 2.1 cores busy, "
                          "loader / step 3.31")
    assert summary[4].startswith("  recipe, raw, 4 worker(s): 80.1 samples/s, 31.0% waiting, 4.8 cores")
    assert summary[-2].startswith("time_to_accuracy: to an hmean of 0.412") and summary[-1].startswith("fusion: ")


def common_tables(text: str) -> list[list[list[str]]]:
    """The rows of every markdown table in text (run_all.py's parser)."""
    from run_all import parse_tables
    return [t["rows"] for t in parse_tables(text)]


def test_without_cuda_the_gpu_scripts_measure_nothing(bench_data, capsys):
    """--device cuda (their default) on a machine without CUDA: a note, status 0, no data made."""
    import bench_fusion
    import bench_gpu
    import bench_gpu_augment
    import bench_time_to_accuracy
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    scripts = (bench_gpu, bench_gpu_augment, bench_time_to_accuracy, bench_fusion)
    assert all(script.main([]) == 0 for script in scripts)
    out = capsys.readouterr().out
    assert out.count("No CUDA device here") == len(scripts) and "|" not in out
    assert not list(bench_data.iterdir())


def test_gpu_session_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_session.sh")], env={**os.environ}).returncode == 0


def test_the_gpu_sessions_budgets_fit_one_device_run():
    """A device run is cut at 600 s: the full session's part budgets, its grace and reserve fit its own limit, and
    that limit leaves a minute for the machine's start and the copies."""
    import re
    text = (BENCHMARKS / "gpu_session.sh").read_text()
    full = text.split("else\n", 1)[1].split("\nfi\n", 1)[0]   # the branch of the full-size run
    budgets = {k: int(v) for k, v in re.findall(r"(\w+_TIMEOUT)=\$\{\w+:-(\d+)\}", full)}
    limit = int(re.search(r"SESSION_SECONDS=\$\{SESSION_SECONDS:-(\d+)\}", full).group(1))
    assert set(budgets) == {"AUG_TIMEOUT", "TTA_TIMEOUT", "FUSION_TIMEOUT", "GPU_TIMEOUT"}
    assert sum(budgets.values()) <= limit <= 540
