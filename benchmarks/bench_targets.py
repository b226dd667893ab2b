"""Target-map speed: east_cache.targets.make_targets against the plain reference in tests/reference.py,
on document-like crops of ~120 random words. Prints a markdown table; asserts nothing.

    python benchmarks/bench_targets.py [--pages 3] [--words 120] [--input-size 1024] [--repeat 3]
"""
from __future__ import annotations

import argparse

import numpy as np
from common import FAST_REPEATS, machine, median_over, table
from reference import reference_targets

from east_cache.sample.targets import make_targets

DONT_CARE_SHARE = 0.15   # illegible or ignore-tagged words on a typical page


def random_page(rng: np.random.Generator, n_words: int, input_size: int):
    """(points, offsets, care) of a crop of printed lines: mostly near-horizontal words, a few vertical,
    some reaching past the crop's edge."""
    words = []
    for _ in range(n_words):
        w, h = rng.uniform(30, 300), rng.uniform(12, 60)
        deg = rng.uniform(-10, 10) + (90 if rng.random() < 0.05 else 0)
        t = np.deg2rad(deg)
        r = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        box = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
        words.append(box @ r.T + rng.uniform(-50, input_size + 50, 2))
    care = (rng.random(n_words) >= DONT_CARE_SHARE).astype(np.uint8)
    return np.concatenate(words).astype(np.float32), np.arange(n_words + 1, dtype=np.int64) * 4, care


def time_targets(pages: list, input_size: int, map_scale: float, repeat: int) -> list:
    """One table row: median seconds per page of make_targets and of the reference, and their ratio.
    The fast code gets FAST_REPEATS times more runs: they are cheap, and steady the median."""
    fast = median_over(pages, lambda p: make_targets(*p, input_size, map_scale), repeat * FAST_REPEATS)
    ref = median_over(pages, lambda p: reference_targets(*p, input_size, map_scale), repeat)
    return [f"{input_size}", f"{map_scale}", f"{fast * 1e3:.1f}", f"{ref * 1e3:.0f}", f"{ref / fast:.0f}x"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=3, help="random pages timed (default 3)")
    p.add_argument("--words", type=int, default=120, help="words per page (default 120)")
    p.add_argument("--input-size", type=int, default=1024, help="crop side in px (default 1024)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per page; the median is kept (default 3)")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    pages = [random_page(rng, a.words, a.input_size) for _ in range(a.pages)]
    rows = [time_targets(pages, a.input_size, s, a.repeat) for s in (0.5, 0.25)]
    print(f"make_targets vs reference, {a.pages} pages x {a.words} words; {machine()}\n")
    print(table(["input px", "map scale", "make_targets ms", "reference ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
