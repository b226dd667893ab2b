"""Shared by the benchmark scripts: sample data at benchmark scale, timing, markdown tables, machine line.

Importing it puts the repository root (and tests/, home of the plain reference targets) on sys.path,
so that every script runs as `python benchmarks/NAME.py` from anywhere, without an install.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "tests")) if p not in sys.path]

from preprocess.tools.bench import memcpy_rate, table  # noqa: E402,F401  (one definition, shared with `preprocess bench`)
from preprocess.tools.sampledata import write_sample_dataset  # noqa: E402

BENCH_DATA = Path(os.environ.get("EAST_BENCH_DATA", "/tmp/east-bench"))
FAST_REPEATS = 10   # timed runs of fast code per run of its slow reference: they are cheap, and steady the median


def bench_pages(n_images: int, words_per_page: int = 120, page_size=(1600, 2200)) -> Path:
    """Document-like sample pages (default ~120 words, a dense printed page)."""
    root = BENCH_DATA / f"pages-{n_images}-{words_per_page}-{page_size[0]}x{page_size[1]}"
    return write_sample_dataset(root, n_images=n_images, words_per_page=words_per_page, page_size=page_size, seed=0)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def median_over(pages: list, fn, repeat: int) -> float:
    """Median over pages of each page's median_time of fn(page): one slow page does not sway it."""
    return statistics.median(median_time(lambda p=p: fn(p), repeat) for p in pages)


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
