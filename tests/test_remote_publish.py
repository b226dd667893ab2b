"""Building to a bucket (moto's S3 server on loopback): files before the manifest, old files deleted only after it,
only changed files uploaded, one build at a time, and an upload killed or cut leaves the previous cache whole."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
from pathlib import Path

import pytest
from helpers import edit_ufo, first_image, make_tiny_cache

from east_cache.errors import BuildError, RemoteError
from east_cache.store import remote
from east_cache.build import publish
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest
from east_cache.store.remote import transfer
from east_cache.build.bucket_lock import LOCK_OBJECT, BucketLock, Holder, bucket_lock
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
from east_cache.location import Location, filesystem
from east_cache.build.publish import Publisher
from east_cache.retry import RetryPolicy

FAST = RetryPolicy(attempts=2, first_wait_s=0.01)
TINY_FILES = {"strategy": "image", "variants": 2, "geometry": "build"}


def commit(dest: Location, staging: Path) -> publish.PublishReport:
    with bucket_lock(dest, policy=FAST), Publisher(dest, staging, policy=FAST) as pub:
        return pub.commit()


def stored_sizes(s3) -> dict[str, int]:
    return {p.split("/", 2)[2]: info["size"] for p, info in s3.fs().find(s3.url("c"), detail=True).items()}


def local_sizes(cache: Path) -> dict[str, int]:
    return {p.relative_to(cache).as_posix(): p.stat().st_size for p in cache.rglob("*")
            if p.is_file() and p.name != ".lock" and p.parts[len(cache.parts)] in ("data", "manifest.json")}


class Recorder:
    """A storage client that notes every call that writes or deletes, in order."""

    def __init__(self, fs, calls: list):
        self.fs, self.calls = fs, calls

    def __getattr__(self, name):
        attr = getattr(self.fs, name)
        if name not in ("put_file", "pipe_file", "rm", "rm_file", "mv"):
            return attr

        def call(*args, **kw):
            self.calls.append((name, args[1] if name == "put_file" else args[0]))
            return attr(*args, **kw)
        return call


@pytest.mark.slow
def test_files_go_up_before_the_manifest_and_old_ones_go_only_after_it(s3, data_copy, tmp_path, monkeypatch):
    dest, staging = Location.parse(s3.url("c")), tmp_path / "staging"
    first = commit(dest, make_tiny_cache(data_copy, staging, **TINY_FILES))
    old = {f.name for f in Manifest.load(staging).files}
    assert first.uploaded_files == len(old) and first.stored_files == 0
    edit_ufo(data_copy, lambda images: images[first_image(images)]["words"].popitem())
    make_tiny_cache(data_copy, staging, **TINY_FILES)   # one image changed: one file renamed
    new = {f.name for f in Manifest.load(staging).files}
    calls = []
    for module in (publish, transfer):
        monkeypatch.setattr(module, "filesystem", lambda loc: Recorder(filesystem(loc), calls))
    report = commit(dest, staging)
    assert report.uploaded_files == len(new - old) == 1 and report.stored_files == len(new & old)
    assert report.deleted_files == len(old - new) == 1
    kinds = [k for k, _ in calls]
    manifest_at = [i for i, (k, p) in enumerate(calls) if k == "pipe_file" and p.endswith("manifest.json")]
    assert len(manifest_at) == 1
    assert all(i < manifest_at[0] for i, k in enumerate(kinds) if k == "put_file")
    assert all(i > manifest_at[0] for i, k in enumerate(kinds) if k == "rm") and "rm" in kinds
    assert stored_sizes(s3) == local_sizes(staging)   # exactly the new cache, nothing of the old one
    local = LocalCache(dest, LocalCacheSettings(folder=tmp_path / "lc", retry=FAST))
    assert set(local.units) == new


def test_a_second_build_is_refused_and_a_dead_ones_lock_can_be_broken(s3):
    dest = Location.parse(s3.url("c"))
    first, second = BucketLock(dest, FAST), BucketLock(dest, FAST)
    first.acquire()
    with pytest.raises(BuildError) as e:
        second.acquire()
    assert f"host {socket.gethostname()}, pid {os.getpid()}, still running" in str(e.value)
    assert "--break-lock" in str(e.value) and str(dest) in str(e.value)
    second.acquire(break_lock=True)
    first.release()   # no longer its lock: left alone
    assert BucketLock(dest, FAST).holder().token == second.mine.token
    second.release()
    assert not s3.fs().exists(s3.url("c", LOCK_OBJECT))
    dead = Holder(socket.gethostname(), _finished_pid(), 0.0, "t")
    s3.fs().pipe_file(s3.url("c", LOCK_OBJECT), json.dumps(dead.__dict__).encode())
    with pytest.raises(BuildError, match="no longer running on this host"):
        BucketLock(dest, FAST).acquire()


def _finished_pid() -> int:
    p = multiprocessing.get_context("fork").Process(target=lambda: None)
    p.start()
    p.join()
    return p.pid


def _commit_in_child(dest: Location, staging: Path) -> None:
    commit(dest, staging)


@pytest.mark.slow
def test_a_killed_upload_leaves_the_previous_cache_whole(s3, faulty, data_copy, tmp_path):
    dest, staging = Location.parse(s3.url("c")), tmp_path / "staging"
    commit(dest, make_tiny_cache(data_copy, staging, strategy="image", variants=2, crop="read", geometry="build"))
    before = stored_sizes(s3)
    edit_ufo(data_copy, lambda images: images[first_image(images)]["words"].popitem())
    make_tiny_cache(data_copy, staging, strategy="image", variants=2, crop="read", geometry="build")
    faulty.stall(100_000)   # upstream: past the lock and the listing, inside the new data file's upload
    child = multiprocessing.get_context("fork").Process(target=_commit_in_child, args=(dest, staging))
    child.start()
    assert faulty.stalled.wait(120)   # a generous bound: only a broken upload takes it
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    stored = stored_sizes(s3)
    assert {k: v for k, v in stored.items() if k != LOCK_OBJECT} == before   # nothing new, nothing half
    with pytest.raises(BuildError, match="--break-lock"):
        commit(dest, staging)
    with bucket_lock(dest, break_lock=True, policy=FAST), Publisher(dest, staging, policy=FAST) as pub:
        pub.commit()
    assert stored_sizes(s3) == local_sizes(staging)


@pytest.mark.slow
def test_an_upload_cut_every_time_ends_in_one_error_and_no_manifest(s3, faulty, no_client_retries, tiny_data,
                                                                     tmp_path):
    dest, staging = Location.parse(s3.url("c")), make_tiny_cache(tiny_data, tmp_path / "staging", **TINY_FILES)
    with bucket_lock(dest, policy=FAST):
        faulty.cut(20_000, direction="up", times=10**6)
        with pytest.raises(RemoteError) as e, Publisher(dest, staging, policy=FAST) as pub:
            pub.commit()
        faulty.heal()
    assert str(e.value).startswith(s3.url("c", "data")) and "\n" not in str(e.value)
    assert "testing-secret-key" not in str(e.value)
    sizes, local = stored_sizes(s3), local_sizes(staging)
    assert "manifest.json" not in sizes and all(local[k] == v for k, v in sizes.items())


def test_a_staging_folder_pulled_from_the_bucket_rebuilds_with_nothing_to_upload(s3, tiny_data, tmp_path):
    dest = Location.parse(s3.url("c"))
    commit(dest, make_tiny_cache(tiny_data, tmp_path / "a", **TINY_FILES))
    with Publisher(dest, tmp_path / "b", policy=FAST) as pub:
        assert pub.pull() == len(Manifest.load(tmp_path / "a").files)
    report = build_cache(Manifest.load(tmp_path / "a").config, [tiny_data], tmp_path / "b", jobs=1, quiet=True)
    assert report.up_to_date
    again = commit(dest, tmp_path / "b")
    assert again.uploaded_files == 0 and again.deleted_files == 0


def test_the_package_doc_names_every_module():
    doc = remote.__doc__
    modules = {p.stem for p in Path(remote.__file__).parent.glob("*.py")} - {"__init__"}
    assert all(f"\n{m} " in doc for m in modules)


def test_building_to_a_file_url_puts_the_cache_there_under_one_lock(tiny_data, tmp_path):
    """file:// has no atomic put: files and the manifest go to temp names, then move into place."""
    dest, staging = Location.parse(f"file://{tmp_path / 'stored'}"), tmp_path / "staging"
    make_tiny_cache(tiny_data, staging, **TINY_FILES)
    with bucket_lock(dest, policy=FAST):
        with pytest.raises(BuildError, match="another build"):
            BucketLock(dest, FAST).acquire()
        with Publisher(dest, staging, policy=FAST) as pub:
            pub.commit()
    assert local_sizes(tmp_path / "stored") == local_sizes(staging)
    assert not (tmp_path / "stored" / LOCK_OBJECT).exists()
