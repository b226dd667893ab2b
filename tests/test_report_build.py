"""The README's build row, read from compare.py's table of the build per extra camera photo: the working tree's wall
time per photo, the on-the-fly baseline's sample over it and the floor, never another tree's row or the CPU clock's,
and "not measured" (with the command) where compare.py has not run."""
from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import report  # noqa: E402
from run_all import parse_tables  # noqa: E402

PER_PHOTO = """\
| codec | clock | tree | build ms per extra photo | floor ms | build / floor | baseline / build | working tree / tree |
|---|---|---|---|---|---|---|---|
| raw (the default codec here) | wall | 9a8d605 | 118 [104-133] | 68 [61-76] | 1.73 [1.53-1.94] | 7.4 [6.6-8.4] | 0.93 |
| raw (the default codec here) | CPU | working tree | 116 [107-120] | 65 [59-73] | 1.77 [1.63-1.84] | 7.6 [7.3-7.9] |  |
| raw (the default codec here) | wall | working tree | 110 [102-114] | 68 [61-76] | 1.60 [1.50-1.70] | 8.0 [7.6-8.3] |  |
| jpeg | wall | working tree | 121 [116-123] | 90 [83-97] | 1.36 [1.23-1.40] | 7.2 [7.2-7.4] |  |
"""


def compare_result(per_photo: str) -> dict:
    """compare.py's result as run_all.py writes it: the per-photo table is its third."""
    builds = "| data, options | working tree s |\n|---|---|\n| rendered pages | 2.20 |\n"
    cpu = "| data, options | working tree CPU s |\n|---|---|\n| rendered pages | 2.36 |\n"
    output = "\n".join([builds, cpu, per_photo])
    return {"compare": {"name": "compare", "output": output, "tables": parse_tables(output)}}


def test_the_build_row_is_the_working_trees_wall_time_per_photo_against_the_baseline_and_the_floor():
    row = report.build_row(compare_result(PER_PHOTO))
    assert row == ("110 ms of wall time, 8.0x faster than the on-the-fly baseline makes one training sample of it; "
                   "1.60x its floor (decode, resize, write)")
    assert report.headline(compare_result(PER_PHOTO))[0] == ["the default build, per extra camera photo "
                                                             "(8.7-12 MP), one job", row]


def test_without_compare_the_row_says_how_to_measure_it():
    assert report.build_row({}) == "not measured (python benchmarks/run_all.py --only compare)"
