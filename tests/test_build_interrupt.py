"""An interrupted build keeps its finished samples, the whole strategy's too: the rows finished in a file left
unfinished stay in its staging file with a journal of them, the message says what is kept in numbers, and the
next build of the same command makes only the rest, into the same bytes as an uninterrupted build. A journaled
row whose bytes changed is made again; a build of other samples removes the leftovers before it starts."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import cache_bytes, ctrl_c_then_cleanup_fails, small_config

from east_cache.errors import BuildStopped
from east_cache.build.run import build_cache
from east_cache.build.journal import JOURNAL_MAGIC, read_journal
from east_cache.store.manifest import Manifest
from east_cache.tools.verify import verify

REPO = Path(__file__).resolve().parents[1]
# Runs the rest of the command line with SIGINT at its default (a background job inherits it ignored).
DEFAULT_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
KEPT = re.compile(r"(\d+) of (\d+) samples are kept for the next build \(0 of 1 file\(s\) finished, (\d+) sample")


def whole(**over):
    return small_config(**{"strategy": "whole", "variants": 4, **over})


def build(data, out, cfg, **kw):
    return build_cache(cfg, [data], out, jobs=1, quiet=True, **kw)


def interrupt_after(monkeypatch, batches: int) -> None:
    """Ctrl-C once `batches` batches of rows have come back (each is journaled before the progress line)."""
    seen = []

    def update(self, n):
        seen.append(n)
        if len(seen) == batches:
            raise KeyboardInterrupt

    monkeypatch.setattr("east_cache.build.run.Progress.update", update)


def temp_files(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "data").iterdir() if ".tmp" in p.name)


def stopped_and_resumed(data, tmp_path, monkeypatch, cfg, interrupt) -> Path:
    """A build of cfg into tmp_path/c stopped by what interrupt(monkeypatch context) sets up keeps the rows of its
    unfinished file (its staging file and journal stay, no other temp file), says how many in numbers, and the
    next build makes only the rest, into the bytes of a build never interrupted. The cache's folder."""
    out = tmp_path / "c"
    build(data, tmp_path / "fresh", cfg)
    with monkeypatch.context() as m:
        interrupt(m)
        with pytest.raises(BuildStopped) as stopped:
            build(data, out, cfg)
    kept, total, unfinished = map(int, KEPT.search(str(stopped.value)).groups())
    assert (kept, total) == (unfinished, 20) and 0 < kept < total, stopped.value
    assert len(temp_files(out)) == 2, "the staging file and its journal stay, and nothing else"
    r = build(data, out, cfg)
    assert (r.resumed, r.computed) == (kept, total - kept)
    assert cache_bytes(out) == cache_bytes(tmp_path / "fresh"), "the same bytes as a build never interrupted"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("over", [{}, {"image_codec": "jpeg"}, {"crop": "build"}],
                         ids=["pages-raw", "pages-jpeg", "crops"])
def test_a_whole_build_interrupted_keeps_its_finished_samples_and_the_next_makes_the_rest(
        data_copy, tmp_path, monkeypatch, over):
    out = stopped_and_resumed(data_copy, tmp_path, monkeypatch, whole(**over), lambda m: interrupt_after(m, 2))
    assert not verify(out) and temp_files(out) == []


def test_a_journaled_row_whose_bytes_changed_is_made_again_and_a_torn_entry_ends_the_journal(
        data_copy, tmp_path, monkeypatch):
    cfg, out = whole(crop="build"), tmp_path / "c"
    build(data_copy, tmp_path / "fresh", cfg)
    with monkeypatch.context() as m:
        interrupt_after(m, 2)
        with pytest.raises(BuildStopped):
            build(data_copy, out, cfg)
    journal, stage = (next((out / "data").glob(f"*{suffix}")) for suffix in (".rows.tmp", ".npy.tmp"))
    entries, end = read_journal(journal)
    assert end == journal.stat().st_size and len(entries) == 8
    with open(journal, "ab") as f:   # a kill in the middle of an entry
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00\x01\x02")
    rows = np.load(stage, mmap_mode="r+")   # one byte of a journaled row's image changes under it
    rows["image"][entries[3][1].row].flat[7] ^= 0xFF
    rows.flush()
    del rows
    r = build(data_copy, out, cfg)
    assert (r.resumed, r.computed) == (7, 13)
    assert cache_bytes(out) == cache_bytes(tmp_path / "fresh")


