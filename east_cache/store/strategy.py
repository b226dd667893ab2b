"""`--strategy auto`: pick how many records go in a file from the cache size and the RAM at hand."""
from __future__ import annotations

import os

# A cache that fits in this share of available RAM stays in the page cache across epochs: one file.
WHOLE_RAM_SHARE = 0.5
# Records this large (an input_size of ~1800 px and up) are big enough to be files of their own.
BIG_RECORD_BYTES = 12 << 20
# Beyond this many samples, per-batch files become too many inodes and opens: group into chunks.
MANY_SAMPLES = 20_000
STRATEGY_BY_FLAG = "chosen with --strategy"   # the recorded reason of a strategy the user named
AUTO_REASON = "auto: "                        # starts the recorded reason of one picked here


def available_ram() -> int:
    """Bytes the kernel says it can hand out without swapping (MemAvailable), else total RAM."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def choose_strategy(n_samples: int, record_bytes: int, ram: int | None = None) -> tuple[str, str]:
    """(strategy, the reason in words)."""
    ram = available_ram() if ram is None else ram
    total = n_samples * record_bytes
    gib = lambda b: f"{b / 2**30:.1f} GiB"  # noqa: E731
    if total <= WHOLE_RAM_SHARE * ram:
        return "whole", (f"the cache ({gib(total)}) fits in half the available RAM ({gib(ram)}): one file stays in "
                         f"the page cache after the first epoch")
    if record_bytes >= BIG_RECORD_BYTES:
        return "image", (f"records are large ({record_bytes / 2**20:.0f} MiB each) and the cache ({gib(total)}) "
                         f"exceeds half the RAM ({gib(ram)}): one file per image")
    if n_samples > MANY_SAMPLES:
        return "chunked", (f"{n_samples} samples ({gib(total)}) exceed half the RAM ({gib(ram)}) and would make too "
                           f"many per-batch files: chunks of samples")
    return "batch", (f"the cache ({gib(total)}) exceeds half the RAM ({gib(ram)}): one file per training batch, "
                     f"read in one sequential read")
