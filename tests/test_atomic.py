"""Durable writes (east_cache/atomic.py) sync what they write where they should: the new file before its rename, its
folder after it; fsync_tree every file, then every folder, deepest first. (conftest.py turns fsync into a check of its
descriptor for the rest of the tests, which check what the writes leave, not the disk's flush.)"""
from __future__ import annotations

import os

import pytest

from east_cache import atomic


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths fsync is called on, in order, and what each path's name held at that moment."""
    calls = []

    def fsync(fd):
        os.fstat(fd)
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
    monkeypatch.setattr(atomic.os, "fsync", fsync)
    return calls


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names an fd's file through /proc")
def test_a_file_is_synced_under_its_temp_name_before_the_rename_and_its_folder_after(tmp_path, synced):
    target = tmp_path / "f.json"
    target.write_text("old")
    atomic.write_atomic(target, "new")
    assert target.read_text() == "new" and [p for p in os.listdir(tmp_path)] == ["f.json"]
    assert synced == [str(tmp_path / f"f.json.tmp{os.getpid()}"), str(tmp_path)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names an fd's file through /proc")
def test_a_tree_is_synced_files_first_then_folders_deepest_first(tmp_path, synced):
    (tmp_path / "g" / "a").mkdir(parents=True)
    (tmp_path / "g" / "a" / "x").write_bytes(b"1")
    (tmp_path / "g" / "y").write_bytes(b"2")
    atomic.fsync_tree(tmp_path / "g")
    assert synced == [str(tmp_path / "g" / "a" / "x"), str(tmp_path / "g" / "a"), str(tmp_path / "g" / "y"),
                      str(tmp_path / "g")]


def test_a_write_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path, synced):
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["f"] and synced == []
