"""Nothing lost, nothing leaked: a build refuses a manifest.json it did not write, collects every stale file of
its own, leaves no temp file or empty --out behind when it fails, and tells the truth when it fails after the
commit. Ctrl-C ends a build with one line, and no worker outlives it, even when the build itself is SIGKILLed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import INTERRUPTS, small_config

from east_cache.cli import main as cli_main
from east_cache.errors import BuildError, CacheError, DataError
from east_cache.build import run as build_module
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.sidecar import quads_path

REPO = Path(__file__).resolve().parents[1]
# Runs the rest of the command line with SIGINT at its default: a test run as a shell's background job inherits
# it ignored, and an ignored signal stays ignored across exec.
DEFAULT_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def build(data, out, **over):
    return build_cache(small_config(**{"strategy": "chunked", "chunk_size": 3, **over}), [data], out, jobs=1,
                       quiet=True)


def cli_build(data, out, *extra) -> int:
    return cli_main(["build", "--data", str(data), "--out", str(out), "--quiet", "--jobs", "1", "--input-size", "96",
                     "--image-size", "192", "--strategy", "chunked", "--chunk-size", "3", *extra])


def files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*")} if out.exists() else set()


@pytest.mark.parametrize("content", [b'{"name": "my dataset", "version": 3}', b"not json at all", b"\xff\xfe\x00",
                                     b"[1, 2]", None])
def test_a_manifest_no_build_of_ours_wrote_is_refused_not_overwritten(data_copy, tmp_path, capsys, content):
    out = tmp_path / "c"
    out.mkdir()
    theirs = out / "manifest.json"
    if content is None:
        theirs.mkdir()
    else:
        theirs.write_bytes(content)
    assert cli_build(data_copy, out) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no build of this tool wrote" in err
    assert str(out) in err and "Traceback" not in err
    assert theirs.is_dir() if content is None else theirs.read_bytes() == content
    assert files(out) == {"manifest.json"}, "nothing was written beside it"


def test_our_own_manifest_of_another_format_version_is_rebuilt(data_copy, tmp_path):
    out = tmp_path / "c"
    build(data_copy, out)
    m = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**m, "format_version": 0}))
    assert not build(data_copy, out).up_to_date and Manifest.load(out).format_version == m["format_version"]


def test_stale_sidecars_are_collected_with_their_data_files(data_copy, tmp_path):
    out = tmp_path / "c"
    for seed in (0, 1, 2):
        build(data_copy, out, seed=seed)
    named = [f.name for f in Manifest.load(out).files]
    assert sorted(p.name for p in (out / "data").glob("*.quads.npz")) == sorted(
        quads_path(data_path(out, n)).name for n in named), "one sidecar per data file, none of older builds"


def _undecodable(data: Path) -> None:
    """The first image, so that a 1-job build fails before it finishes any file (finished ones are kept)."""
    victim = min((data / "images").iterdir())
    victim.write_bytes(b"this is no image")


def test_a_failed_first_build_leaves_nothing_behind(data_copy, tmp_path):
    out = tmp_path / "new" / "c"
    _undecodable(data_copy)
    with pytest.raises(DataError, match="cannot read the image"):
        build(data_copy, out)
    assert not (tmp_path / "new").exists(), "the --out it created (and its parent), its data/ and lock are gone"


def test_a_failed_first_build_into_the_users_empty_folder_keeps_the_folder(data_copy, tmp_path):
    out = tmp_path / "c"
    out.mkdir()
    (data_copy / "ufo" / "train.json").write_text("{ broken")
    with pytest.raises(DataError, match="invalid JSON"):
        build(data_copy, out)
    assert out.is_dir() and files(out) == set()


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_failed_rebuild_leaves_no_temp_file_and_the_previous_cache_as_it_was(data_copy, tmp_path, codec):
    out = tmp_path / "c"
    build(data_copy, out, image_codec=codec)
    before = {p: p.read_bytes() for p in (out / "data").iterdir()}
    _undecodable(data_copy)
    with pytest.raises(DataError):
        build(data_copy, out, seed=4, image_codec=codec)
    leftovers = [p.name for p in (out / "data").iterdir() if p not in before]
    assert not any(".tmp" in n for n in leftovers), leftovers
    assert all(p.read_bytes() == b for p, b in before.items()) and (out / ".lock").exists()


def test_cleanup_that_fails_after_the_commit_says_the_new_cache_is_complete(data_copy, tmp_path, capsys, monkeypatch):
    out = tmp_path / "c"
    build(data_copy, out)

    def fail(out, keep):
        raise PermissionError(13, "Permission denied", str(out / "data" / "old.npy"))
    monkeypatch.setattr(build_module, "collect_garbage", fail)
    assert cli_build(data_copy, out, "--seed", "5") == 0
    err = capsys.readouterr().err
    assert "warning: the new cache is complete" in err and "old.npy" in err and "unchanged" not in err
    assert Manifest.load(out).config.seed == 5


@INTERRUPTS
@pytest.mark.parametrize("where", ["garbage collection", "manifest's sync"])
def test_ctrl_c_after_the_commit_says_the_new_cache_is_complete(data_copy, tmp_path, capsys, monkeypatch, where,
                                                                interrupt):
    out = tmp_path / "c"
    build(data_copy, out)
    if where == "garbage collection":
        monkeypatch.setattr(build_module, "collect_garbage", lambda out, keep: interrupt())
    else:
        real = Manifest.save

        def renamed_then_interrupted(self, cache_dir):
            real(self, cache_dir)
            interrupt()
        monkeypatch.setattr(Manifest, "save", renamed_then_interrupted)
    assert cli_build(data_copy, out, "--seed", "6") == 130
    err = capsys.readouterr().err
    assert "interrupted after the new cache was committed: it is complete" in err and err.count("\n") == 1
    assert Manifest.load(out).config.seed == 6


def test_a_manifest_failing_after_its_rename_is_not_called_unchanged(data_copy, tmp_path, monkeypatch):
    out = tmp_path / "c"
    build(data_copy, out)
    real = Manifest.save

    def durable_fails(self, cache_dir):
        real(self, cache_dir)
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(Manifest, "save", durable_fails)
    with pytest.raises(BuildError, match="the new cache is in place, but making it durable failed"):
        build(data_copy, out, seed=7)


def _session_processes(sid: int) -> dict[int, str]:
    """{pid: command line} of the live processes in session sid (the build and every process it started)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):   # the process ended while we looked
            continue
    return found


