"""The house's shape: every module imports, no import cycle among our modules, no module over MAX_LINES.

The graph counts every import statement of a module, at any depth: a function-level import written to
dodge a cycle is still an edge here, so the cycle it hides is found.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("east_cache", "preprocess", "dataset")
MAX_LINES = 400   # the style rule's hard maximum per module


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """Our modules that `name` imports: `import a.b`, `from a import b` (b a module or a name in a)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:   # a.b.c where only a.b is a module of ours
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_our_packages_hold_modules():
    assert {"east_cache.store.manifest", "east_cache.reader.cache", "east_cache.model.decode"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.endswith("__main__")))  # __main__ runs the CLI
def test_every_module_imports(name):
    importlib.import_module(name)


def test_no_import_cycle_among_our_modules():
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_store_does_not_depend_on_its_readers():
    """dataset/ reads the store's format; the store (build side) never imports dataset or torch."""
    for name, path in MODULES.items():
        if name.startswith("east_cache.store"):
            assert not {m for m in imported(name, path) if m.startswith("east_cache.reader")}, name
            assert "torch" not in path.read_text(), name


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_is_too_long():
    long = {name: n for name, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
