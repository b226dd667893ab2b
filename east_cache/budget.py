"""What a process may keep in memory: ByteBudget, the bytes it may still spend keeping what it derives again and
again (and how many it starts with for each thing a page-mode reader keeps), and available_ram, the RAM the machine
can hand out (by which the build's --strategy auto and --image-codec auto choose, and a zarr file its chunks).

A page-mode reader (east_cache/reader/pages.py) and the coverage replay (tools/coverage.py) draw crops of the
same pages epoch after epoch. What they derive from a page is the same every time, so they keep it, each kind
of thing within its own budget, shared by all the pages of the process; past it, the same results are derived
again each time (the crops are the same either way, only slower to make).
"""
from __future__ import annotations

import os


class ByteBudget:
    """Bytes left to spend, per process, on one kind of kept thing."""
    PAGE_WORDS = 256 << 20     # pages' word boxes, polygons, word tables and their draws' cut counts (crop.PageWords)
    MAPS_PATCHES = 128 << 20   # pages' maps patches, by set of cut words (crop.Patches)
    BEST_ORIGINS = 64 << 20    # each drawn word's best origins (crop_draw.CropDraw)

    def __init__(self, nbytes: int):
        self.left = nbytes

    def take(self, nbytes: int) -> bool:
        """Whether nbytes more fit; if so, they are spent (all or nothing)."""
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True

    def spend(self, nbytes: int) -> None:
        """Spend nbytes, even past what is left (for a thing whose size is known only once it is made: the
        last one kept may overrun the budget by its own size)."""
        self.left -= nbytes

    @property
    def spent(self) -> bool:
        """Nothing is left: keep no more."""
        return self.left <= 0


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