def _start(data, out, *extra) -> subprocess.Popen:
    """A 2-job build in its own session, with SIGINT at its default (a shell's background job ignores it)."""
    args = [sys.executable, "-c", DEFAULT_SIGINT, "-m", "preprocess", "build", "--data", str(data), "--out", str(out),
            "--quiet", "--jobs", "2", "--strategy", "chunked", "--chunk-size", "1", "--variants", "40",
            "--geometry", "build",
            "--input-size", "96", "--image-size", "192", *extra]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _wait_for_workers(proc: subprocess.Popen, out: Path) -> None:
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if len(list((out / "data").glob("*.npy"))) >= 4 and len(_session_processes(proc.pid)) >= 3:
            return
        time.sleep(0.01)
    pytest.fail(f"the build ended (rc {proc.returncode}) before it could be interrupted")


WORKERS_GONE_S = 60   # how long a killed build's workers may take to notice and leave, on a busy machine


def _gone(sid: int, seconds: float = WORKERS_GONE_S) -> dict[int, str]:
    deadline = time.time() + seconds
    while _session_processes(sid) and time.time() < deadline:
        time.sleep(0.1)
    return _session_processes(sid)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_ctrl_c_prints_one_line_and_leaves_no_worker_and_no_temp_file(data_copy, tmp_path, codec):
    out = tmp_path / "c"
    proc = _start(data_copy, out, "--image-codec", codec)
    _wait_for_workers(proc, out)
    os.killpg(proc.pid, signal.SIGINT)   # what a terminal does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()] and err.startswith("interrupted:")
    assert not _gone(proc.pid), "no worker outlives the build"
    assert not list((out / "data").glob("*.tmp*")), "no temp file is left"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_exit_when_the_build_is_killed(data_copy, tmp_path, sig):
    out = tmp_path / "c"
    proc = _start(data_copy, out)
    _wait_for_workers(proc, out)
    os.kill(proc.pid, sig)   # the build alone: its workers get no signal
    proc.wait(timeout=60)
    left = _gone(proc.pid)
    for pid in left:   # do not leave them to the machine, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers alive {WORKERS_GONE_S} s after the build died: {left}"
    if sig == signal.SIGTERM:   # a SIGTERM is a Ctrl-C: temp files go too
        assert not list((out / "data").glob("*.tmp*"))


def test_a_damaged_manifest_beside_our_files_is_rebuilt_not_refused(data_copy, tmp_path):
    out = tmp_path / "c"
    build(data_copy, out)
    (out / "manifest.json").write_text("{ truncated")
    assert build(data_copy, out).images == 5 and Manifest.load(out).images


def test_a_damaged_header_is_redone_by_the_next_build_even_without_verify(data_copy, tmp_path):
    from east_cache.reader import CacheDataset
    out = tmp_path / "c"
    build(data_copy, out)
    victim = data_path(out, Manifest.load(out).files[1].name)
    head = victim.read_bytes()
    victim.write_bytes(head.replace(b"'|u1'", b"'<u2'", 1))   # a page file's bytes turned into 16-bit values
    with pytest.raises(CacheError, match=rf"{victim.name} is damaged or missing: its header says uint16"):
        CacheDataset(out)
    build(data_copy, out, seed=1)   # any build that is not a no-op sees it, and neither keeps nor copies from it
    build(data_copy, out)
    assert victim.read_bytes() == head
    CacheDataset(out)[0]


@pytest.mark.parametrize("marker", ["garbage", "[1, {}]", "fifo"])
def test_a_damaged_list_of_bad_files_is_named_not_a_traceback_or_a_hang(data_copy, tmp_path, capsys, marker):
    out = tmp_path / "c"
    build(data_copy, out)
    path = out / ".corrupt.json"
    if marker == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(marker)
    assert cli_build(data_copy, out, "--seed", "1") == 2
    err = capsys.readouterr().err
    # cli_main without prog runs as east-cache: the hint names that command
    assert err.startswith("error: ") and ".corrupt.json" in err and "run `east-cache verify" in err
