"""One member of a big JSON object at a time, with the standard library's decoder.

`json.load` of a UFO file builds every word of every image as Python objects at once, several times
the file's size, all of it held by the build's parent process. `members(f, "images")` reads the file a
piece at a time and decodes one image entry at a time with `json.JSONDecoder.raw_decode` (the same
C scanner), so the memory held is one piece of text plus the entry being decoded.

Errors carry the line and column in the whole file, as `json.JSONDecodeError` does. JSON lets an object
name a key twice and the decoder keeps the last; an object that does is decoded as a `Duplicates` dict that
lists those keys, so that the caller can refuse it instead of merging silently.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TextIO

CHUNK = 1 << 18                          # characters read at a time
_NOT_SPACE = re.compile(r"[^ \t\n\r]")   # JSON's whitespace is these four characters only
_NUMBER_TAIL = re.compile(r"[0-9eE.+-]*")  # what may still follow a decoded number's prefix


class JSONError(ValueError):
    def __init__(self, msg: str, lineno: int, colno: int):
        super().__init__(f"{msg}: line {lineno} column {colno}")
        self.msg, self.lineno, self.colno = msg, lineno, colno


class NotAnObject(ValueError):
    """Valid JSON, but the top level is not an object or `key` does not hold one."""


class Duplicates(dict):
    """An object that named some keys more than once: the last value of each, as json.loads gives."""
    __slots__ = ("keys_repeated",)


def _object(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    seen, repeated = set(), []
    for k, _ in pairs:
        if k in seen and k not in repeated:
            repeated.append(k)
        seen.add(k)
    d = Duplicates(d)
    d.keys_repeated = repeated
    return d


def repeated_keys(obj) -> list[str]:
    """The keys an object decoded by this module named more than once, in file order; [] for anything else."""
    return obj.keys_repeated if isinstance(obj, Duplicates) else []


_DECODER = json.JSONDecoder(object_pairs_hook=_object)


class _Text:
    """The part of the file in hand (`buf`), a position in it, and where `buf` starts in the file."""

    def __init__(self, f: TextIO, chunk: int):
        self.f, self.chunk = f, chunk
        self.buf, self.pos, self.eof = "", 0, False
        self.lines = 0        # newlines in the text dropped from the front of buf
        self.line_start = 0   # index in the file of the first character after the last dropped newline
        self.start = 0        # index in the file of buf[0]

    def more(self) -> bool:
        """Append the next piece, dropping what lies before pos; False at the end of the file. A piece
        is at least as long as the text kept, so that an entry longer than a piece is re-read a
        logarithmic, not linear, number of times."""
        if self.eof:
            return False
        text = self.f.read(max(self.chunk, len(self.buf) - self.pos))
        if not text:
            self.eof = True
            return False
        dropped = self.buf[:self.pos]
        last = dropped.rfind("\n")
        if last >= 0:
            self.lines += dropped.count("\n")
            self.line_start = self.start + last + 1
        self.start += self.pos
        self.buf, self.pos = self.buf[self.pos:] + text, 0
        return True

    def peek(self) -> str:
        """The next character that is not whitespace, moving pos onto it; "" at the end of the file."""
        while True:
            m = _NOT_SPACE.search(self.buf, self.pos)
            if m:
                self.pos = m.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self.more():
                return ""

    def value(self):
        """Decode the JSON value at pos (after whitespace) and move past it."""
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self.more():   # perhaps only cut off by the end of the piece
                    continue
                raise self.error(e.pos, e.msg) from None
            except RecursionError:   # the C scanner recurses once per level of nesting
                raise self.error(self.pos, "arrays or objects nested more deeply than the decoder can follow "
                                           "(a UFO entry needs 5 levels)") from None
            if type(v) in (int, float) and _NUMBER_TAIL.fullmatch(self.buf, end) and self.more():
                continue   # "12" then "3.5" in the next piece: the number was cut, not ended
            self.pos = end
            return v

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise self.error(self.pos, f"Expecting {what}")
        self.pos += 1

    def key(self) -> str:
        if self.peek() != '"':
            raise self.error(self.pos, "Expecting property name enclosed in double quotes")
        k = self.value()
        self.expect(":", "':' delimiter")
        return k

    def error(self, pos: int, msg: str) -> JSONError:
        head = self.buf[:pos]
        last = head.rfind("\n")
        if last >= 0:
            return JSONError(msg, self.lines + head.count("\n") + 1, pos - last)
        return JSONError(msg, self.lines + 1, self.start + pos - self.line_start + 1)


def members(f: TextIO, key: str, chunk: int = CHUNK, rest: dict | None = None) -> Iterator[tuple[str, object]]:
    """(name, value) of each member of the object at top-level `key`, in file order, decoded one at a
    time. The whole file is checked to be valid JSON; the other top-level members are decoded and dropped, or
    put in `rest` as they are met. Raises JSONError for invalid JSON, NotAnObject when the file is valid JSON
    without such an object."""
    t = _Text(f, chunk)
    if t.peek() != "{":
        t.value()                          # invalid JSON raises here, with its position
        raise NotAnObject("the top level is not an object")
    found = False
    for name in _names(t):
        if name == key and t.peek() == "{":
            found = True
            for member in _names(t):
                yield member, t.value()
        else:
            value = t.value()
            if rest is not None:
                rest[name] = value
    if t.peek() != "":
        raise t.error(t.pos, "Extra data")
    if not found:
        raise NotAnObject(f"no {key!r} object at the top level")


def _names(t: _Text) -> Iterator[str]:
    """The member names of the object whose "{" is at pos. After each name, pos is at the member's value,
    which the caller reads (whole or member by member) before asking for the next name."""
    t.pos += 1   # the "{"
    if t.peek() == "}":
        t.pos += 1
        return
    while True:
        yield t.key()
        if t.peek() == ",":
            t.pos += 1
            continue
        t.expect("}", "',' delimiter")
        return
