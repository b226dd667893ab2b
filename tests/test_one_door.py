"""Every write through one door: the package's source is read (ast), and every call that writes a file (open with a
write mode, write_text / write_bytes, savefig, torch.save, np.save*, json.dump, an image's save, shutil's copies,
os.replace / rename / link / symlink, os.open with a write flag, open_memmap, ONNX's export, a third-party writer)
must be inside the door (east_cache/atomic.py), write into the temp file the door yields (`with replacing(...) as
tmp` / `with writing(...) as f` in the same function), or be on the allow-list below, which says why. A test checks
that the scan finds a planted write."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_imports import MODULES

DOOR = "east_cache.atomic"
DOOR_FORMS = ("replacing", "writing")   # `with FORM(...) as NAME`: NAME is the door's temp file, written before it commits
WRITE_MODE = re.compile(r"[rwxabt+]{1,4}")
OPEN_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
WRITER_METHODS = {"write_text", "write_bytes", "savefig", "tofile", "to_csv", "imwrite", "export_chrome_trace",
                  "symlink_to", "hardlink_to", "link_to", "savez", "savez_compressed"}
SHUTIL = {"copy", "copy2", "copyfile", "copytree", "copyfileobj", "move"}
OS_NAMES = {"replace", "rename", "link", "symlink", "renames"}
THIRD_PARTY_WRITERS = {"SummaryWriter", "MlflowClient"}   # a library that writes its own files where it is pointed

# (module, function, why): the writes that do not go through the door, each with its reason
ALLOW = {
    ("east_cache.build.bucket_lock", "BucketLock._create.put",
     "the build's lock object in a bucket, created only where none is (exclusive create, 'xb'): it never replaces "
     "anything"),
    ("east_cache.build.journal", "append_rows",
     "the build's journal of finished rows: a file of the build's own naming in the cache's data/, under its lock, "
     "appended entry by entry so that a kill leaves a readable prefix (build/outdir.py deletes only such names)"),
    ("east_cache.build.journal", "_encode", "np.savez into an in-memory buffer (io.BytesIO): a journal entry's bytes"),
    ("east_cache.build.outdir", "build_lock",
     "the build's lock file, opened O_CREAT without O_TRUNC to be flock'd: no byte is written"),
    ("east_cache.build.run", "_build",
     "Manifest.save, which writes manifest.json through the door (write_atomic)"),
    ("east_cache.build.run", "_commit", "Manifest.save, which writes manifest.json through the door (write_atomic)"),
    ("east_cache.build.run", "_finish_file",
     "np.savez into a sidecar's temp name of the build's own (np.savez adds .npz to a name without it), renamed "
     "into place by atomic.publish"),
    ("east_cache.errors", "reader_gone",
     "opens /dev/null to put under a closed stdout (`| head`): writes no file"),
    ("east_cache.store.formats.npy", "NpyWriter.__init__",
     "the workers' map (r+) of a data file's staging file, X.npy.tmp of the build's own naming made by "
     "preallocate: rows written in place, then renamed into place by install (atomic.publish)"),
    ("east_cache.store.formats.npy", "NpyFormat.preallocate",
     "creates that staging file (open_memmap w+) and reserves its blocks (posix_fallocate), under the build's lock"),
    ("east_cache.store.formats.packed", "pack",
     "writes a packed data file's temp file (the build's own naming) by the kernel's copy_file_range, renamed into "
     "place by install (atomic.publish)"),
    ("east_cache.store.formats.zarr", "write_group",
     "zarr writes a group's chunk files itself, into the data file's temp folder of the build's own naming, renamed "
     "into place by install (atomic.publish)"),
    ("east_cache.store.remote.local_cache", "LocalCache._reserve",
     "creates a download's temp file of the local cache's own naming at its full size, under the space lock; "
     "published by atomic.publish once its checksum is checked"),
    ("east_cache.store.remote.locks", "_open",
     "a local cache's lock files, opened O_CREAT without O_TRUNC to be flock'd: no byte is written"),
    ("east_cache.store.remote.transfer", "download",
     "fills a download's temp file (r+b, made by LocalCache._reserve), published by atomic.publish once checked"),
    ("east_cache.train.report.mlflow_log", "MLflow.connect",
     "MLflow writes its own store where MLFLOW_TRACKING_URI points (its local default: mlflow.db and mlruns/ in the "
     "working folder); the run's files are its own"),
    ("east_cache.train.report.tensorboard_log", "TensorBoard.start",
     "tensorboard's SummaryWriter writes its own event files, a new name per writer (events.out.tfevents.*), in the "
     "run folder that the run checked against its inputs (RUN_WRITES)"),
    ("east_cache.train.report.wandb_log", "Wandb.start",
     "wandb writes its own run folder (OUT/wandb/, new names per run) inside the run folder that the run checked "
     "against its inputs (RUN_WRITES)"),
}


def door_names(fn: ast.AST) -> set[str]:
    """The names a function binds to the door's temp file: `with replacing(...) as tmp`, `with writing(...) as f`."""
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and callee(call) in DOOR_FORMS and isinstance(item.optional_vars,
                                                                                          ast.Name):
                    names.add(item.optional_vars.id)
    return names


def callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def receiver(call: ast.Call) -> str:
    """The name a method is called on (`np` of np.save, `os` of os.replace), else ''."""
    f = call.func
    if isinstance(f, ast.Attribute):
        v = f.value
        return v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
    return ""


def constant_modes(call: ast.Call) -> list[str]:
    return [a.value for a in [*call.args, *(k.value for k in call.keywords if k.arg == "mode")]
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and WRITE_MODE.fullmatch(a.value)]


def writes(call: ast.Call) -> str | None:
    """What kind of write a call is, or None."""
    name, on = callee(call), receiver(call)
    if name == "open" and on == "os":
        flags = {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)} if len(call.args) > 1 else set()
        return "os.open for writing" if flags & OPEN_WRITE_FLAGS else None
    if name in ("open", "open_group", "open_array"):
        modes = constant_modes(call)
        return f"open(..., {modes[0]!r})" if any(set(m) & set("wax+") for m in modes) else None
    if name == "open_memmap":
        return "open_memmap for writing" if any(set(m) & set("w+") for m in constant_modes(call)) else None
    if name == "load" and on in ("np", "numpy"):
        modes = [k.value.value for k in call.keywords if k.arg == "mmap_mode" and isinstance(k.value, ast.Constant)]
        return "np.load(mmap_mode=...) for writing" if any(set(m or "") & set("w+") for m in modes) else None
    if name.startswith("save") and on in ("np", "numpy"):
        return "np.save"
    if name in WRITER_METHODS:
        return name
    if name == "save" and isinstance(call.func, ast.Attribute):
        if on == "torch":
            return "torch.save"
        return "an object's save(PATH)" if call.args else None
    if name in ("dump",) and on in ("json", "pickle"):
        return f"{on}.dump"
    if name in SHUTIL and on == "shutil":
        return f"shutil.{name}"
    if name in OS_NAMES and on == "os":
        return f"os.{name}"
    if name == "rename" and len(call.args) == 1:
        return "Path.rename"
    if name == "replace" and len(call.args) == 1 and not call.keywords and on != "dataclasses":
        return "Path.replace"
    if name == "export" and on == "onnx":
        return "torch.onnx.export"
    if name == "init" and on == "wandb":
        return "wandb.init"
    if name in THIRD_PARTY_WRITERS:
        return name
    return None


def writes_of(module: str, source: str) -> list[tuple[str, str, int, str]]:
    """(module, function, line, kind) of every write outside the door that is not into the door's temp file."""
    found = []

    def visit(node: ast.AST, where: list[str], safe: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [*where, child.name], safe | door_names(child))
            elif isinstance(child, ast.ClassDef):
                visit(child, [*where, child.name], safe)
            else:
                if isinstance(child, ast.Call) and (kind := writes(child)):
                    args = [*child.args, *(k.value for k in child.keywords)]
                    args += [a.args[0] for a in args if isinstance(a, ast.Call) and callee(a) in ("str", "fspath")
                             and a.args]   # str(tmp): the door's temp file by its name
                    if not any(isinstance(a, ast.Name) and a.id in safe for a in args):
                        found.append((module, ".".join(where) or "<module>", child.lineno, kind))
                visit(child, where, safe)

    visit(ast.parse(source), [], set())
    return found


@pytest.mark.slow
def test_every_write_goes_through_the_door():
    allowed = {(m, f) for m, f, _ in ALLOW}
    found = [w for name, path in MODULES.items() if name != DOOR for w in writes_of(name, path.read_text())]
    outside = [f"{m}.{f} line {line}: {kind}" for m, f, line, kind in found if (m, f) not in allowed]
    assert not outside, "writes outside the door (east_cache/atomic.py) and its allow-list:\n" + "\n".join(outside)
    unused = sorted(allowed - {(m, f) for m, f, _, _ in found})
    assert not unused, f"allow-list entries with no write left: {unused}"


PLANTED = '''
import json, os, shutil, torch
import numpy as np
from east_cache.atomic import replacing, writing

def plot(fig, path):
    fig.savefig(path)

def log(path, rec):
    with open(path, "a") as f:
        f.write(json.dumps(rec))

def dump(obj, path, f):
    json.dump(obj, f)
    torch.save(obj, path)
    np.savez(path, a=1)
    shutil.copyfile(path, "x")
    os.replace(path, "y")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)

def fine(obj, path, image):
    with replacing(path) as tmp:
        torch.save(obj, tmp)
    with writing(path, "wb") as f:
        image.save(f, format="PNG")
    with open(path) as f, open(path, "rb") as g:
        return f.read(), g.read(), "a-b".replace("-", "+"), os.open(path, os.O_RDONLY)
'''


