"""Polygon words, kept as polygons: Total-Text's txt ground truth and a CTW1500-style line format.

The build's polygon rules then apply: a word with other than 4 points is a don't-care region, or
with --fit-polygons its minimum-area rectangle.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from east_cache.convert.icdar import Lines, per_file_pages
from east_cache.convert.rules import (
    ILLEGIBLE_TEXT,
    Page,
    Problems,
    Source,
    Word,
    clip,
    pairs,
    parse_numbers,
    polygon_problem,
)

# Total-Text marks a don't-care word with "#" as its orientation or its transcription.
TOTALTEXT_DONT_CARE = "#"
# One Total-Text record; a long one wraps over several lines, joined before matching.
_RECORD = re.compile(
    r"""^x:\s*\[\[(?P<x>[^\]]*)\]\],\s*y:\s*\[\[(?P<y>[^\]]*)\]\],\s*"""
    r"""ornt:\s*\[u?(?P<oq>['"])(?P<ornt>.*?)(?P=oq)\],\s*"""
    r"""transcriptions:\s*\[u?(?P<tq>['"])(?P<text>.*)(?P=tq)\]\s*$""")
_RECORD_START = "x:"
_LIST_SEP = re.compile(r"[\s,]+")
TEXT_MARK = "####"   # CTW1500 style: the coordinates end where this starts, so the text may hold anything


def read_totaltext(source: Source, problems: Problems) -> Iterator[Page]:
    """poly_gt_NAME.txt per image: x: [[x1 x2 ...]], y: [[y1 y2 ...]], ornt: [u'c'], transcriptions: [u'text']."""
    return per_file_pages(source, problems, _totaltext_file)


def _totaltext_file(path: Path, lines: Lines, problems: Problems) -> list[Word]:
    words = []
    for n, text in _records(path, lines, problems):
        m = _RECORD.match(text)
        xs = parse_numbers(_LIST_SEP.split(m["x"].strip())) if m else None
        ys = parse_numbers(_LIST_SEP.split(m["y"].strip())) if m else None
        if xs is None or ys is None or len(xs) != len(ys):
            problems.bad(f"{path}:{n}", f"{clip(text)!r} is not x: [[x1 x2 ...]], y: [[y1 y2 ...]], ornt: [u'...'], "
                                        f"transcriptions: [u'...'] with as many x as y")
            continue
        points = list(zip(xs, ys))
        if why := polygon_problem(points):
            problems.bad(f"{path}:{n}", why)
            continue
        label = m["text"]
        dont_care = TOTALTEXT_DONT_CARE in (label, m["ornt"]) or label == ILLEGIBLE_TEXT
        words.append(Word(points, label, dont_care))
    return words


def _records(path: Path, lines: Lines, problems: Problems) -> list[tuple[int, str]]:
    """(first line number, the record's lines joined) of each record."""
    records: list[tuple[int, str]] = []
    for n, text in lines:
        if text.lstrip().startswith(_RECORD_START):
            records.append((n, text.strip()))
        elif records:
            records[-1] = (records[-1][0], records[-1][1] + " " + text.strip())
        else:
            problems.bad(f"{path}:{n}", f"{clip(text)!r} comes before the first record (x: [[...]])")
    return records


def read_polygon(source: Source, problems: Problems) -> Iterator[Page]:
    """NAME.txt per image: x1,y1,x2,y2,...,xn,yn,####text; a line of numbers only is a word without text."""
    return per_file_pages(source, problems, _polygon_file)


def _polygon_file(path: Path, lines: Lines, problems: Problems) -> list[Word]:
    words = []
    for n, text in lines:
        coords, _, label = text.partition(TEXT_MARK)
        fields = coords.strip().rstrip(",").split(",")
        flat = parse_numbers(fields)
        if flat is None or len(flat) % 2:
            problems.bad(f"{path}:{n}", f"{clip(text)!r} is not x1,y1,...,xn,yn followed by {TEXT_MARK}text "
                                        f"(an even count of numbers)")
            continue
        points = pairs(flat)
        if why := polygon_problem(points):
            problems.bad(f"{path}:{n}", why)
            continue
        label = label.strip()
        words.append(Word(points, label, label == ILLEGIBLE_TEXT))
    return words
