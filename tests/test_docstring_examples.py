"""The examples in the docstrings of east_cache run as written: every `>>>` example (its statements, in order, as
one program; printed output is not compared) and every paragraph indented by 4 spaces or more that is Python,
executed from a folder holding a tiny cache at cache/train. Docstrings are each object's own (__doc__), not those
it inherits; objects are every module of east_cache, its public classes and functions, and their methods."""
from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import textwrap

import pytest
from helpers import make_tiny_cache

import east_cache

EXAMPLE_CACHE = "cache/train"   # the cache the examples open, relative to the folder they run from


def public_objects():
    """(qualified name, object) of every importable module of east_cache, the classes and functions it defines
    under public names, and their methods and properties."""
    for info in pkgutil.walk_packages(east_cache.__path__, "east_cache."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:   # an optional extra (boto3, dask...) not installed: its docstrings go unchecked here
            continue
        yield info.name, module
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            yield f"{info.name}.{name}", obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                        yield f"{info.name}.{name}.{attr}", member


def examples(doc: str) -> list[str]:
    """The example programs of one docstring: its `>>>` statements joined, and each indented paragraph that
    compiles as Python (tables and diagrams do not)."""
    doc = inspect.cleandoc(doc)
    found = []
    statements = doctest.DocTestParser().get_examples(doc)
    if statements:
        found.append("".join(e.source for e in statements))
    for paragraph in re.split(r"\n[ \t]*\n", doc):
        lines = paragraph.splitlines()
        if not lines or not all(line.startswith("    ") for line in lines) or ">>>" in paragraph:
            continue
        code = textwrap.dedent(paragraph)
        try:
            compile(code, "<docstring>", "exec")
        except SyntaxError:
            continue
        found.append(code)
    return found


def all_examples() -> list[tuple[str, str]]:
    return [(name, code) for name, obj in public_objects() for code in examples(getattr(obj, "__doc__", None) or "")]


@pytest.mark.slow
def test_the_collector_finds_the_loader_example_and_skips_tables():
    found = dict(all_examples())
    assert "east_cache.reader.loader.Loader" in found and "east_loss(*model(image)" in found[
        "east_cache.reader.loader.Loader"]
    assert examples("Intro.\n\n    head     int64 (3,)   magic\n    index    int64 (R, F, 2)\n") == []
    assert examples("Intro.\n\n>>> x = 1\n>>> y = x + 1\n2\n") == ["x = 1\ny = x + 1\n"]


@pytest.mark.slow
def test_every_docstring_example_runs(tiny_data, tmp_path, monkeypatch):
    make_tiny_cache(tiny_data, tmp_path / EXAMPLE_CACHE)
    monkeypatch.chdir(tmp_path)
    ran = []
    for name, code in all_examples():
        try:
            exec(compile(code, f"<docstring of {name}>", "exec"), {"__name__": "__docstring_example__"})
        except Exception as e:   # noqa: BLE001 - each failure named with its object
            pytest.fail(f"the example in {name}'s docstring fails: {type(e).__name__}: {e}\n{code}")
        ran.append(name)
    assert ran, "no example found"