def test_the_door_check_finds_a_planted_write():
    found = [(f, kind) for _, f, _, kind in writes_of("east_cache.planted", PLANTED)]
    assert found == [("plot", "savefig"), ("log", "open(..., 'a')"), ("dump", "json.dump"), ("dump", "torch.save"),
                     ("dump", "np.save"), ("dump", "shutil.copyfile"), ("dump", "os.replace"),
                     ("dump", "os.open for writing")], found


@pytest.mark.parametrize("entry", sorted(ALLOW))
def test_every_allowed_write_says_why(entry):
    module, function, why = entry
    assert module in MODULES and len(why) > 40, entry


# The door itself: a link at the name is replaced, never written through; an appended log of a link becomes a file of
# its own; inside a command, a write over a declared input is refused even where the command's first check missed it.

import os  # noqa: E402

from east_cache.atomic import Appender, publish, write_atomic, writing  # noqa: E402
from east_cache.errors import CommandInputs, UsageError  # noqa: E402
from east_cache.inputs import Input, declare_inputs  # noqa: E402


def make_link(kind: str, target: Path, at: Path) -> None:
    at.symlink_to(target) if kind == "sym" else os.link(target, at)


@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_a_link_at_the_name_is_replaced_not_written_through(tmp_path, kind):
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's")
    def with_writing(p):
        with writing(p, "wb") as f:
            f.write(b"new")
    for k, write in enumerate((lambda p: write_atomic(p, "new"), lambda p: write_atomic(p, b"new"), with_writing)):
        out = tmp_path / f"out{k}"
        make_link(kind, mine, out)
        write(out)
        assert mine.read_text() == "the user's" and not out.is_symlink() and out.read_bytes() == b"new"
        assert out.stat().st_nlink == 1


@pytest.mark.parametrize("kind", ["sym", "hard"])
def test_an_appended_log_at_a_link_becomes_a_file_of_its_own(tmp_path, kind, capsys):
    mine = tmp_path / "aug.yaml"
    mine.write_text("transform: {}\n")
    log = tmp_path / "log.jsonl"
    make_link(kind, mine, log)
    append = Appender(log)
    append("one\n")
    append("two\n")
    assert mine.read_text() == "transform: {}\n"
    assert log.read_text() == "transform: {}\none\ntwo\n" and not log.is_symlink() and log.stat().st_nlink == 1
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and str(log) in err, err


def test_an_appended_log_at_a_fifo_does_not_wait(tmp_path):
    log = tmp_path / "log.jsonl"
    os.mkfifo(log)
    Appender(log)("one\n")
    assert log.is_file() and log.read_text() == "one\n"


def test_inside_a_command_the_door_refuses_to_replace_a_declared_input(tmp_path):
    """The input's own name, or its file under another name (a hard link): refused. A symbolic link to it is replaced,
    not followed (the command's first check, refuse_overwrite, refuses one up front)."""
    gt = tmp_path / "gt.json"
    gt.write_text("{}")
    os.link(gt, tmp_path / "hard.json")
    (tmp_path / "sym.json").symlink_to(gt)
    with CommandInputs():
        declare_inputs([Input("the ground truth --gt", gt)])
        for out in (gt, tmp_path / "hard.json"):
            for write in (lambda: write_atomic(out, "x"), lambda: Appender(out)("x\n"),
                          lambda: publish(tmp_path / "nothing", out)):
                with pytest.raises(UsageError, match="the ground truth --gt"):
                    write()
        write_atomic(tmp_path / "sym.json", "x")
    assert gt.read_text() == "{}" and (tmp_path / "hard.json").read_text() == "{}"
    assert not (tmp_path / "sym.json").is_symlink() and (tmp_path / "sym.json").read_text() == "x"
    write_atomic(tmp_path / "hard.json", "x")   # outside a command nothing is declared: the name is replaced
    assert gt.read_text() == "{}" and (tmp_path / "hard.json").read_text() == "x"


def test_a_file_the_command_wrote_in_an_input_folder_is_its_own_to_write_again(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with CommandInputs():
        declare_inputs([Input("the data set --data", root, tree=True)])
        write_atomic(root / "report.json", "1")   # new: beside the inputs
        write_atomic(root / "report.json", "2")   # its own, written again
        append = Appender(root / "log.jsonl")
        append("a\n")
        append("b\n")
    assert (root / "report.json").read_text() == "2" and (root / "log.jsonl").read_text() == "a\nb\n"
