"""Shared by the benchmark scripts: sample data at benchmark scale, timing, markdown tables, machine line."""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

from preprocess.sampledata import write_sample_dataset

BENCH_DATA = Path(os.environ.get("EAST_BENCH_DATA", "/tmp/east-bench"))


def bench_pages(n_images: int, words_per_page: int = 120, page_size=(1600, 2200)) -> Path:
    """Document-like sample pages (default ~120 words, as in DESIGN.md's baseline measurement)."""
    root = BENCH_DATA / f"pages-{n_images}-{words_per_page}-{page_size[0]}x{page_size[1]}"
    return write_sample_dataset(root, n_images=n_images, words_per_page=words_per_page, page_size=page_size, seed=0)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
