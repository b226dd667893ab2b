"""The house's shape: every module imports, no import cycle among our modules, imports follow the data path
(ingest -> sample -> store -> build -> reader -> model -> predict -> train, the LAYERS below), the build side loads
no torch, no private name is imported from another module, no module over MAX_LINES.

The graph counts every import statement of a module, at any depth: a function-level import written to
dodge a cycle or a layer is still an edge here, so what it hides is found.
"""
from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("east_cache", "preprocess", "dataset")
MAX_LINES = 400   # the style rule's hard maximum per module


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


# The graph's tests each walk every module: imported, imports_torch and private_imports keep each module's answer
# (callers only read them), so that a module is parsed once per session, not once per test
@functools.cache
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


@pytest.mark.slow
def test_no_import_cycle_among_our_modules():
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@functools.cache
def imports_torch(path: Path) -> bool:
    """Whether a module imports torch (or a part of it), at any depth."""
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n == "torch" or n.startswith("torch.") for n in names):
            return True
    return False


def test_the_build_side_loads_no_torch():
    """dataset/ reads the store's format; the build side (the store, the build, its tools and convert) never imports
    the reader, dataset or torch, at any depth."""
    for name, path in MODULES.items():
        if name.startswith(("east_cache.store", "east_cache.build", "east_cache.tools", "east_cache.convert")):
            assert not {m for m in imported(name, path) if m.startswith(("east_cache.reader", "dataset"))}, name
            assert not imports_torch(path), name


