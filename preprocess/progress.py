"""Progress that suits where it is shown: a tqdm bar on a terminal, a plain line every 10 % in a log."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, unit: str, quiet: bool = False):
        self.total, self.unit, self.done, self.t0 = total, unit, 0, time.perf_counter()
        self.quiet = quiet or total == 0
        self.bar = tqdm(total=total, unit=unit, dynamic_ncols=True) if not self.quiet and sys.stderr.isatty() else None
        self.next_line = 0.1

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif not self.quiet and self.done >= self.next_line * self.total:
            dt = time.perf_counter() - self.t0
            rate = self.done / dt if dt > 0 else 0.0
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            print(f"  {self.done}/{self.total} {self.unit} ({rate:.1f}/s, ETA {eta:.0f} s)", file=sys.stderr, flush=True)
            while self.next_line * self.total <= self.done:
                self.next_line += 0.1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
