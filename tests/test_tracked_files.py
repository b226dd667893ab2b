"""The repository tracks source, docs and small results only: no file over MAX_BYTES and no archive (a wheel, a
zip, a tarball), which a stray `pip download` or build leaves at the root and a clone then carries for ever."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_BYTES = 1 << 20   # 1 MiB: the largest tracked file today, a benchmark figure, is a fraction of it
ARCHIVE = re.compile(r"\.(whl|zip|gz|tgz|bz2|xz|zst|7z|egg)$|\.tar(\.|$)", re.IGNORECASE)


def tracked() -> list[str]:
    """The files git tracks in this checkout (the index: a file staged for removal is gone); a skip outside one."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout")
    return [name for name in done.stdout.decode().split("\0") if name]


def test_no_archive_is_tracked():
    archives = [name for name in tracked() if ARCHIVE.search(name)]
    assert archives == [], f"archives tracked (git rm them): {archives}"


def test_no_tracked_file_is_over_the_size_limit():
    names = tracked()
    big = [(name, size) for name in names if (path := REPO / name).is_file()
           and (size := path.stat().st_size) > MAX_BYTES]
    assert big == [], f"files over {MAX_BYTES} bytes tracked: {big}"
    assert len(names) > 50, "the listing holds the repository's files"


def test_the_archive_rule_knows_wheels_and_tarballs():
    assert all(ARCHIVE.search(n) for n in ("pyflakes-4.1.0-py2.py3-none-any.whl", "a.zip", "b.tar.gz", "c.tar",
                                           "d.tgz", "e.json.gz"))
    assert not any(ARCHIVE.search(n) for n in ("train.py", "docs/guide.md", "results.png", "tarfile_notes.md"))
