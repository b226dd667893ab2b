"""Progress that suits where it is shown: a tqdm bar on a terminal, plain periodic lines in a log or a pipe.

One helper for the build, training and prediction: a bar's carriage returns make a log file one endless
line, so off a terminal the same progress is written as whole lines, as tqdm's miniters and mininterval
would space them: a line where another tenth of the work is done, but at most one every PLAIN_MIN_S
seconds, and one every PLAIN_EVERY_S seconds while work goes on between them (work of unknown size: by
time only); and, where the work ends past the last line, one that says where it ended. Work done within
PLAIN_MIN_S (hashing 16 images) is one line.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm

PLAIN_STEP = 0.1       # share of the total between two plain lines
PLAIN_MIN_S = 5.0      # s; the shortest time between two plain lines (tqdm's mininterval)
PLAIN_EVERY_S = 30.0   # s; the longest silence between two plain lines while work goes on


class Progress:
    """update(n) as work is done, set_note(loss=...) for figures shown beside the count, close() at the end (or
    use it as a context manager). total None: unknown, lines by time only. initial: work done before (a resumed
    run). quiet: nothing is shown. stream: where it is shown (default stderr)."""

    def __init__(self, total: int | None, unit: str, quiet: bool = False, desc: str = "", initial: int = 0,
                 leave: bool = True, stream: TextIO | None = None):
        self.total, self.unit, self.desc, self.done, self.start = total, unit, desc, initial, initial
        self.stream = stream if stream is not None else sys.stderr
        self.quiet, self.note = quiet or total == 0, ""
        self.t0 = self.last_line = time.perf_counter()
        self.next_share = (initial / total if total else 0.0) + PLAIN_STEP
        self.shown = initial   # the count the last plain line gave
        tty = not self.quiet and _isatty(self.stream)
        self.bar = (tqdm(total=total, unit=unit, desc=desc or None, initial=initial, leave=leave, dynamic_ncols=True,
                         file=self.stream) if tty else None)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(failed=kind is not None)

    def set_note(self, **values) -> None:
        """Figures shown beside the count: the bar's postfix, or the end of the next plain line."""
        if self.bar is not None:
            self.bar.set_postfix(values)
        self.note = "; " + ", ".join(f"{k} {v}" for k, v in values.items())

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif not self.quiet and self._line_due():
            self._line()

    def close(self, failed: bool = False) -> None:
        """The end: the bar closed; off a terminal, a last line where the work went on past the last one (not when
        it failed: the error says where it stopped)."""
        if self.bar is not None:
            self.bar.close()
        elif not self.quiet and not failed and self.done != self.shown:
            self._line()

    def _line_due(self) -> bool:
        now = time.perf_counter()
        tenth = bool(self.total) and self.done >= self.next_share * self.total
        if tenth:
            while self.next_share * self.total <= self.done:
                self.next_share += PLAIN_STEP
        return now - self.last_line >= PLAIN_EVERY_S or (tenth and now - self.last_line >= PLAIN_MIN_S)

    def _line(self) -> None:
        self.last_line, self.shown = time.perf_counter(), self.done
        dt = self.last_line - self.t0
        rate = (self.done - self.start) / dt if dt > 0 else 0.0
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        left = (self.total or 0) - self.done
        eta = f", ETA {left / rate:.0f} s" if left > 0 and rate > 0 else ""
        head = f"{self.desc}: " if self.desc else ""
        print(f"  {head}{count} {self.unit} ({rate:.1f}/s{eta}){self.note}", file=self.stream, flush=True)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):   # a closed stream, or a file-like one without a terminal
        return False