def test_a_build_of_other_samples_removes_an_interrupted_builds_staging_first(data_copy, tmp_path, monkeypatch):
    out = tmp_path / "c"
    with monkeypatch.context() as m:
        interrupt_after(m, 2)
        with pytest.raises(BuildStopped):
            build(data_copy, out, whole())
    left, seen = temp_files(out), []
    r = build(data_copy, out, whole(seed=9), on_file=lambda name: seen.append(temp_files(out)))
    assert left and seen == [[]], "gone before the new file is in place, not only at the garbage collection"
    assert r.resumed == 0 and r.computed == 20 and temp_files(out) == []


def test_ctrl_c_inside_the_sidecars_write_is_the_interrupt_and_keeps_the_journaled_rows(data_copy, tmp_path,
                                                                                          monkeypatch):
    """Ctrl-C inside np.savez, as zipfile opens a member: savez's own close then raises ValueError over the
    KeyboardInterrupt. That is still the interrupt (once a traceback, exit status 1, and the rows lost)."""
    real = np.savez

    def savez(path, **arrays):
        if not isinstance(path, Path):   # the journal's rows, into memory
            return real(path, **arrays)
        with open(path, "wb") as f:
            f.write(b"PK")   # the torn sidecar a real interrupt leaves
        ctrl_c_then_cleanup_fails()

    stopped_and_resumed(data_copy, tmp_path, monkeypatch, whole(crop="build"),
                        lambda m: m.setattr("east_cache.build.run.np.savez", savez))


def test_a_zarr_file_keeps_no_rows_and_the_message_says_so(data_copy, tmp_path, monkeypatch):
    cfg, out = small_config(strategy="chunked", chunk_size=6, variants=4, crop="build"), tmp_path / "c"
    with monkeypatch.context() as m:
        interrupt_after(m, 1)
        with pytest.raises(BuildStopped, match=r"samples are kept for the next build \(\d+ of 4 file\(s\) finished, "
                                               r"0 sample\(s\) written into unfinished ones\)"):
            build(data_copy, out, cfg, file_format="zarr")
    assert temp_files(out) == []


# A real Ctrl-C and a real SIGKILL of the command.

def _start(data, out) -> subprocess.Popen:
    args = [sys.executable, "-c", DEFAULT_SIGINT, "-m", "preprocess", "build", "--data", str(data), "--out", str(out),
            "--jobs", "2", "--strategy", "whole", "--variants", "60", "--geometry", "build", "--input-size", "96",
            "--image-size", "192"]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _wait_for_journaled_rows(proc: subprocess.Popen, out: Path, rows: int) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        journal = next((out / "data").glob("*.rows.tmp"), None) if (out / "data").is_dir() else None
        if journal is not None and len(read_journal(journal)[0]) >= rows:
            return
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"the build ended (rc {proc.returncode}) before it could be interrupted")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_whole_build_ctrl_c_or_killed_goes_on_where_it_stopped(data_copy, tmp_path, sig):
    out = tmp_path / "c"
    proc = _start(data_copy, out)
    _wait_for_journaled_rows(proc, out, 8)
    os.killpg(proc.pid, sig)   # the whole group, as a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=60)
    last = err.decode().strip().splitlines()[-1]
    journal = next((out / "data").glob("*.rows.tmp"))
    kept = len(read_journal(journal)[0])
    assert journal.read_bytes().startswith(JOURNAL_MAGIC) and 8 <= kept < 300
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err.decode()
        assert last == (f"interrupted: the previous cache, if any, is intact; {kept} of 300 samples are kept for the "
                        f"next build (0 of 1 file(s) finished, {kept} sample(s) written into unfinished ones); run "
                        f"the same command again to make the other {300 - kept}")
    again = _start(data_copy, out)
    _, err = again.communicate(timeout=300)
    err = err.decode()
    assert again.returncode == 0, err
    plan = next(line for line in err.splitlines() if "to write:" in line)
    assert plan.endswith(f"{300 - kept} sample(s) to make, 0 to copy from the previous cache, {kept} kept from the "
                         f"interrupted build"), plan
    assert f"computed {300 - kept}, copied 0 from the previous cache, kept {kept} from the interrupted build" in err
    assert not verify(out) and temp_files(out) == [] and Manifest.load(out).build.computed == 300 - kept
