"""Progress that suits where it is shown: a tqdm bar on a terminal, a plain line every 10 % in a log."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, unit: str, quiet: bool = False, desc: str = "", initial: int = 0):
        self.total, self.unit, self.done, self.t0 = total, unit, initial, time.perf_counter()
        self.quiet, self.desc, self.note, self.start = quiet or total == 0, desc, "", initial
        self.bar = (tqdm(total=total, unit=unit, desc=desc or None, initial=initial, dynamic_ncols=True)
                    if not self.quiet and sys.stderr.isatty() else None)
        self.next_line = (initial / total if total else 0) + 0.1

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif not self.quiet and self.done >= self.next_line * self.total:
            dt = time.perf_counter() - self.t0
            rate = (self.done - self.start) / dt if dt > 0 else 0.0
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            head = f"  {self.desc}: " if self.desc else "  "
            print(f"{head}{self.done}/{self.total} {self.unit} ({rate:.1f}/s, ETA {eta:.0f} s){self.note}",
                  file=sys.stderr, flush=True)
            while self.next_line * self.total <= self.done:
                self.next_line += 0.1

    def set_note(self, **values) -> None:
        """Figures shown beside the count: the bar's postfix, or the end of the next plain line."""
        if self.bar is not None:
            self.bar.set_postfix(values)
        self.note = "; " + ", ".join(f"{k} {v}" for k, v in values.items())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
