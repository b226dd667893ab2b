"""The accepted range of every number a user gives, checked in one place before any work starts.

A numeric flag of any command is parsed by `flag_number(Bound(...))` (argparse's type=): a value of the wrong kind
or out of range ends in one `error:` line naming the flag and its range (exit status 2); an integer flag also takes
no value beyond +-FLAG_INT_LIMIT, which C code (a seed of torch or numpy, a count of threads or processes) cannot hold.
tests/test_numbers.py walks every command's parser and feeds each numeric flag a negative, a fraction, nan and a huge
value. A numeric argument of the
public API (east_cache.Loader, CacheDataset, EpochSampler) goes through `check_number`: a TypeError for a value of
the wrong kind (a str, a bool, a float where an integer is meant), a ValueError for one out of range or not finite;
both name the argument and its range.
"""
from __future__ import annotations

import argparse
import math
import os
import numbers
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    """The values a setting accepts: an integer (a bool is not one) or a finite real number, within the limits given."""
    integer: bool = True           # an integer; else any finite real number (an int included)
    least: float | None = None     # the smallest value accepted
    above: float | None = None     # values must be greater than this
    most: float | None = None      # the largest value accepted
    below: float | None = None     # values must be less than this
    note: str = ""                 # what a special value means, e.g. "0: off"

    def accepted(self) -> str:
        """In words: "an integer >= 1", "a finite number in [0, 1]", "a finite number > 0 (0: off)"."""
        kind = "an integer" if self.integer else "a finite number"
        low = (("[", self.least) if self.least is not None else ("(", self.above) if self.above is not None else None)
        high = (("]", self.most) if self.most is not None else (")", self.below) if self.below is not None else None)
        if low and high:
            where = f" in {low[0]}{number_text(low[1])}, {number_text(high[1])}{high[0]}"
        elif low:
            where = f" {'>=' if low[0] == '[' else '>'} {number_text(low[1])}"
        elif high:
            where = f" {'<=' if high[0] == ']' else '<'} {number_text(high[1])}"
        else:
            where = ""
        return kind + where + (f" ({self.note})" if self.note else "")

    def wrong_kind(self, value) -> bool:
        kind = numbers.Integral if self.integer else numbers.Real
        return isinstance(value, bool) or not isinstance(value, kind)

    def contains(self, value) -> bool:
        """Whether a number of the right kind is finite and within the limits."""
        return (math.isfinite(value)
                and (self.least is None or value >= self.least) and (self.above is None or value > self.above)
                and (self.most is None or value <= self.most) and (self.below is None or value < self.below))


def number_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def check_number(name: str, value, bound: Bound, none: bool = False):
    """value when it is what bound accepts (or None, when `none`); else a TypeError (wrong kind) or ValueError (out
    of range), "name=value: must be <range>"."""
    if value is None and none:
        return value
    if bound.wrong_kind(value):
        raise TypeError(f"{name}={value!r}: must be {bound.accepted()}{' or None' if none else ''}")
    if not bound.contains(value):
        raise ValueError(f"{name}={value!r}: must be {bound.accepted()}")
    return value


FLAG_INT_LIMIT = 2**31 - 1   # the largest integer a flag takes (a C int): seeds, counts, sizes


def flag_number(bound: Bound) -> Callable[[str], int | float]:
    """argparse's type= for a numeric flag: the text as an int or float within bound (an integer at most
    FLAG_INT_LIMIT in size), else argparse's one-line error, "argument --flag: TEXT: must be <range>"."""
    def parse(text: str) -> int | float:
        try:
            value = int(text) if bound.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {bound.accepted()}") from None
        if not bound.contains(value):
            raise argparse.ArgumentTypeError(f"{text}: must be {bound.accepted()}")
        if bound.integer and abs(value) > FLAG_INT_LIMIT:
            raise argparse.ArgumentTypeError(f"{text}: must be {bound.accepted()}, at most {FLAG_INT_LIMIT}")
        return value
    parse.__name__ = "integer" if bound.integer else "number"   # argparse names the type in some messages
    parse.bound = bound   # for the test that walks every parser
    return parse


# Ranges that several commands and the API share
COUNT = Bound(least=1)                              # a count of things that must exist: batches, steps, epochs
COUNT_OR_ZERO = Bound(least=0)                      # a count where 0 means none
SEED = Bound(least=0)                               # numpy's seeds are non-negative
POSITIVE = Bound(integer=False, above=0)            # a finite number > 0
MAX_PROCESSES = 1024   # worker processes or threads a flag may ask for: more would exhaust the machine, not use it
WORKERS = Bound(least=0, most=MAX_PROCESSES)        # worker processes where 0 means none (read in this process)
NON_NEGATIVE = Bound(integer=False, least=0)        # a finite number >= 0
THREADS = Bound(least=1, most=os.cpu_count() or 1, note="this machine's cores")   # torch's intra-op threads
LIST_MOST = 64                                      # values a list flag takes at most (show --epochs: a sheet's crops)
MAX_IMAGE_SIDE = 16384   # px: the longest side an image is resized to for a prediction (--image-size, --scales)
MAX_COORDINATE = 1e6     # px: the largest |x| or |y| a predicted word may have (a predictions file's words)
TRACKER_STARTUP_S = 30.0   # s: the longest a tracker's start-up call may take (east-train --report-to; every wait ends)


def flag_numbers(bound: Bound, most: int = LIST_MOST) -> Callable[[str], list[int]]:
    """argparse's type= for a flag of integers, "A-B" (A to B, both in) or "A,B,...": each within bound (as
    flag_number checks one), at most `most` of them, else argparse's one-line error."""
    one = flag_number(bound)

    def parse(text: str) -> list[int]:
        try:
            a, _, b = text.partition("-") if "-" in text.lstrip("-") else (text, "", "")
            if b and not 0 <= int(b) - int(a) < most:   # a range is sized before it is made
                raise ValueError(text)
            values = [one(str(v)) for v in (range(int(a), int(b) + 1) if b else text.split(","))]
        except (ValueError, argparse.ArgumentTypeError):
            values = []
        if not values or len(values) > most:
            raise argparse.ArgumentTypeError(f"{text!r}: give one or more integers as A,B,... or A-B (A <= B), at "
                                             f"most {most}, each {bound.accepted()}")
        return values
    parse.__name__, parse.bound = "integers", bound   # parse.bound: for the test that walks every parser
    return parse