def test_the_torch_check_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from torch.utils.data import DataLoader\n")
    (tmp_path / "b.py").write_text('"""Reads run folders without torch."""\nimport torchvision_like\n')
    assert imports_torch(tmp_path / "a.py") and not imports_torch(tmp_path / "b.py")


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_is_too_long():
    long = {name: n for name, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# The data path's layers, in order: a module may import modules of its own layer and of the layers before it.
#   base      what every layer shares (config, errors, a command's inputs, bounds, durable writes, locations, ...)
#   ingest -> sample -> store -> build   UFO files in, the warp and the targets, the cache on disk, making a cache:
#             the build writes the store's format; the store never imports the build
#   tools     the build side's user commands (with convert): info, verify, split, pseudo, check, runs; they import
#             ingest, sample, store and build only (no torch: test_the_build_side_loads_no_torch)
#   evaluate  everything that reads predictions (DetEval, scoring, review, ensembles): nothing of training, no torch;
#             of the layers after it only the model side uses it
#             (test_only_the_model_side_and_the_command_line_use_evaluate)
#   reader    the cache as a torch Dataset and batches
#   inspect   the commands that look at a cache through the reader (bench, show)
#   model -> predict -> train   EAST itself (model, loss, decode); what predicts with it; what trains it (which
#             validates through predict). The last layers may use anything below them, the command lines' helpers too.
LAYERS = ("base", "ingest", "sample", "store", "build", "tools", "evaluate", "reader", "inspect", "model", "predict",
          "train")
MODEL_SIDE = ("model", "predict", "train")
EVALUATE_USERS = ("east_cache.evaluate", "east_cache.model", "east_cache.predict", "east_cache.train", "east_cache.cli")
BASE = ("east_cache", "east_cache.atomic", "east_cache.config", "east_cache.errors", "east_cache.inputs",
        "east_cache.progress", "east_cache.budget", "east_cache.location", "east_cache.retry", "east_cache.bounds",
        "east_cache.augment")
ROOMS = {"east_cache.tools": "tools", "east_cache.convert": "tools"}   # by prefix
# The fronts, which dispatch to every side (lazily) and which no layer constrains: the command lines and the
# entry-point packages.
FRONTS = ("east_cache.cli", "preprocess", "preprocess.__main__", "dataset")
# Moved, kept one release: an old internal path a user may have imported (or run with python -m), now a re-export of
# the module it moved to (docs/guide.md, "Moved"). A shim is in no layer (it points up from its old
# room) and nothing of ours imports it (test_nothing_imports_a_moved_module); drop it, and its line here, next release.
SHIMS = {"east_cache.store.build": ("east_cache.build.run",),
         "east_cache.model.predict": ("east_cache.predict.predict", "east_cache.predict.pages"),
         "east_cache.model.train": ("east_cache.train.train",)}


def layer_of(name: str) -> str | None:
    """The layer of our module `name`; None for a front or a moved module's shim."""
    if name in FRONTS or name in SHIMS:
        return None
    if name in BASE:
        return "base"
    for prefix, layer in ROOMS.items():
        if name == prefix or name.startswith(prefix + "."):
            return layer
    sub = name.split(".")[1]
    if sub not in LAYERS:
        raise AssertionError(f"{name} belongs to no layer: add it to LAYERS, BASE, ROOMS or FRONTS")
    return sub


def against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import of a module b whose layer comes after a's (a front counts as after every layer,
    except for the model side, which may use the command lines' helpers)."""
    found = []
    for name, targets in sorted(graph.items()):
        mine = layer_of(name)
        if mine is None:
            continue
        for t in sorted(targets):
            theirs = layer_of(t)
            if theirs is None and mine in MODEL_SIDE:
                continue
            if theirs is None or LAYERS.index(theirs) > LAYERS.index(mine):
                found.append(f"{name} ({mine}) -> {t} ({theirs or 'front'})")
    return found


def test_nothing_imports_a_moved_module():
    """A shim re-exports the module it moved to and nothing else, and no module, test or benchmark of ours imports it
    (they use the new path), so that dropping it next release breaks nothing of ours."""
    for shim, targets in SHIMS.items():   # the targets, and the packages that hold them
        assert imported(shim, MODULES[shim]) - {t.rpartition(".")[0] for t in targets} == set(targets), shim
    graph = {name: imported(name, path) for name, path in MODULES.items() if name not in SHIMS}
    assert not [f"{name} -> {t}" for name, targets in graph.items() for t in targets if t in SHIMS]
    others = [p for folder in ("tests", "benchmarks") for p in (REPO / folder).rglob("*.py")
              if p.name != "test_imports.py"]
    assert not [str(p) for p in others for shim in SHIMS if re.search(rf"\b{re.escape(shim)}\b", p.read_text())]
    old = re.compile(r"from east_cache\.(store|model) import .*\b(build|predict|train)\b")
    assert not [str(p) for p in others if old.search(p.read_text())]


def test_a_moved_module_still_answers_at_its_old_path():
    from east_cache.build import run
    from east_cache.model import predict as old_predict
    from east_cache.model import train as old_train
    from east_cache.predict import pages, predict
    from east_cache.store import build
    from east_cache.train import train
    assert build.build_cache is run.build_cache
    for name in ("main", "predict", "predict_fused", "PredictConfig"):
        assert getattr(old_predict, name) is getattr(predict, name)
    for name in ("Page", "pages_from_split", "pages_from_folder", "input_geometry", "load_input", "plan_batches"):
        assert getattr(old_predict, name) is getattr(pages, name)
    for name in ("entry", "main", "run", "train"):
        assert getattr(old_train, name) is getattr(train, name)


@functools.cache
def private_imports(name: str, path: Path) -> list[str]:
    """'a: from b import _c' for every name starting with _ (not a dunder) that `name` imports from another of
    our modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        if base.split(".")[0] not in PACKAGES or base == name:
            continue
        found += [f"{name}: from {base} import {a.name}" for a in node.names
                  if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))]
    return found


def test_imports_follow_the_data_path():
    """ingest -> sample -> store -> build -> (tools, evaluate) -> reader -> inspect -> model -> predict -> train, over
    every import statement at any depth: the build side never reaches the reader or the model side, the reader never
    the model side, the model never predict or train, predict never train."""
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    bad = against_the_layers(graph)
    assert not bad, "imports against the data path:\n" + "\n".join(bad)


def test_the_layer_check_finds_an_import_against_the_path():
    graph = {"east_cache.build.run": {"east_cache.sample.make", "east_cache.reader.cache"},
             "east_cache.tools.info": {"east_cache.store.manifest", "east_cache.model.cli"},
             "east_cache.inspect.show": {"east_cache.reader.cache"}, "east_cache.cli": {"east_cache.model.cli"},
             "east_cache.reader.cache": {"east_cache.inspect.draw"},
             "east_cache.model.decode": {"east_cache.predict.x"},
             "east_cache.predict.predict": {"east_cache.model.decode", "east_cache.train.checkpoint"},
             "east_cache.train.validate": {"east_cache.predict.predict", "east_cache.cli"}}
    assert against_the_layers(graph) == ["east_cache.build.run (build) -> east_cache.reader.cache (reader)",
                                         "east_cache.model.decode (model) -> east_cache.predict.x (predict)",
                                         "east_cache.predict.predict (predict) -> east_cache.train.checkpoint (train)",
                                         "east_cache.reader.cache (reader) -> east_cache.inspect.draw (inspect)",
                                         "east_cache.tools.info (tools) -> east_cache.model.cli (model)"]


def users_of_evaluate(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import of an evaluate module b by a module a outside EVALUATE_USERS."""
    return [f"{name} -> {t}" for name, targets in sorted(graph.items()) if not name.startswith(EVALUATE_USERS)
            for t in sorted(targets) if t.startswith("east_cache.evaluate")]


def test_only_the_model_side_and_the_command_line_use_evaluate():
    """The predictions' room is used by the model side (NMS, validation, east-predict) and the command line (evaluate,
    review, ensemble) only: the build side and the reader read no predictions (pseudo reads a predictions file as
    a UFO file to build from, through ingest/ufofile.py, as convert and split read theirs)."""
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    bad = users_of_evaluate(graph)
    assert not bad, "evaluate imported outside the model side and the command line:\n" + "\n".join(bad)
    assert not any(t.startswith(("east_cache.reader", "east_cache.inspect", "east_cache.model", "east_cache.predict",
                                 "east_cache.train")) or imports_torch(MODULES[name])
                   for name, targets in graph.items() if name.startswith("east_cache.evaluate") for t in targets)


def test_the_users_check_finds_one():
    graph = {"east_cache.reader.cache": {"east_cache.evaluate.scoring"}, "east_cache.cli": {"east_cache.evaluate"},
             "east_cache.train.validate": {"east_cache.evaluate.deteval"}, "preprocess": {"east_cache.evaluate"}}
    assert users_of_evaluate(graph) == ["east_cache.reader.cache -> east_cache.evaluate.scoring",
                                        "preprocess -> east_cache.evaluate"]


@pytest.mark.slow
def test_no_module_imports_a_private_name_of_another():
    bad = [line for name, path in MODULES.items() for line in private_imports(name, path)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_the_private_import_check_finds_one(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("from east_cache.sample.make import _select, make_sample\nfrom os import _exit\n"
                    "from east_cache.reader import __all__\n\ndef f():\n    from .cache import _hidden\n")
    assert private_imports("east_cache.reader.mod", path) == [
        "east_cache.reader.mod: from east_cache.sample.make import _select",
        "east_cache.reader.mod: from east_cache.reader.cache import _hidden"]


def test_the_architecture_map_names_files_that_exist():
    """Every path docs/architecture.md names (east_cache/...py, or a room's file as room/name.py) exists, and every
    room of the package has its line in the map."""
    text = (REPO / "docs" / "architecture.md").read_text()
    rooms = sorted(p.name for p in (REPO / "east_cache").iterdir() if (p / "__init__.py").is_file())
    named = set(re.findall(r"east_cache/[\w/]+\.(?:py|html)", text))
    named |= {f"east_cache/{m}" for m in re.findall(rf"(?<![\w/])((?:{'|'.join(rooms)})/[\w/]+\.py)", text)}
    assert len(named) > 60 and not sorted(p for p in named if not (REPO / p).is_file())
    assert not [r for r in rooms if f"`east_cache/{r}/`" not in text]
