"""Peak memory of the build's parent process for 50 vs 400 sample pages: it must not grow with the
dataset, because workers write samples in place and return only checksums and word quads.
Runs each build under /usr/bin/time -v (peak RSS of the largest process in the tree) and reports
the parent's own peak (getrusage SELF) beside it. Prints a markdown table; asserts nothing.

    python benchmarks/bench_build_memory.py [--sizes 50,400] [--input-size 512]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import bench_pages, machine, table

REPO = Path(__file__).resolve().parents[1]
PARENT = """
import resource, sys
from east_cache.cli import main
rc = main(sys.argv[1:])
print("parent_maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(rc)
"""


def measure(data: Path, out: Path, input_size: int) -> tuple[int, int, float]:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-c", PARENT, "build", "--data", str(data), "--out", str(out),
           "--input-size", str(input_size), "--strategy", "chunked", "--jobs", "2", "--quiet"]
    err = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stderr
    tree = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    parent = int(re.search(r"parent_maxrss_kb (\d+)", err).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time .*: (\S+)", err).group(1)
    parts = [float(x) for x in wall.split(":")]
    return parent, tree, sum(v * 60 ** i for i, v in enumerate(reversed(parts)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="50,400", help="page counts (default 50,400)")
    p.add_argument("--input-size", type=int, default=512, help="crop side, px (default 512)")
    a = p.parse_args()
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        data = bench_pages(n)
        with tempfile.TemporaryDirectory(prefix="east-bench-mem-") as tmp:
            parent, tree, wall = measure(data, Path(tmp) / "cache", a.input_size)
        rows.append([n, f"{parent / 1024:.0f}", f"{tree / 1024:.0f}", f"{wall:.0f}"])
    print(f"Machine: {machine()}. Pages of ~120 words, input {a.input_size}, --jobs 2, chunked.\n")
    print(table(["pages", "parent peak RSS (MiB)", "/usr/bin/time -v max RSS (MiB)", "wall (s)"], rows))


if __name__ == "__main__":
    main()
