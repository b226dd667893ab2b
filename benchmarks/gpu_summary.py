"""The last lines of benchmarks/gpu_session.sh: the session's figures in a few lines, read from the results it
recorded (a device run's output tail is what comes back first), with the same words as docs/performance.md's goals.

    python benchmarks/gpu_summary.py benchmarks/results
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plot import load
from report import accuracy_line, fusion_line, gpu_wait, having, nvjpeg_line, predict_line

PARTS = ("gpu_augment", "time_to_accuracy", "fusion", "gpu")


def lines(results: dict) -> list[str]:
    out = []
    if "gpu_augment" in results:
        out.append("gpu_augment (epochs after the first; goal: under 2% waiting for baseline and all-on):")
        for r in having(results, "gpu_augment", "goal"):
            if not r["samples/s"][:1].isdigit():
                out.append(f"  {r['arm']}, {r['codec']}: {r['samples/s']}")
                continue
            met = f" (goal {'met' if r['met'] == 'yes' else 'missed'})" if r["met"] else ""
            out.append(f"  {r['arm']}, {r['codec']}, {r['reading']}: {r['samples/s']} samples/s, {r['waiting']} "
                       f"waiting{met}, {r['busy CPU cores']} cores busy, loader / step {r['loader / step']}")
        if not having(results, "gpu_augment", "goal"):
            out.append("  no table: " + (results["gpu_augment"]["output"].strip().splitlines() or ["no output"])[-1])
    if "time_to_accuracy" in results:
        out.append(f"time_to_accuracy: {accuracy_line(results)}")
    if "fusion" in results:
        out.append(f"fusion: {fusion_line(results)}")
    if "gpu" in results:
        out += [f"gpu, steady: {gpu_wait(results)}", f"gpu, nvJPEG: {nvjpeg_line(results)}",
                f"gpu, prediction: {predict_line(results)}"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="the folder of NAME.json files the session recorded")
    a = p.parse_args(argv)
    results = {k: v for k, v in load(a.results).items() if k in PARTS}
    print("\n".join(lines(results)) or f"no result of {', '.join(PARTS)} in {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
